//! The tool allowlist lives in the core crate; re-exported here.

pub(crate) use toolexec::AllowList;
pub use toolexec::glob_match;
