//! The gateway driven by the MCP Inspector's CLI mode (v2), over stdio
//! (spawning the `gateway_server` example) and streamable HTTP (an
//! in-process gateway behind a bearer token).

use crate::support::gateway as support;

use std::time::Duration;

use serde_json::{Value, json};
use toolexec::Secret;
use toolexec_mcp::gateway::{Expose, HttpAuth};

struct Inspector {
    node: String,
    cli: String,
    home: std::path::PathBuf,
}

impl Inspector {
    fn find(test: &str) -> Option<Inspector> {
        let node = support::dep(test, "TOOLEXEC_NODE22")?;
        let cli = support::dep(test, "TOOLEXEC_MCP_INSPECTOR")?;
        let home =
            std::env::temp_dir().join(format!("toolexec-inspector-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        Some(Inspector { node, cli, home })
    }

    /// Runs `inspector --cli --format json ARGS...`; returns the exit code
    /// and the JSON printed on stdout (a result) or stderr (an error
    /// envelope).
    async fn run(&self, args: &[&str]) -> (i32, Value) {
        let mut cmd = tokio::process::Command::new(&self.node);
        cmd.arg(&self.cli)
            .args(["--cli", "--format", "json"])
            .args(args)
            // Keep the Inspector's catalog, client config and secrets out of $HOME.
            .env("MCP_CATALOG_PATH", self.home.join("mcp.json"))
            .env("MCP_CLIENT_CONFIG_PATH", self.home.join("client.json"))
            .env("HOME", &self.home);
        let (status, stdout, stderr) =
            support::run_with_timeout(cmd, Duration::from_secs(120)).await;
        let json = if stdout.trim().is_empty() {
            stderr
                .lines()
                .rev()
                .find(|l| l.starts_with('{'))
                .unwrap_or_default()
        } else {
            stdout.trim()
        };
        let value = serde_json::from_str(json).unwrap_or_else(|e| {
            panic!(
                "inspector {args:?}: no JSON output ({e}):\nstdout:\n{stdout}\nstderr:\n{stderr}"
            )
        });
        (status.code().unwrap_or(-1), value)
    }
}

impl Drop for Inspector {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn tool_names(v: &Value) -> Vec<String> {
    v["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {v}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn inspector_cli_over_stdio() {
    let Some(inspector) = Inspector::find("inspector_cli_over_stdio") else {
        return;
    };
    let bin = support::gateway_server_bin();
    let bin = bin.to_str().unwrap();

    // --strict fails (exit 6) on error-severity schema portability problems.
    let (code, v) = inspector
        .run(&[
            "--method",
            "tools/list",
            "--strict",
            bin,
            "--expose",
            "meta",
        ])
        .await;
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        tool_names(&v),
        [
            "search_tools",
            "list_namespaces",
            "describe_tool",
            "run_tool",
            "run_chain",
            "execute_code"
        ]
    );
    for t in v["result"]["tools"].as_array().unwrap() {
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
    }

    let (code, v) = inspector
        .run(&[
            "--method",
            "tools/call",
            "--tool-name",
            "run_tool",
            "--tool-args-json",
            r#"{"tool_id": "math:add", "args": {"a": 2, "b": 3}}"#,
            bin,
        ])
        .await;
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["result"]["isError"], false);
    assert_eq!(v["result"]["structuredContent"], json!({"result": 5}));

    let (code, v) = inspector
        .run(&[
            bin,
            "--method",
            "tools/call",
            "--tool-name",
            "search_tools",
            // Variadic: keep it last.
            "--tool-arg",
            "query=sha256 hash",
        ])
        .await;
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["result"]["structuredContent"]["results"][0]["id"],
        "hash:sha256"
    );

    // An isError result: the Inspector exits 5 and prints the error envelope.
    let (code, v) = inspector
        .run(&[
            "--method",
            "tools/call",
            "--tool-name",
            "run_tool",
            "--tool-args-json",
            r#"{"tool_id": "math:add", "args": {"a": "two", "b": 3}}"#,
            bin,
        ])
        .await;
    assert_eq!(code, 5, "{v}");
    let text = v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("validation_input"), "{v}");

    let (code, v) = inspector
        .run(&["--method", "tools/list", bin, "--expose", "all"])
        .await;
    assert_eq!(code, 0, "{v}");
    let names = tool_names(&v);
    assert!(names.contains(&"math__add".to_owned()) && !names.contains(&"run_tool".to_owned()));
}

#[tokio::test(flavor = "multi_thread")]
async fn inspector_cli_over_http() {
    let Some(inspector) = Inspector::find("inspector_cli_over_http") else {
        return;
    };
    let (addr, shutdown) = support::start_http(
        support::demo_gateway(Expose::Both),
        HttpAuth::Bearer(Secret::new("insp-token")),
    )
    .await;
    let url = format!("http://{addr}/mcp");
    let auth = "Authorization: Bearer insp-token";

    let (code, v) = inspector
        .run(&[&url, "--header", auth, "--method", "tools/list"])
        .await;
    assert_eq!(code, 0, "{v}");
    let names = tool_names(&v);
    assert!(names.contains(&"run_chain".to_owned()) && names.contains(&"hash__sha256".to_owned()));

    let (code, v) = inspector
        .run(&[
            &url,
            "--header",
            auth,
            "--method",
            "tools/call",
            "--tool-name",
            "hash__sha256",
            "--tool-arg",
            "text=hello",
        ])
        .await;
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["result"]["structuredContent"]["hex"],
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );

    // No token: refused (the Inspector would start OAuth; --stored-auth-only stops it).
    let (code, v) = inspector
        .run(&[&url, "--stored-auth-only", "--method", "tools/list"])
        .await;
    assert_ne!(code, 0, "{v}");
    assert!(v["error"].is_object(), "{v}");

    // A foreign Origin: 403.
    let (code, v) = inspector
        .run(&[
            &url,
            "--header",
            auth,
            "--header",
            "Origin: http://evil.example.com",
            "--method",
            "tools/list",
        ])
        .await;
    assert_ne!(code, 0, "{v}");
    assert_eq!(v["error"]["status"], 403, "{v}");
    shutdown.cancel();
}
