//! The runtime conformance suite: the one hostile corpus
//! (`toolexec_conformance::corpus`) against every sandbox runtime, through
//! the `Runtime` contract only. A runtime that is unavailable here prints
//! `SKIPPED: conformance: <runtime>: <reason>`, or fails when
//! `TOOLEXEC_REQUIRE_RUNTIMES` (a comma list) names it
//! (`toolexec_testkit::skip_runtime`). Failures come as a table of runtime × case.
//!
//! `TOOLEXEC_CONFORMANCE_CASES` (comma list of substrings) runs only the
//! matching cases.

mod subjects;

use std::future::Future;
use std::time::Instant;

use toolexec_conformance::{Case, Host, corpus, run_corpus, table};

fn selected() -> Vec<Case> {
    let filter = std::env::var("TOOLEXEC_CONFORMANCE_CASES").unwrap_or_default();
    let wanted: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    corpus()
        .into_iter()
        .filter(|c| wanted.is_empty() || wanted.iter().any(|w| c.name.contains(w)))
        .collect()
}

async fn suite<F: Future<Output = Result<subjects::Built, String>>>(name: &str, build: F) {
    let started = Instant::now();
    let built = match build.await {
        Ok(built) => built,
        Err(why) => {
            toolexec_testkit::skip_runtime("conformance", name, why);
            return;
        }
    };
    assert_eq!(built.subject.name, name);
    eprintln!(
        "{name}: profile {}, cgroup limits {}, mechanisms {:?}",
        built.subject.profile.as_str(),
        built.subject.cgroup_limits,
        built
            .subject
            .mechanisms
            .iter()
            .map(|m| (&m.name, m.enforced))
            .collect::<Vec<_>>()
    );
    let host = Host::new().expect("host fixtures");
    let results = run_corpus(built.runtime.as_ref(), &built.subject, &host, &selected()).await;
    let report = table(&[(name.to_owned(), results.clone())]);
    eprintln!(
        "{report}{name}: suite wall time {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        results.iter().all(|r| !r.verdict.is_failure()),
        "{name} fails the conformance suite:\n{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bubblewrap() {
    suite("bubblewrap", subjects::bubblewrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runc() {
    suite("runc", subjects::oci(toolexec_oci::OciFlavor::Runc)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runsc() {
    suite("runsc", subjects::oci(toolexec_oci::OciFlavor::Runsc)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker() {
    suite("docker", subjects::docker()).await;
}
