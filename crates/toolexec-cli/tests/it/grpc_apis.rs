//! `[[grpc]]` through the CLI and the MCP gateway, against the grpcio
//! fixture of toolexec-grpc (described by its server reflection).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde_json::{Value, json};

use crate::support::{PY_SERVE_CLIENT, TempDir, dep, run, toml_str, toolexec};

const GRPC_SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../toolexec-grpc/tests/fixtures/grpc_server.py"
);

/// The fixture, killed on drop.
struct GrpcServer {
    child: Child,
    port: u16,
}

impl GrpcServer {
    fn start(python: &str, out: &Path) -> GrpcServer {
        let (child, port) =
            toolexec_testkit::spawn_printing_port(Command::new(python).arg(GRPC_SERVER).arg(out));
        GrpcServer { child, port }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(dir: &TempDir, port: u16) -> PathBuf {
    dir.write_private("token", "Bearer grpc-test-token\n");
    dir.write(
        "toolexec.toml",
        &format!(
            r#"
[builtins]
enabled = false

[[grpc]]
name = "echo"
url = {url}
timeout = "10s"
exclude = ["toolexec.test.v1.Echo/Fail"]
metadata = {{ authorization = {{ file = "token" }} }}
"#,
            url = toml_str(format!("http://127.0.0.1:{port}")),
        ),
    )
}

fn cli(dir: &Path, config: &Path, args: &[&str]) -> crate::support::Out {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    run(&mut toolexec(dir, &all))
}

#[test]
fn grpc_methods_through_the_cli() {
    let Some(python) = dep("grpc_cli", "TOOLEXEC_PYTHON") else {
        return;
    };
    let dir = TempDir::new("grpc-cli");
    let server = GrpcServer::start(&python, &dir.path().join("gen"));
    let config = config(&dir, server.port);

    let out = cli(
        dir.path(),
        &config,
        &["--json", "tools", "list", "--namespace", "echo"],
    );
    out.expect_code(0);
    let ids: Vec<String> = out.json()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        ids,
        ["echo:echo_count", "echo:echo_say", "echo:vault_whoami"]
    );

    let out = cli(
        dir.path(),
        &config,
        &[
            "--json",
            "run",
            "echo:echo_say",
            r#"{"text": "hi", "big": 7}"#,
        ],
    );
    out.expect_code(0);
    assert_eq!(out.json()["value"]["text"], "hi", "{out}");
    assert_eq!(out.json()["value"]["echoed"]["big"], "7", "{out}");
    // The metadata from the file reaches the server.
    let out = cli(
        dir.path(),
        &config,
        &["--json", "run", "echo:vault_whoami", "{}"],
    );
    out.expect_code(0);
    assert_eq!(out.json()["value"], json!({"subject": "tester"}), "{out}");
    let out = cli(
        dir.path(),
        &config,
        &["--json", "run", "echo:echo_count", r#"{"to": 2}"#],
    );
    out.expect_code(0);
    assert_eq!(
        out.json()["value"],
        json!({"messages": [{"n": 1}, {"n": 2}]}),
        "{out}"
    );
    // Bad arguments: exit 2, validation_input, before any call.
    let out = cli(
        dir.path(),
        &config,
        &["run", "echo:echo_say", r#"{"text": 3}"#],
    );
    out.expect_code(2);
    assert!(out.stderr.contains("validation_input"), "{out}");

    let out = cli(dir.path(), &config, &["tools", "types", "echo"]);
    out.expect_code(0);
    assert!(out.stdout.contains("echo_say"), "{out}");
}

#[test]
fn grpc_methods_through_the_gateway() {
    let Some(python) = dep("grpc_gateway", "TOOLEXEC_PYTHON") else {
        return;
    };
    let dir = TempDir::new("grpc-gateway");
    let server = GrpcServer::start(&python, &dir.path().join("gen"));
    let config = config(&dir, server.port);
    let calls = json!([
        {"tool": "echo__echo_say", "args": {"text": "through MCP", "mood": "HAPPY"}},
        {"tool": "run_tool", "args": {"tool_id": "echo:echo_count", "args": {"to": 3}}},
        {"tool": "echo__echo_say", "args": {"delayMs": "soon"}},
    ]);
    let out = run(Command::new(&python)
        .arg(PY_SERVE_CLIENT)
        .arg(calls.to_string())
        .arg(crate::support::BIN)
        .args([
            "serve",
            "--expose",
            "both",
            "--config",
            config.to_str().unwrap(),
        ])
        .current_dir(dir.path()));
    out.expect_code(0);
    let summary = out.last_line_json();
    let tools: Vec<&str> = summary["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(tools.contains(&"echo__vault_whoami"), "{tools:?}");
    let calls = summary["calls"].as_array().unwrap();
    assert_eq!(calls[0]["is_error"], false, "{}", calls[0]);
    assert_eq!(
        calls[0]["structured"]["text"], "through MCP",
        "{}",
        calls[0]
    );
    assert_eq!(
        calls[0]["structured"]["echoed"]["mood"], "HAPPY",
        "{}",
        calls[0]
    );
    assert_eq!(calls[1]["is_error"], false, "{}", calls[1]);
    assert!(
        calls[1]["text"].as_str().unwrap().contains("\"n\":3"),
        "{}",
        calls[1]
    );
    assert_eq!(calls[2]["is_error"], true, "{}", calls[2]);
    assert!(
        calls[2]["text"]
            .as_str()
            .unwrap()
            .starts_with("validation_input"),
        "{}",
        calls[2]
    );
}

#[test]
fn grpc_configuration_errors_name_their_key() {
    let dir = TempDir::new("grpc-config");
    for (table, key, words) in [
        (
            "[[grpc]]\nname = \"math\"\nurl = \"http://h:1\"\n",
            "grpc[0].name",
            "taken",
        ),
        (
            "[[grpc]]\nname = \"g\"\nurl = \"ftp://h:1\"\n",
            "grpc[0].url",
            "scheme",
        ),
        (
            "[[grpc]]\nname = \"g\"\nurl = \"http://h:1\"\nmax_concurrency = 0\n",
            "grpc[0].max_concurrency",
            "greater than 0",
        ),
        (
            "[[grpc]]\nname = \"g\"\nurl = \"http://h:1\"\nmetadata = { grpc-status = \"1\" }\n",
            "grpc[0].metadata.grpc-status",
            "reserved",
        ),
        (
            "[[grpc]]\nname = \"g\"\nurl = \"https://h:1\"\nca_file = \"nope.pem\"\n",
            "grpc[0].ca_file",
            "cannot read",
        ),
    ] {
        let config = dir.write("bad.toml", table);
        let out = run(&mut toolexec(
            dir.path(),
            &["--config", config.to_str().unwrap(), "tools", "list"],
        ));
        out.expect_code(2);
        assert!(out.stderr.contains(key), "{key}: {out}");
        assert!(out.stderr.contains(words), "{words}: {out}");
        assert_eq!(out.stderr.matches("invalid_").count(), 1, "{out}");
    }
}
