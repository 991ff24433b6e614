//! Hostile scripts stuck in one long native call (QuickJS never checks for
//! interrupts inside a builtin): however many arrive, the engine never runs
//! more threads than its pool's size, counted by the kernel, and every
//! caller gets a typed answer on time. Its own test binary: the thread
//! count is per process, and the stuck threads die with the process.

mod support;

use std::time::{Duration, Instant};

use support::*;
use toolexec_code::CodeLimit;

/// Worker threads of the engine alive in this process right now, counted
/// by the kernel (`/proc/self/task/*/comm`), not by the engine.
fn worker_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|name| name.trim_end() == "toolexec-code")
                })
                .count()
        })
        .unwrap_or(0)
}

/// One native call that runs for minutes without an interrupt check: a
/// naive substring search, 2^21 candidate positions times a 2 MiB compare.
/// Building the strings takes ~100 ms in a debug build.
const HOSTILE: &str = "const m = 2 ** 21; const hay = 'a'.repeat(2 * m); \
                       const needle = 'a'.repeat(m) + 'b'; return hay.includes(needle);";

/// Long enough for the script to reach its native call on a loaded machine.
const HOSTILE_TIMEOUT: u64 = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_native_calls_never_occupy_more_than_the_pool() {
    const POOL: usize = 2;
    let f = fixture(POOL);
    assert_eq!(worker_threads(), 0);
    let check = |what: &str| {
        let threads = worker_threads();
        let stats = f.engine.stats();
        println!("{what}: {threads} worker threads, {stats:?}");
        assert!(threads <= POOL, "{what}: {threads} worker threads");
        assert!(
            stats.threads <= POOL && stats.busy <= POOL,
            "{what}: {stats:?}"
        );
    };
    // Hostile requests, one after another, until every slot is stuck (a
    // request the machine was too slow to bring to its native call within
    // the timeout ends as a plain timeout instead).
    let mut stuck = 0;
    for i in 0.. {
        assert!(i < 10, "the hostile script never got stuck");
        let started = Instant::now();
        let out = f.run(HOSTILE, quick(HOSTILE_TIMEOUT)).await;
        let took = started.elapsed();
        check(&format!("request {i} ({took:?})"));
        // A typed answer on time (generous margin: the grace is 500 ms).
        assert_eq!(out.status.limit(), Some(CodeLimit::Timeout), "{out:?}");
        assert!(took < Duration::from_secs(6), "request {i}: {took:?}");
        let text = out.status.failure_text(None).unwrap();
        if text.contains("long native operation") {
            stuck += 1;
            if stuck == POOL {
                break;
            }
        }
    }
    // They count as stuck once they are still running 5 s later.
    let deadline = Instant::now() + Duration::from_secs(30);
    while f.engine.stats().stuck < POOL {
        assert!(Instant::now() < deadline, "{:?}", f.engine.stats());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = f.engine.stats();
    assert_eq!((stats.busy, stats.stuck, stats.threads), (POOL, POOL, POOL));
    // Every slot is held by stuck work: more hostile requests are refused
    // at once with their own limit, instead of each starting a thread that
    // burns a core.
    for i in 0..4 {
        let out = f.run(HOSTILE, quick(HOSTILE_TIMEOUT)).await;
        check(&format!("refused request {i}"));
        assert_eq!(out.status.limit(), Some(CodeLimit::Workers), "{out:?}");
        let text = out.status.failure_text(None).unwrap();
        assert!(text.starts_with("limit_exceeded: workers: "), "{text}");
    }
    // Concurrent ones too.
    let burst: Vec<_> = (0..8)
        .map(|_| {
            let engine = f.engine.clone();
            tokio::spawn(async move {
                let req = toolexec_code::CodeRequest::new(HOSTILE).with_limits(quick(200));
                engine.execute(req).await
            })
        })
        .collect();
    for task in burst {
        let out = task.await.unwrap();
        assert_eq!(out.status.limit(), Some(CodeLimit::Workers), "{out:?}");
    }
    check("after the burst");

    // A caller that drops its execution does not free the slot either: the
    // worker keeps it, and counts as stuck once the grace has passed.
    let g = fixture(1);
    for attempt in 0.. {
        assert!(attempt < 5, "the dropped hostile script never got stuck");
        let run = g.run(HOSTILE, quick(600_000));
        let dropped = tokio::time::timeout(Duration::from_millis(HOSTILE_TIMEOUT), run).await;
        assert!(dropped.is_err(), "{dropped:?}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while g.engine.stats().stuck == 0 && g.engine.stats().busy == 1 {
            assert!(Instant::now() < deadline, "{:?}", g.engine.stats());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if g.engine.stats().stuck == 1 {
            break;
        }
    }
    let out = g.run("return 1", quick(HOSTILE_TIMEOUT)).await;
    assert_eq!(out.status.limit(), Some(CodeLimit::Workers), "{out:?}");
    assert_eq!(g.engine.stats().threads, 1);
    assert!(worker_threads() <= POOL + 1, "{}", worker_threads());
}
