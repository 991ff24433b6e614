//! # toolexec-conformance
//!
//! One hostile-unit corpus every sandbox runtime must pass, driven only
//! through the [`toolexec_runtime::Runtime`] contract: the same cases, the
//! same expectations, for bubblewrap, runc, runsc and Docker, as root and
//! as an unprivileged user. This crate holds the corpus as data
//! ([`corpus`]) and the runner ([`run_corpus`]); the test binary
//! (`tests/conformance/main.rs`) builds each runtime and fails with a table of
//! runtime × case.
//!
//! Place in the workspace: a test-only crate over the runtime contract; every
//! sandbox runtime is its subject (see ARCHITECTURE.md).
//!
//! Expectations adapt to a runtime only through its [`Subject`]: what it
//! claims ([`toolexec_runtime::Runtime::mechanisms`], unit kinds, profile)
//! and the few facts its constructor states (the image root, a user-space
//! kernel). Known failures are listed in one place, [`KNOWN_FAILURES`],
//! each with its reason; a known failure that passes fails the suite, so
//! the entry goes with the fix.
//!
//! ```no_run
//! use toolexec_conformance::{Host, Kernel, Root, Subject, corpus, run_corpus};
//! # async fn example(runtime: &dyn toolexec_runtime::Runtime) {
//! let subject = Subject::of(runtime, Root::HostUsr, Kernel::Host);
//! let host = Host::new().unwrap();
//! let results = run_corpus(runtime, &subject, &host, &corpus()).await;
//! assert!(results.iter().all(|r| !r.verdict.is_failure()));
//! # }
//! ```

mod case;
pub mod check;
mod corpus;
mod host;
mod known;
mod probe;
mod report;
mod run;
mod subject;

pub use case::{Case, Drive, Observed};
pub use corpus::corpus;
pub use host::{Host, HostProcess, SECRET_ENV};
pub use known::{KNOWN_FAILURES, KnownFailure, known_failure};
pub use probe::{PROBE_PY, PROBE_RS, frame};
pub use report::table;
pub use run::{CaseResult, Verdict, run_case, run_corpus};
pub use subject::{Kernel, Root, Subject};
