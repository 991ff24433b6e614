//! The gateway driven by the official Python MCP SDK
//! (`tests/fixtures/py_gateway_client.py`), over stdio (spawning the
//! `gateway_server` example) and over streamable HTTP (an in-process
//! gateway).

use crate::support::gateway as support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use toolexec::Secret;
use toolexec_mcp::gateway::{Expose, HttpAuth};

fn fixture() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/py_gateway_client.py")
        .display()
        .to_string()
}

async fn run_client(python: &str, args: &[&str]) -> Value {
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(fixture()).args(args);
    let (status, stdout, stderr) = support::run_with_timeout(cmd, Duration::from_secs(120)).await;
    assert!(
        status.success(),
        "python client failed ({status}):\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("bad summary {last:?}: {e}\n{stderr}"))
}

fn check_summary(s: &Value) {
    assert_eq!(s["protocol_version"], "2025-11-25", "{s}");
    assert_eq!(s["server_name"], "toolexec");
    assert_eq!(s["list_changed"], true);
    assert_eq!(s["search_top"], "hash:sha256");
    assert!(s["namespaces"].as_array().unwrap().contains(&json!("math")));
    assert_eq!(s["run_tool"], json!({"result": 5.0}));
    assert_eq!(s["direct"], json!({"result": 42.0}));
    assert_eq!(s["validation_text"], "validation_input");
    assert_eq!(s["validation_code"], "validation_input");
    assert_eq!(s["chain_output"], json!({"text": "hi"}));
    assert_eq!(
        s["execute_code"],
        json!({"kind": "ok", "value": {"sum": 5, "hex": "ba7816"}, "stdout": "sum 5\n",
               "calls": ["math:add", "hash:sha256"]}),
        "{s}"
    );
    assert_eq!(s["execute_code_error"], "syntax_error");
    assert_eq!(
        s["progress"],
        json!([
            [1.0, 3.0, "step 1"],
            [2.0, 3.0, "step 2"],
            [3.0, 3.0, "step 3"]
        ]),
        "{s}"
    );
    assert_eq!(s["progress_result"], json!({"steps": 3}));
    assert_eq!(s["unknown_tool_error"], -32602);
    assert_eq!(s["malformed_error"], -32602);
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sdk_over_stdio() {
    let Some(python) = support::dep("python_sdk_over_stdio", "TOOLEXEC_PYTHON") else {
        return;
    };
    let bin = support::gateway_server_bin();
    let s = run_client(
        &python,
        &["stdio", bin.to_str().unwrap(), "--expose", "both"],
    )
    .await;
    check_summary(&s);
    // Chunks arrive as log messages on the same stream, before the result.
    assert_eq!(
        s["chunks"],
        json!([{"step": 1}, {"step": 2}, {"step": 3}]),
        "{s}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sdk_over_http() {
    let Some(python) = support::dep("python_sdk_over_http", "TOOLEXEC_PYTHON") else {
        return;
    };
    let (addr, shutdown) = support::start_http(
        support::demo_gateway(Expose::Both),
        HttpAuth::Bearer(Secret::new("py-token")),
    )
    .await;
    let url = format!("http://{addr}/mcp");
    let s = run_client(&python, &["http", &url, "py-token"]).await;
    check_summary(&s);
    assert_eq!(s["wrong_token_status"], 401);
    shutdown.cancel();
}
