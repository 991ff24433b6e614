//! Executions return all their memory: resident memory stays flat over
//! thousands of executions ending every way (Linux; its own test binary so
//! no other test allocates meanwhile).

mod support;

use support::*;

fn rss_kb() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    Some(statm.split_whitespace().nth(1)?.parse::<usize>().ok()? * 4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_do_not_leak() {
    let f = fixture(2);
    let scripts = [
        ("return (await tools.math.add({a: 1, b: 2})).result", 10_000),
        (
            "await tools.test.sleep({ms: 0}); throw new Error('x')",
            10_000,
        ),
        ("for (;;) {}", 5),
        ("await tools.test.fail({message: 'm'})", 10_000),
        ("const a = []; for (;;) a.push('x'.repeat(1000));", 10_000),
        ("let x = ;", 10_000),
        ("tools.test.hang(); return 1", 10_000),
    ];
    let run = async |n: usize| {
        for i in 0..n {
            let (code, ms) = scripts[i % scripts.len()];
            let limits = toolexec_code::CodeLimits {
                memory_bytes: 8 << 20,
                ..quick(ms)
            };
            f.run(code, limits).await;
        }
    };
    run(140).await; // warm up allocator arenas and worker threads
    let Some(before) = rss_kb() else { return };
    run(700).await;
    let after = rss_kb().unwrap();
    // One leaked runtime is ~200 KB; 700 would be ~140 MB.
    assert!(
        after < before + 20_000,
        "RSS grew from {before} KB to {after} KB"
    );
}
