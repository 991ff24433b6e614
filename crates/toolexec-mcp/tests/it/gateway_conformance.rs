//! The MCP conformance suite (`@modelcontextprotocol/conformance`, server
//! mode) against the streamable HTTP gateway. The scenarios listed in
//! `docs/mcp-conformance.md` as passing must keep passing; the others need
//! server features or fixture tools a tools-only gateway does not have (see
//! that file for each one).

use crate::support::gateway as support;

use std::path::Path;
use std::time::Duration;

use toolexec_mcp::gateway::{Expose, HttpAuth};

/// Scenarios of the default ("active") suite that pass.
const PASSING_ACTIVE: [&str; 9] = [
    "server-initialize",
    "ping",
    "logging-set-level",
    "completion-complete",
    "tools-list",
    "resources-list",
    "prompts-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
];

/// Scenarios of the "pending" suite that pass (run one by one).
const PASSING_PENDING: [&str; 1] = ["server-sse-polling"];

/// Outcome of one scenario: `Some(failures)` when it ran.
fn scenario_failures(dir: &Path, scenario: &str) -> Option<Vec<String>> {
    support::failed_checks(dir, &format!("server-{scenario}-"), "errorMessage")
}

async fn run_suite(node: &str, cli: &str, url: &str, out: &Path, extra: &[&str]) -> String {
    let mut cmd = tokio::process::Command::new(node);
    cmd.arg(cli)
        .args(["server", "--url", url, "-o"])
        .arg(out)
        .args(extra)
        .current_dir(out);
    let (_status, stdout, stderr) = support::run_with_timeout(cmd, Duration::from_secs(300)).await;
    // The exit status is 1 whenever any scenario fails; judge per scenario.
    format!("{stdout}\n{stderr}")
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance_suite_server_mode() {
    let test = "conformance_suite_server_mode";
    let Some(node) = support::dep(test, "TOOLEXEC_NODE22") else {
        return;
    };
    let Some(cli) = support::dep(test, "TOOLEXEC_MCP_CONFORMANCE") else {
        return;
    };
    let (addr, shutdown) = support::start_http(
        support::demo_gateway(Expose::Both),
        HttpAuth::InsecureNoAuth,
    )
    .await;
    let url = format!("http://{addr}/mcp");
    let out = std::env::temp_dir().join(format!("toolexec-conformance-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();

    let mut log = run_suite(&node, &cli, &url, &out, &[]).await;
    for scenario in PASSING_PENDING {
        log += &run_suite(&node, &cli, &url, &out, &["--scenario", scenario]).await;
    }
    shutdown.cancel();

    let mut broken = Vec::new();
    for scenario in PASSING_ACTIVE.iter().chain(&PASSING_PENDING) {
        match scenario_failures(&out, scenario) {
            None => broken.push(format!("{scenario}: did not run")),
            Some(f) if !f.is_empty() => broken.push(format!("{scenario}: {}", f.join("; "))),
            Some(_) => {}
        }
    }
    assert!(
        broken.is_empty(),
        "conformance regressions:\n{}\n\nsuite output:\n{log}",
        broken.join("\n")
    );
    let _ = std::fs::remove_dir_all(&out);
}
