//! Executions whose deadline passes while their engine is still being
//! built, the way a loaded machine makes short timeouts do: the caller's
//! timer raises the abort flag during `JS_NewRuntime`/`JS_NewContext`,
//! where QuickJS does not survive a refused allocation (this once crashed
//! the leak test with a segmentation fault). Every such execution must end
//! as a plain timeout (or finish, or find every worker still busy), never
//! as an internal error or a crash.
//! Its own test binary, so a crash is attributed to this path.

mod support;

use support::*;
use toolexec_code::{CodeLimit, CodeRequest, CodeStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_passing_while_the_engine_starts_end_as_timeouts() {
    let f = fixture(4);
    let mut timeouts = 0;
    for round in 0..500 {
        // Timeouts of 0 to 3 ms: the abort lands anywhere from before the
        // runtime exists to after the script ran.
        let batch: Vec<_> = (0..4u64)
            .map(|i| {
                let engine = f.engine.clone();
                tokio::spawn(async move {
                    engine
                        .execute(
                            CodeRequest::new("return [1, 2].map(x => x + 1)").with_limits(quick(i)),
                        )
                        .await
                })
            })
            .collect();
        for task in batch {
            let out = task.await.unwrap();
            match &out.status {
                CodeStatus::Ok => {}
                CodeStatus::LimitExceeded {
                    limit: CodeLimit::Timeout,
                    ..
                } => timeouts += 1,
                // On a machine slow enough (valgrind) for workers to pass
                // their deadlines by the grace, they count as stuck.
                CodeStatus::LimitExceeded {
                    limit: CodeLimit::Workers,
                    ..
                } => {}
                other => panic!("round {round}: {other:?}"),
            }
        }
    }
    println!("{timeouts} of 2000 executions timed out");
    assert!(timeouts > 0, "no deadline passed during start-up");
    f.assert_healthy().await;
}
