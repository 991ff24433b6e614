//! A script stuck in expensive native operations that neither allocate nor
//! reach QuickJS's interrupt check (every 10,000 operations) for a long
//! time: the caller still gets its timeout on time, with the log so far,
//! and the pool slot goes to a fresh worker. Its own test binary, so the
//! abandoned thread dies with the process when the test ends.

mod common;

use std::time::{Duration, Instant};

use common::*;
use toolexec_code::{CodeLimit, CodeStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stuck_in_native_code_is_abandoned_on_time() {
    let f = fixture(1);
    let started = Instant::now();
    // Each indexOf scans a 2 MB string without allocating: thousands of
    // them pass between two interrupt checks.
    let out = f
        .run(
            "console.log('start'); await tools.math.add({a: 1, b: 2}); \
             const s = 'x'.repeat(2e6); for (;;) s.indexOf('y');",
            quick(300),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(out.status.limit(), Some(CodeLimit::Timeout), "{out:#?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    // Whatever the outcome path, the log and output so far are there.
    assert_eq!(out.stdout, "start\n");
    assert_eq!(out.tool_calls.len(), 1);
    assert!(out.tool_calls[0].ok);
    if let CodeStatus::LimitExceeded { message, .. } = &out.status {
        println!("{message}");
    }
    // The single-slot pool serves the next execution at once.
    let started = Instant::now();
    f.assert_healthy().await;
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}
