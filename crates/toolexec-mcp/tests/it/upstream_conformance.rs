//! The MCP conformance suite (`@modelcontextprotocol/conformance`, client
//! mode) against toolexec's upstream client, through the
//! `conformance_client` example: connect, list and call tools, and every
//! OAuth sign-in scenario. The scenarios listed here must pass; those the
//! client does not pass are listed with the reason (also in
//! `docs/mcp-conformance.md`).

use crate::support::gateway as support;

use std::path::Path;
use std::time::Duration;

/// Client scenarios that pass.
const PASSING: [&str; 24] = [
    "initialize",
    "tools_call",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
    "auth/cross-app-access-complete-flow",
];

/// Client scenarios that do not pass, and why (run too: one that starts
/// passing must move to [`PASSING`]).
const NOT_PASSING: [(&str, &str); 2] = [
    (
        "auth/2025-03-26-oauth-metadata-backcompat",
        "its metadata's issuer (/oauth) differs from the discovery URL's; refused \
         per RFC 8414 section 3.3 (mix-up protection)",
    ),
    (
        "elicitation-sep1034-client-defaults",
        "the upstream client does not answer elicitation requests yet (issue 12, item 4)",
    ),
];

/// The failed checks of a scenario, or `None` when it did not run.
fn failures(out: &Path, scenario: &str) -> Option<Vec<String>> {
    let (dir, name) = match scenario.rsplit_once('/') {
        Some((d, n)) => (out.join(d), n),
        None => (out.to_path_buf(), scenario),
    };
    support::failed_checks(&dir, &format!("{name}-"), "description")
}

/// Runs one scenario with the driver; returns its output.
async fn run_scenario(
    node: &str,
    cli: &str,
    bin: &Path,
    out: &Path,
    scenario: &str,
) -> (String, String) {
    let mut cmd = tokio::process::Command::new(node);
    cmd.arg(cli)
        .arg("client")
        .arg("--command")
        .arg(bin)
        .args(["--scenario", scenario, "-o"])
        .arg(out)
        .current_dir(out);
    // The exit status is 1 whenever a check fails; judge by the checks.
    let (_status, stdout, stderr) = support::run_with_timeout(cmd, Duration::from_secs(120)).await;
    (stdout, stderr)
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance_suite_client_mode() {
    let test = "conformance_suite_client_mode";
    let Some(node) = support::dep(test, "TOOLEXEC_NODE22") else {
        return;
    };
    let Some(cli) = support::dep(test, "TOOLEXEC_MCP_CONFORMANCE") else {
        return;
    };
    let bin = tokio::task::spawn_blocking(|| support::example_bin("conformance_client"))
        .await
        .unwrap();
    let out = std::env::temp_dir().join(format!(
        "toolexec-conformance-client-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();

    let mut log = String::new();
    let mut broken = Vec::new();
    for scenario in PASSING {
        let (stdout, stderr) = run_scenario(&node, &cli, &bin, &out, scenario).await;
        match failures(&out, scenario) {
            None => broken.push(format!("{scenario}: did not run")),
            Some(f) if !f.is_empty() => broken.push(format!("{scenario}: {}", f.join("; "))),
            Some(_) => continue,
        }
        log += &format!("--- {scenario}\n{stdout}\n{stderr}\n");
    }
    let mut fixed = Vec::new();
    for (scenario, _why) in NOT_PASSING {
        run_scenario(&node, &cli, &bin, &out, scenario).await;
        if failures(&out, scenario).is_some_and(|f| f.is_empty()) {
            fixed.push(scenario);
        }
    }
    assert!(fixed.is_empty(), "now passing, move to PASSING: {fixed:?}");
    assert!(
        broken.is_empty(),
        "conformance regressions:\n{}\n\nsuite output:\n{log}",
        broken.join("\n")
    );
    let _ = std::fs::remove_dir_all(&out);
}
