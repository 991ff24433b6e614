//! The tool-call log is bounded in bytes whatever the calls carry: 60 calls
//! with a 4 MiB argument each, under a 16 MiB script heap, keep a log of a
//! few kilobytes (records of sizes, digests and previews), not 240 MiB of
//! copied arguments.
//!
//! One test in this file, so the process's peak resident set
//! (`/proc/self/status` `VmHWM`) is this run's: it is printed (run with
//! `--nocapture`) and held to a generous bound far below the old growth.

use std::time::Duration;

use serde_json::{Value, json};
use toolexec::Exec;
use toolexec_code::{CodeLimits, CodeStatus, ExecCodeExt};

const CALLS: usize = 60;
const ARG_BYTES: usize = 4 << 20;

/// `VmHWM` (peak resident set) of this process, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// The SHA-256 of `text`, hex, from the built-in tool.
async fn sha256(exec: &Exec, text: &str) -> String {
    let out = exec
        .run_tool("hash:sha256", json!({"text": text}))
        .await
        .expect("hash:sha256");
    out.value["hex"].as_str().expect("hex").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_calls_with_4_mib_arguments_keep_a_small_log() {
    // Tools accept arguments of up to 8 MiB here (1 MiB by default).
    let exec = Exec::builder()
        .catalog(toolexec_builtins::catalog())
        .limits(toolexec::Limits {
            max_input_bytes: 8 << 20,
            ..toolexec::Limits::default()
        })
        .build();
    let big = "a".repeat(ARG_BYTES);
    // What each call returns, and the digest of each call's arguments as
    // compact JSON.
    let expected_hex = sha256(&exec, &big).await;
    let args_json = serde_json::to_string(&json!({"text": big})).unwrap();
    let args_digest = sha256(&exec, &args_json).await;
    drop((big, args_json));

    let limits = CodeLimits {
        memory_bytes: 16 << 20,
        max_tool_calls: 100,
        timeout: Duration::from_secs(120),
        ..CodeLimits::default()
    };
    let script = format!(
        "const s = 'a'.repeat({ARG_BYTES});
         const hexes = new Set();
         for (let i = 0; i < {CALLS}; i++) hexes.add((await tools.hash.sha256({{text: s}})).hex);
         return [...hexes];"
    );
    let before = peak_rss_kib();
    let out = exec.execute_code(&script, limits).await;
    let after = peak_rss_kib();
    eprintln!(
        "VmHWM before the script: {before} KiB, after: {after} KiB (+{} KiB)",
        after - before
    );

    // The run is right: every call hashed the whole argument.
    assert_eq!(out.status, CodeStatus::Ok, "{:?}", out.status);
    assert_eq!(out.value, Some(json!([expected_hex])));
    assert_eq!(out.tool_calls.len(), CALLS);

    // Each record keeps the size, digest and a preview of the arguments.
    let records: Vec<Value> = out
        .tool_calls
        .iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    let arg_len = (ARG_BYTES + r#"{"text":""}"#.len()) as u64;
    for r in &records {
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["args"]["bytes"], arg_len, "{r}");
        assert_eq!(r["args"]["sha256"], args_digest.as_str(), "{r}");
    }
    let preview = records[0]["args"]["preview"].as_str().unwrap();
    assert!(preview.starts_with(r#"{"text":"aaaa"#) && preview.len() <= 256);

    // The log's retained bytes: its records as serialized.
    let retained: usize = out
        .tool_calls
        .iter()
        .map(|c| serde_json::to_vec(c).unwrap().len())
        .sum();
    eprintln!("log: {} records, {retained} bytes", out.tool_calls.len());
    assert!(
        retained <= 64 << 10,
        "{retained} bytes of log for {CALLS} calls"
    );
    // Peak memory: the old log copied every argument (240 MiB here).
    assert!(
        after - before < 128 << 10,
        "peak RSS grew by {} KiB",
        after - before
    );
}
