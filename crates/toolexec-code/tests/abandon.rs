//! A script stuck in expensive native operations that neither allocate nor
//! reach QuickJS's interrupt check (every 10,000 operations) for a long
//! time: the caller still gets its timeout on time, with the log so far,
//! and the stuck worker keeps its pool slot until it returns. Its own test
//! binary, so the stuck thread dies with the process when the test ends.

mod support;

use std::time::{Duration, Instant};

use support::*;
use toolexec_code::{CodeLimit, CodeStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stuck_in_native_code_is_answered_on_time_and_keeps_its_slot() {
    let f = fixture(1);
    let started = Instant::now();
    // Each indexOf scans a 20 KB string without allocating: 10,000 of them
    // pass between two interrupt checks (seconds in a debug build).
    let out = f
        .run(
            "console.log('start'); await tools.math.add({a: 1, b: 2}); \
             const s = 'x'.repeat(2e4); for (;;) s.indexOf('y');",
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
    // The worker stops at its next interrupt check and its single slot then
    // serves the next execution; no second thread was ever started.
    let deadline = Instant::now() + Duration::from_secs(60);
    while f.engine.stats().busy > 0 {
        assert!(Instant::now() < deadline, "{:?}", f.engine.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "the worker returned {:?} after the start",
        started.elapsed()
    );
    f.assert_healthy().await;
    assert_eq!(f.engine.stats().threads, 1, "{:?}", f.engine.stats());
    assert_eq!(f.engine.stats().stuck, 0, "{:?}", f.engine.stats());
}
