//! `toolexec serve` end to end: the real binary driven by the MCP Inspector
//! (CLI mode) and the official Python MCP SDK, over stdio and streamable
//! HTTP, with upstream MCP servers declared in `toolexec.toml`
//! (`@modelcontextprotocol/server-everything` over stdio and HTTP, and
//! Python SDK servers over stdio).
//!
//! Needs `TOOLEXEC_NODE22`, `TOOLEXEC_MCP_EVERYTHING`, `TOOLEXEC_MCP_INSPECTOR`
//! and `TOOLEXEC_PYTHON` (`scripts/install-test-deps.sh`): a test whose
//! dependency is missing prints `SKIPPED: <test>: <why>`, or fails under `CI`.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::{
    Background, INITIALIZE, PY_DEMO_UPSTREAM, PY_GATEWAY_CLIENT, PY_SERVE_CLIENT,
    PY_UPSTREAM_SERVER, StdioSession, TempDir, dep, deps, free_port, post_status, run, toml_str,
    toolexec,
};

const META_TOOLS: [&str; 6] = [
    "search_tools",
    "list_namespaces",
    "describe_tool",
    "run_tool",
    "run_chain",
    "execute_code",
];

/// The MCP Inspector's CLI mode, with its state kept out of `$HOME`.
pub(crate) struct Inspector {
    node: String,
    cli: String,
    home: TempDir,
}

impl Inspector {
    pub(crate) fn find(test: &str) -> Option<Inspector> {
        let v = deps(test, &["TOOLEXEC_NODE22", "TOOLEXEC_MCP_INSPECTOR"])?;
        Some(Inspector {
            node: v[0].clone(),
            cli: v[1].clone(),
            home: TempDir::new("inspector"),
        })
    }

    /// `inspector --cli --format json OPTIONS -- TARGET...`: the exit code
    /// and the JSON printed on stdout (a result) or stderr (an error).
    pub(crate) fn run(&self, options: &[&str], target: &[&str]) -> (i32, Value) {
        let home = self.home.path();
        let out = run(Command::new(&self.node)
            .arg(&self.cli)
            .args(["--cli", "--format", "json"])
            .args(options)
            // `--` keeps the target's own options (`--config`!) away from the Inspector.
            .arg("--")
            .args(target)
            .current_dir(home)
            .env("HOME", home)
            .env("MCP_CATALOG_PATH", home.join("mcp.json"))
            .env("MCP_CLIENT_CONFIG_PATH", home.join("client.json")));
        let json = if out.stdout.trim().is_empty() {
            out.stderr
                .lines()
                .rev()
                .find(|l| l.starts_with('{'))
                .unwrap_or_default()
        } else {
            out.stdout.trim()
        };
        let value = serde_json::from_str(json)
            .unwrap_or_else(|e| panic!("inspector {options:?} {target:?}: no JSON ({e}):\n{out}"));
        (out.code().unwrap_or(-1), value)
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

/// A config whose only server is `demo` (tests/fixtures/py_demo_upstream.py),
/// which offers `demo:progress` as toolexec-mcp's py_gateway_client.py expects.
fn demo_config(dir: &TempDir, python: &str) -> PathBuf {
    dir.write(
        "demo.toml",
        &format!(
            "[[servers]]\nname = \"demo\"\ncommand = {}\nargs = [{}]\n",
            toml_str(python),
            toml_str(PY_DEMO_UPSTREAM)
        ),
    )
}

/// Runs toolexec-mcp's py_gateway_client.py in `cwd`; returns its summary.
fn gateway_client(cwd: &Path, python: &str, args: &[&str]) -> Value {
    let out = run(Command::new(python)
        .arg(PY_GATEWAY_CLIENT)
        .args(args)
        .current_dir(cwd));
    out.expect_code(0);
    out.last_line_json()
}

/// What py_gateway_client.py must see from `toolexec serve --expose both`
/// with the demo server configured.
fn check_gateway_summary(s: &Value) {
    assert_eq!(s["protocol_version"], "2025-11-25", "{s}");
    assert_eq!(s["server_name"], "toolexec", "{s}");
    assert_eq!(s["list_changed"], true, "{s}");
    assert_eq!(s["search_top"], "hash:sha256", "{s}");
    let namespaces = s["namespaces"].as_array().unwrap();
    assert!(namespaces.contains(&json!("math")) && namespaces.contains(&json!("demo")));
    assert_eq!(s["run_tool"], json!({"result": 5.0}), "{s}");
    assert_eq!(s["direct"], json!({"result": 42.0}), "{s}");
    assert_eq!(s["validation_text"], "validation_input", "{s}");
    assert_eq!(s["validation_code"], "validation_input", "{s}");
    assert_eq!(s["chain_output"], json!({"text": "hi"}), "{s}");
    // Progress from the upstream server, relayed through toolexec.
    assert_eq!(
        s["progress"],
        json!([
            [1.0, 3.0, "step 1"],
            [2.0, 3.0, "step 2"],
            [3.0, 3.0, "step 3"]
        ]),
        "{s}"
    );
    assert_eq!(s["progress_result"], json!({"steps": 3}), "{s}");
    assert_eq!(s["unknown_tool_error"], -32602, "{s}");
    assert_eq!(s["malformed_error"], -32602, "{s}");
}

/// Runs tests/fixtures/py_serve_client.py in `cwd` against the stdio server
/// `target`: `calls` is `[{tool, args}]`; returns its summary.
pub(crate) fn serve_client(cwd: &Path, python: &str, calls: &Value, target: &[&str]) -> Value {
    let out = run(Command::new(python)
        .arg(PY_SERVE_CLIENT)
        .arg(calls.to_string())
        .args(target)
        .current_dir(cwd));
    out.expect_code(0);
    out.last_line_json()
}

/// `toolexec ARGS serve --http 127.0.0.1:PORT ...` on a free port, listening.
pub(crate) fn serve_http(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (Background, u16) {
    let port = free_port();
    let bind = format!("127.0.0.1:{port}");
    let mut cmd = toolexec(dir, args);
    cmd.args(["--http", &bind]).envs(env.iter().copied());
    let mut server = Background::spawn(&mut cmd);
    server.wait_listening(port);
    (server, port)
}

/// A config with server-everything and the Python fixture server, both over stdio.
fn stdio_upstreams_config(dir: &TempDir, node: &str, everything: &str, python: &str) -> PathBuf {
    dir.write(
        "toolexec.toml",
        &format!(
            r#"[[servers]]
name = "everything"
command = {node}
args = [{everything}, "stdio"]
timeout = "20s"

[[servers]]
name = "py"
command = {python}
args = [{fixture}, "stdio"]
"#,
            node = toml_str(node),
            everything = toml_str(everything),
            python = toml_str(python),
            fixture = toml_str(PY_UPSTREAM_SERVER),
        ),
    )
}

#[test]
fn inspector_lists_and_calls_meta_tools_over_stdio() {
    let Some(inspector) = Inspector::find("inspector_lists_and_calls_meta_tools_over_stdio") else {
        return;
    };
    let serve = [support::BIN, "serve"];
    // --strict: exit 6 on error-severity schema portability problems.
    let (code, v) = inspector.run(&["--method", "tools/list", "--strict"], &serve);
    assert_eq!(code, 0, "{v}");
    assert_eq!(tool_names(&v), META_TOOLS);

    let (code, v) = inspector.run(
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "search_tools",
            "--tool-args-json",
            r#"{"query": "add two numbers", "limit": 3}"#,
        ],
        &serve,
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["result"]["isError"], false, "{v}");
    assert_eq!(
        v["result"]["structuredContent"]["results"][0]["id"], "math:add",
        "{v}"
    );

    let (code, v) = inspector.run(
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "run_tool",
            "--tool-args-json",
            r#"{"tool_id": "math:add", "args": {"a": 2, "b": 3}}"#,
        ],
        &serve,
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["result"]["isError"], false, "{v}");
    assert_eq!(
        v["result"]["structuredContent"],
        json!({"result": 5}),
        "{v}"
    );

    // A tool error is an isError result (the Inspector exits 5).
    let (code, v) = inspector.run(
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "run_tool",
            "--tool-args-json",
            r#"{"tool_id": "math:add", "args": {"a": "two", "b": 3}}"#,
        ],
        &serve,
    );
    assert_eq!(code, 5, "{v}");
    let text = v["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.starts_with("validation_input"), "{v}");
}

#[test]
fn expose_all_publishes_catalog_tools() {
    let Some(inspector) = Inspector::find("expose_all_publishes_catalog_tools") else {
        return;
    };
    let serve = [support::BIN, "serve", "--expose", "all"];
    let (code, v) = inspector.run(&["--method", "tools/list"], &serve);
    assert_eq!(code, 0, "{v}");
    let names = tool_names(&v);
    assert!(names.contains(&"math__add".to_owned()), "{names:?}");
    assert!(names.contains(&"hash__sha256".to_owned()), "{names:?}");
    assert!(!names.iter().any(|n| META_TOOLS.contains(&n.as_str())));

    let (code, v) = inspector.run(
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "math__add",
            "--tool-args-json",
            r#"{"a": 2, "b": 40}"#,
        ],
        &serve,
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["result"]["structuredContent"],
        json!({"result": 42}),
        "{v}"
    );
}

#[test]
fn python_sdk_over_stdio() {
    let Some(python) = dep("python_sdk_over_stdio", "TOOLEXEC_PYTHON") else {
        return;
    };
    let dir = TempDir::new("py-stdio");
    let config = demo_config(&dir, &python);
    let s = gateway_client(
        dir.path(),
        &python,
        &[
            "stdio",
            support::BIN,
            // As in the README's client config: `--config` after `serve`.
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--expose",
            "both",
        ],
    );
    check_gateway_summary(&s);
}

/// `toolexec serve` over stdio relays what its upstream asks during a
/// call (sampling, elicitation, roots, log messages) to the client that
/// made it, and to no one when `toolexec run` makes the call.
#[test]
fn serve_relays_what_an_upstream_asks_to_the_calling_client() {
    let Some(python) = dep(
        "serve_relays_what_an_upstream_asks_to_the_calling_client",
        "TOOLEXEC_PYTHON",
    ) else {
        return;
    };
    let dir = TempDir::new("relay");
    let config = dir.write(
        "asking.toml",
        &format!(
            "[[servers]]\nname = \"asking\"\ncommand = {}\nargs = [{}, \"stdio\"]\n",
            toml_str(&python),
            toml_str(support::PY_ASKING_SERVER)
        ),
    );
    let out = run(Command::new(&python)
        .arg(support::PY_RELAY_CLIENT)
        .args(["answers", "stdio", support::BIN, "serve", "--config"])
        .arg(&config)
        .args(["--expose", "all"])
        .current_dir(dir.path()));
    out.expect_code(0);
    let s = out.last_line_json();
    assert_eq!(s["sampling"]["ok"]["text"], "echo: hello", "{s}");
    assert_eq!(
        s["elicitation"]["ok"]["data"],
        json!({"name": "Ada"}),
        "{s}"
    );
    // Roots are not relayed unless configured: one upstream session serves
    // every client, and a server may keep the roots it was told.
    assert_eq!(s["roots"]["error"]["code"], -32601, "{s}");
    assert!(
        s["roots"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not configured to relay it")),
        "{s}"
    );
    assert_eq!(
        s["logs_info"],
        json!([["info", "chatty info"], ["warning", "chatty warning"]]),
        "{s}"
    );
    assert_eq!(
        s["logs_warning"],
        json!([["warning", "chatty warning"]]),
        "{s}"
    );

    // Without a client, the server is not told it may ask.
    let out = run(&mut toolexec(
        dir.path(),
        &[
            "--config",
            config.to_str().unwrap(),
            "--json",
            "run",
            "asking:ask_llm",
            r#"{"prompt": "hi"}"#,
        ],
    ));
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["value"]["error"]["code"], -32601, "{v}");
    assert!(
        v["value"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("only when it serves clients as a gateway")),
        "{v}"
    );
}

#[test]
fn python_sdk_over_http_with_a_token_file() {
    let Some(python) = dep("python_sdk_over_http_with_a_token_file", "TOOLEXEC_PYTHON") else {
        return;
    };
    let dir = TempDir::new("py-http");
    let config = demo_config(&dir, &python);
    let token = dir.write_private("token", "http-secret-token\n");
    let (mut server, port) = serve_http(
        dir.path(),
        &[
            "--config",
            config.to_str().unwrap(),
            "serve",
            "--token-file",
            token.to_str().unwrap(),
            "--expose",
            "both",
        ],
        &[],
    );
    let url = format!("http://127.0.0.1:{port}/mcp");
    // The trailing newline of the token file is not part of the token.
    let s = gateway_client(dir.path(), &python, &["http", &url, "http-secret-token"]);
    check_gateway_summary(&s);
    assert_eq!(s["wrong_token_status"], 401, "{s}");

    assert_eq!(post_status(port, &[], INITIALIZE), 401);
    assert_eq!(
        post_status(
            port,
            &["Authorization: Bearer http-secret-token"],
            INITIALIZE
        ),
        200
    );

    // Ctrl-C stops the server cleanly.
    let status = server.interrupt(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        server.output()
    );
}

#[test]
fn http_needs_a_token_source() {
    let dir = TempDir::new("no-token");
    let port = free_port().to_string();
    // A configured server that cannot be reached: usage errors are found
    // before any server is contacted, so they are reported, with exit 2.
    dir.write(
        "toolexec.toml",
        &format!(
            "[[servers]]\nname = \"down\"\nurl = \"http://127.0.0.1:{}/mcp\"\n",
            free_port()
        ),
    );
    let out = run(&mut toolexec(dir.path(), &["serve", "--http", &port]));
    out.expect_code(2);
    assert!(out.stderr.contains("--token-file"), "{out}");
    assert!(!out.stderr.contains("backend_unavailable"), "{out}");
    assert!(out.stdout.is_empty(), "{out}");
    let out = run(&mut toolexec(
        dir.path(),
        &["serve", "--http", "localhost", "--insecure-no-auth"],
    ));
    out.expect_code(2);
    assert!(out.stderr.contains("expected PORT or IP:PORT"), "{out}");
    // Without the usage error, the unreachable server is the problem.
    let out = run(&mut toolexec(
        dir.path(),
        &["serve", "--http", &port, "--insecure-no-auth"],
    ));
    out.expect_code(1);
    assert!(out.stderr.contains("backend_unavailable: down"), "{out}");

    let empty = dir.write_private("empty", "\n");
    let out = run(&mut toolexec(
        dir.path(),
        &[
            "serve",
            "--http",
            &port,
            "--token-file",
            empty.to_str().unwrap(),
        ],
    ));
    out.expect_code(2);
    assert!(out.stderr.contains("--token-file"), "{out}");

    let out = run(&mut toolexec(
        dir.path(),
        &["serve", "--http", &port, "--token-file", "no-such-file"],
    ));
    out.expect_code(2);
    assert!(out.stderr.contains("no-such-file"), "{out}");
}

/// `prefix = false` on two servers that publish the same tool names: a
/// configuration error at start, at the later server's `prefix`, naming
/// both; with one unprefixed server the same config serves its tools
/// under their own names.
#[test]
fn unprefixed_servers_with_one_name_are_refused() {
    let Some(python) = dep(
        "unprefixed_servers_with_one_name_are_refused",
        "TOOLEXEC_PYTHON",
    ) else {
        return;
    };
    let dir = TempDir::new("unprefixed");
    let config = |second_prefix: bool| {
        format!(
            r#"[[servers]]
name = "alpha"
command = {python}
args = [{fixture}, "stdio"]
prefix = false

[[servers]]
name = "beta"
command = {python}
args = [{fixture}, "stdio"]
prefix = {second_prefix}
"#,
            python = toml_str(&python),
            fixture = toml_str(PY_UPSTREAM_SERVER),
        )
    };
    dir.write("toolexec.toml", &config(false));
    let out = run(&mut toolexec(dir.path(), &["serve", "--expose", "all"]));
    out.expect_code(2);
    assert!(out.stderr.contains("servers[1].prefix"), "{out}");
    assert!(
        out.stderr.contains("\"alpha\"") && out.stderr.contains("\"beta\""),
        "{out}"
    );

    dir.write("toolexec.toml", &config(true));
    let calls = json!([{"tool": "add", "args": {"a": 2, "b": 3}}]);
    let summary = serve_client(
        dir.path(),
        &python,
        &calls,
        &[support::BIN, "serve", "--expose", "all"],
    );
    let tools = summary["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("add")), "{summary}");
    assert!(tools.contains(&json!("beta__add")), "{summary}");
    assert!(!tools.contains(&json!("alpha__add")), "{summary}");
    assert_eq!(
        summary["calls"][0]["structured"],
        json!({"result": 5}),
        "{summary}"
    );
}

#[test]
fn http_without_auth_and_with_the_token_from_the_environment() {
    let Some(inspector) =
        Inspector::find("http_without_auth_and_with_the_token_from_the_environment")
    else {
        return;
    };
    let dir = TempDir::new("no-auth");
    let (_server, port) = serve_http(dir.path(), &["serve", "--insecure-no-auth"], &[]);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (code, v) = inspector.run(
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "run_tool",
            "--tool-args-json",
            r#"{"tool_id": "math:add", "args": {"a": 2, "b": 3}}"#,
        ],
        &[&url],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["result"]["structuredContent"],
        json!({"result": 5}),
        "{v}"
    );

    let (_server, port) = serve_http(
        dir.path(),
        &["serve"],
        &[("TOOLEXEC_TOKEN", "env-secret-token")],
    );
    assert_eq!(post_status(port, &[], INITIALIZE), 401);
    assert_eq!(
        post_status(
            port,
            &["Authorization: Bearer env-secret-token"],
            INITIALIZE
        ),
        200
    );
}

#[test]
fn configured_stdio_upstreams_through_cli_and_serve() {
    let test = "configured_stdio_upstreams_through_cli_and_serve";
    let Some(v) = deps(
        test,
        &[
            "TOOLEXEC_NODE22",
            "TOOLEXEC_MCP_EVERYTHING",
            "TOOLEXEC_PYTHON",
        ],
    ) else {
        return;
    };
    let (node, everything, python) = (&v[0], &v[1], &v[2]);
    let dir = TempDir::new("stdio-upstreams");
    let config = stdio_upstreams_config(&dir, node, everything, python);
    let config = config.to_str().unwrap();

    let out = run(&mut toolexec(
        dir.path(),
        &[
            "--config",
            config,
            "tools",
            "list",
            "--namespace",
            "everything",
            "--json",
        ],
    ));
    out.expect_code(0);
    let ids: Vec<String> = out.json()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(ids.len() >= 10, "{ids:?}");
    assert!(
        ids.iter().all(|id| id.starts_with("everything:")),
        "{ids:?}"
    );
    for id in ["everything:echo", "everything:get-sum"] {
        assert!(ids.contains(&id.to_owned()), "{id} missing: {ids:?}");
    }

    let out = run(&mut toolexec(
        dir.path(),
        &[
            "--config",
            config,
            "run",
            "everything:echo",
            r#"{"message":"hi"}"#,
        ],
    ));
    out.expect_code(0);
    assert_eq!(out.stdout, "Echo: hi\n", "{out}");
    let out = run(&mut toolexec(
        dir.path(),
        &[
            "--config",
            config,
            "--json",
            "run",
            "py:add",
            r#"{"a":1,"b":2}"#,
        ],
    ));
    out.expect_code(0);
    assert_eq!(out.json()["value"], json!({"result": 3}), "{out}");
    // A tool failure upstream is exit 1 with the upstream's message.
    let out = run(&mut toolexec(
        dir.path(),
        &[
            "--config",
            config,
            "run",
            "py:fail",
            r#"{"message":"boom"}"#,
        ],
    ));
    out.expect_code(1);
    assert!(
        out.stderr.contains("execution_failed") && out.stderr.contains("boom"),
        "{out}"
    );

    // Served: found by search_tools and called through the proxy.
    let s = serve_client(
        dir.path(),
        python,
        &json!([
            {"tool": "search_tools", "args": {"query": "echo back a message"}},
            {"tool": "run_tool", "args": {"tool_id": "everything:echo", "args": {"message": "via proxy"}}},
            {"tool": "run_tool", "args": {"tool_id": "everything:get-sum", "args": {"a": 2, "b": 3}}},
            {"tool": "run_tool", "args": {"tool_id": "py:weather", "args": {"city": "Oslo"}}},
        ]),
        &[support::BIN, "--config", config, "serve"],
    );
    assert_eq!(s["tools"], json!(META_TOOLS), "{s}");
    let calls = &s["calls"];
    assert_eq!(calls[0]["is_error"], false, "{s}");
    assert_eq!(
        calls[0]["structured"]["results"][0]["id"], "everything:echo",
        "{s}"
    );
    assert_eq!(calls[1]["is_error"], false, "{s}");
    assert_eq!(calls[1]["text"], "Echo: via proxy", "{s}");
    assert_eq!(calls[2]["is_error"], false, "{s}");
    assert!(calls[2]["text"].as_str().unwrap().contains('5'), "{s}");
    assert_eq!(
        calls[3]["structured"],
        json!({"city": "Oslo", "temperature": 21.5}),
        "{s}"
    );
}

#[test]
fn configured_http_upstream_through_cli_and_serve() {
    let test = "configured_http_upstream_through_cli_and_serve";
    let Some(v) = deps(
        test,
        &[
            "TOOLEXEC_NODE22",
            "TOOLEXEC_MCP_EVERYTHING",
            "TOOLEXEC_PYTHON",
        ],
    ) else {
        return;
    };
    let (node, everything, python) = (&v[0], &v[1], &v[2]);
    let port = free_port();
    let mut upstream = Background::spawn(
        Command::new(node)
            .args([everything.as_str(), "streamableHttp"])
            .env("PORT", port.to_string()),
    );
    upstream.wait_listening(port);
    let dir = TempDir::new("http-upstream");
    let config = dir.write(
        "toolexec.toml",
        &format!(
            "[[servers]]\nname = \"web\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n\
             bearer_token = \"ignored-by-everything\"\ntimeout = \"20s\"\n"
        ),
    );
    let config = config.to_str().unwrap();

    let out = run(&mut toolexec(
        dir.path(),
        &[
            "--config",
            config,
            "run",
            "web:echo",
            r#"{"message":"over http"}"#,
        ],
    ));
    out.expect_code(0);
    assert_eq!(out.stdout, "Echo: over http\n", "{out}");

    // Served over stdio with the catalog tools published directly.
    let s = serve_client(
        dir.path(),
        python,
        &json!([
            {"tool": "web__echo", "args": {"message": "direct"}},
            {"tool": "run_tool", "args": {"tool_id": "web:get-sum", "args": {"a": 20, "b": 22}}},
        ]),
        &[
            support::BIN,
            "--config",
            config,
            "serve",
            "--expose",
            "both",
        ],
    );
    let tools = s["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("web__echo")), "{s}");
    assert_eq!(s["calls"][0]["text"], "Echo: direct", "{s}");
    assert!(
        s["calls"][1]["text"].as_str().unwrap().contains("42"),
        "{s}"
    );
}

#[test]
fn stdio_protocol_stream_stays_clean_with_debug_logs() {
    let test = "stdio_protocol_stream_stays_clean_with_debug_logs";
    let Some(v) = deps(
        test,
        &[
            "TOOLEXEC_NODE22",
            "TOOLEXEC_MCP_EVERYTHING",
            "TOOLEXEC_PYTHON",
        ],
    ) else {
        return;
    };
    let dir = TempDir::new("clean-stdout");
    let config = stdio_upstreams_config(&dir, &v[0], &v[1], &v[2]);
    let mut s = StdioSession::start(
        toolexec(
            dir.path(),
            &[
                "--config",
                config.to_str().unwrap(),
                "serve",
                "--expose",
                "both",
            ],
        )
        .env("TOOLEXEC_LOG", "debug"),
    );
    let names = s.tool_names(2);
    assert!(
        names.iter().any(|n| n == "run_tool") && names.iter().any(|n| n == "everything__echo"),
        "{names:?}"
    );
    let r = s.request(
        3,
        "tools/call",
        json!({"name": "run_tool", "arguments": {"tool_id": "everything:echo", "args": {"message": "clean"}}}),
    );
    assert_eq!(r["result"]["content"][0]["text"], "Echo: clean", "{r}");
    let r = s.request(
        4,
        "tools/call",
        json!({"name": "py__fail", "arguments": {"message": "boom"}}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    let r = s.request(5, "tools/call", json!({"name": "nope", "arguments": {}}));
    assert!(r["error"]["code"].is_i64(), "{r}");

    // End of input ends the session; the rest of stdout is protocol too.
    let status = s.finish();
    assert!(status.success(), "{status}\n{}", s.stderr());
    for line in &s.seen {
        let msg: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON-RPC ({e}): {line:?}"));
        assert_eq!(msg["jsonrpc"], "2.0", "{line}");
    }
    let stderr = s.stderr();
    assert!(
        stderr.contains("DEBUG"),
        "no debug logs on stderr:\n{stderr}"
    );
    // server-everything's own stderr is relayed to toolexec's stderr.
    assert!(stderr.contains("server=everything"), "{stderr}");
}
