//! `toolexec.toml` through the `toolexec` binary: where it is found, how its
//! errors read, that secrets stay secret, and that built-ins, limits and
//! gateway settings take effect.
//!
//! The tests with a Python upstream server need `TOOLEXEC_PYTHON`
//! (`scripts/install-test-deps.sh`): without it they print
//! `SKIPPED: <test>: <why>`, or fail under `CI`.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Background, INITIALIZE, Out, PY_UPSTREAM_SERVER, StdioSession, TempDir, dep, free_port,
    post_status, run, run_with_input, toml_str, toolexec,
};

/// `toolexec ARGS` in `cwd`.
fn tx(cwd: &Path, args: &[&str]) -> Out {
    run(&mut toolexec(cwd, args))
}

/// `toolexec --json tools namespaces` in `cwd`: the namespace names.
fn namespaces(cwd: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = extra.to_vec();
    args.extend(["--json", "tools", "namespaces"]);
    let out = tx(cwd, &args);
    out.expect_code(0);
    out.json()["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn toolexec_toml_in_the_working_directory_is_used() {
    let dir = TempDir::new("cwd");
    assert!(
        namespaces(dir.path(), &[]).len() >= 6,
        "built-ins by default"
    );
    dir.write("toolexec.toml", "[builtins]\nenabled = [\"math\"]\n");
    assert_eq!(namespaces(dir.path(), &[]), ["math"]);
    // --config wins over ./toolexec.toml.
    dir.write("other.toml", "[builtins]\nenabled = [\"hash\"]\n");
    assert_eq!(
        namespaces(dir.path(), &["--config", "other.toml"]),
        ["hash"]
    );
    // Every command reads it: `run` no longer finds the hash tools.
    let out = tx(dir.path(), &["run", "hash:sha256", r#"{"text":"abc"}"#]);
    out.expect_code(2);
    assert!(out.stderr.contains("tool_not_found"), "{out}");
}

#[test]
fn config_errors_exit_2_naming_file_line_and_key() {
    let dir = TempDir::new("errors");
    // A bad value on line 3, read from ./toolexec.toml.
    dir.write(
        "toolexec.toml",
        "[limits]\nmax_input_depth = 10\nmax_input_bytes = \"lots\"\n",
    );
    for args in [
        &["tools", "list"][..],
        &["run", "math:add", r#"{"a":1,"b":2}"#],
        &["serve"],
        &["serve", "--http", "0", "--insecure-no-auth"],
    ] {
        let out = tx(dir.path(), args);
        out.expect_code(2);
        assert!(out.stdout.is_empty(), "{args:?}: {out}");
        assert!(
            out.stderr.contains(
                "invalid_request: config toolexec.toml:3:19: key `limits.max_input_bytes`"
            ),
            "{args:?}: {out}"
        );
    }
    // With --json the error is structured.
    let out = tx(dir.path(), &["--json", "tools", "list"]);
    out.expect_code(2);
    let err: Value = serde_json::from_str(&out.stderr).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(err["error"]["code"], "invalid_request", "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(message.contains("toolexec.toml:3:19"), "{message}");

    // An unknown key: the line of the key and the table it is in.
    let bad = dir.write(
        "bad.toml",
        "[[servers]]\nname = \"a\"\ncommand = \"x\"\ncomand = \"typo\"\n",
    );
    let out = tx(
        dir.path(),
        &["--config", bad.to_str().unwrap(), "tools", "list"],
    );
    out.expect_code(2);
    let expected = format!("{}:4:1: key `servers[0].comand`", bad.display());
    assert!(out.stderr.contains(&expected), "{out}");

    // A missing --config file names the file.
    let out = tx(dir.path(), &["--config", "nope.toml", "tools", "list"]);
    out.expect_code(2);
    assert!(out.stderr.contains("config nope.toml"), "{out}");
}

/// Secret values used by the tests below; none may appear in any output
/// except where a tool returns it on purpose.
const SECRETS: [&str; 5] = [
    "env-secret-7f3a91",
    "file-secret-91bc27",
    "literal-secret-c2d4e8",
    "gateway-secret-5e6f03",
    "bearer-secret-a8b9c0",
];

fn assert_no_secret(what: &str, text: &str) {
    for s in SECRETS {
        assert!(!text.contains(s), "{what}: secret {s} leaked:\n{text}");
    }
}

#[test]
fn an_unset_secret_variable_names_the_key_and_leaks_nothing() {
    let dir = TempDir::new("unset");
    dir.write_private("secret.txt", &format!("{}\n", SECRETS[1]));
    // BTreeMap order: A_FILE and B_LITERAL resolve before C_MISSING fails.
    dir.write(
        "toolexec.toml",
        &format!(
            r#"[gateway]
token = {{ env = "TOOLEXEC_TEST_CHANNEL_SECRET" }}

[[servers]]
name = "s"
command = "/nonexistent/server"
env = {{ A_FILE = {{ file = "secret.txt" }}, B_LITERAL = {literal}, C_MISSING = {{ env = "TOOLEXEC_TEST_SURELY_UNSET" }}, D_SET = {{ env = "TOOLEXEC_TEST_ENV_SECRET" }} }}
"#,
            literal = toml_str(SECRETS[2]),
        ),
    );
    for json in [false, true] {
        let mut cmd = toolexec(dir.path(), &["tools", "list"]);
        if json {
            cmd.arg("--json");
        }
        let out = run(cmd
            .env("TOOLEXEC_TEST_CHANNEL_SECRET", SECRETS[3])
            .env("TOOLEXEC_TEST_ENV_SECRET", SECRETS[0])
            .env("TOOLEXEC_LOG", "debug"));
        out.expect_code(2);
        assert!(
            out.stderr.contains("servers[0].env.C_MISSING")
                && out.stderr.contains("TOOLEXEC_TEST_SURELY_UNSET is not set"),
            "{out}"
        );
        assert!(out.stderr.contains("config toolexec.toml"), "{out}");
        assert_no_secret("unset variable error", &format!("{out}"));
    }

    // The same for a url server's bearer_token and for gateway.token.
    dir.write(
        "toolexec.toml",
        &format!(
            "[[servers]]\nname = \"web\"\nurl = \"http://127.0.0.1:9/mcp\"\n\
             headers = {{ \"X-Key\" = {} }}\nbearer_token = {{ env = \"TOOLEXEC_TEST_SURELY_UNSET\" }}\n",
            toml_str(SECRETS[2])
        ),
    );
    let out = tx(dir.path(), &["tools", "list"]);
    out.expect_code(2);
    assert!(out.stderr.contains("servers[0].bearer_token"), "{out}");
    assert_no_secret("bearer_token error", &format!("{out}"));
    dir.write(
        "toolexec.toml",
        "[gateway]\ntoken = { env = \"TOOLEXEC_TEST_SURELY_UNSET\" }\n",
    );
    let out = tx(dir.path(), &["tools", "list"]);
    out.expect_code(2);
    assert!(out.stderr.contains("gateway.token"), "{out}");
}

#[test]
fn secrets_stay_out_of_describe_errors_and_debug_logs() {
    let Some(python) = dep(
        "secrets_stay_out_of_describe_errors_and_debug_logs",
        "TOOLEXEC_PYTHON",
    ) else {
        return;
    };
    let dir = TempDir::new("secrets");
    dir.write_private("secret.txt", &format!("{}\n", SECRETS[1]));
    let port = free_port();
    let mut web = Background::spawn(std::process::Command::new(&python).args([
        PY_UPSTREAM_SERVER,
        "http",
        &port.to_string(),
    ]));
    web.wait_listening(port);
    dir.write(
        "toolexec.toml",
        &format!(
            r#"[gateway]
token = {{ env = "TOOLEXEC_TEST_CHANNEL_SECRET" }}

[[servers]]
name = "py"
command = {python}
args = [{fixture}, "stdio"]
env = {{ FROM_ENV = {{ env = "TOOLEXEC_TEST_ENV_SECRET" }}, FROM_FILE = {{ file = "secret.txt" }}, LITERAL = {literal} }}

[[servers]]
name = "web"
url = "http://127.0.0.1:{port}/mcp"
headers = {{ "X-Api-Key" = {{ file = "secret.txt" }} }}
bearer_token = {bearer}
"#,
            python = toml_str(&python),
            fixture = toml_str(PY_UPSTREAM_SERVER),
            literal = toml_str(SECRETS[2]),
            bearer = toml_str(SECRETS[4]),
        ),
    );
    let exec = |args: &[&str]| {
        run(toolexec(dir.path(), args)
            .env("TOOLEXEC_TEST_CHANNEL_SECRET", SECRETS[3])
            .env("TOOLEXEC_TEST_ENV_SECRET", SECRETS[0])
            .env("TOOLEXEC_TOKEN", SECRETS[3])
            .env("TOOLEXEC_LOG", "debug"))
    };

    // The secrets reach the server process...
    for (var, secret) in [
        ("FROM_ENV", SECRETS[0]),
        ("FROM_FILE", SECRETS[1]),
        ("LITERAL", SECRETS[2]),
    ] {
        let args = json!({ "name": var }).to_string();
        let out = exec(&["--json", "run", "py:show_env", &args]);
        out.expect_code(0);
        assert_eq!(out.json()["value"]["result"], secret, "{out}");
        assert!(out.stderr.contains("DEBUG"), "debug logs are on: {out}");
        assert_no_secret("debug log of a call", &out.stderr);
    }
    // ...but not the rest of toolexec's environment: not the gateway's
    // token, nor the variable a server's secret was read from (only the
    // value under its configured name).
    for var in [
        "TOOLEXEC_TOKEN",
        "TOOLEXEC_TEST_CHANNEL_SECRET",
        "TOOLEXEC_TEST_ENV_SECRET",
    ] {
        let args = json!({ "name": var }).to_string();
        let out = exec(&["--json", "run", "py:show_env", &args]);
        out.expect_code(0);
        assert_eq!(
            out.json()["value"]["result"],
            "",
            "{var} reached the server: {out}"
        );
    }
    // ...and the HTTP server is reached with its header and token.
    let out = exec(&["--json", "run", "web:add", r#"{"a":1,"b":2}"#]);
    out.expect_code(0);
    assert_eq!(out.json()["value"], json!({"result": 3}), "{out}");
    assert_no_secret("HTTP upstream call", &format!("{out}"));

    // Nowhere else: listings, descriptions, errors, debug logs.
    for args in [
        &["tools", "list", "--json"][..],
        &["tools", "describe", "py:show_env"],
        &["tools", "describe", "py:show_env", "--json"],
        &["tools", "describe", "web:show_env", "--json"],
        &["tools", "search", "environment variable", "--json"],
        &["tools", "namespaces"],
        &["run", "py:fail", r#"{"message":"boom"}"#],
        &["--json", "run", "py:add", r#"{"a":"one","b":2}"#],
        &["run", "web:fail", r#"{"message":"boom"}"#],
        &["run", "py:nope"],
    ] {
        let out = exec(args);
        assert!(out.code().is_some_and(|c| c <= 2), "{args:?}: {out}");
        assert_no_secret(&format!("toolexec {args:?}"), &format!("{out}"));
    }

    // A server that cannot be reached: the error names it, not its secrets.
    drop(web);
    let out = exec(&["tools", "list"]);
    out.expect_code(1);
    assert!(
        out.stderr.contains("backend_unavailable") && out.stderr.contains("web"),
        "{out}"
    );
    assert_no_secret("unreachable server", &format!("{out}"));
}

#[test]
fn builtins_enabled_limits_the_catalog() {
    let dir = TempDir::new("builtins");
    dir.write(
        "toolexec.toml",
        "[builtins]\nenabled = [\"math\", \"text\"]\n",
    );
    assert_eq!(namespaces(dir.path(), &[]), ["math", "text"]);
    let out = tx(dir.path(), &["--json", "tools", "search", "sha256 hash"]);
    out.expect_code(0);
    let results = out.json()["results"].as_array().unwrap().clone();
    assert!(
        results.iter().all(|r| {
            let id = r["id"].as_str().unwrap();
            id.starts_with("math:") || id.starts_with("text:")
        }),
        "{results:?}"
    );
    let out = tx(dir.path(), &["run", "hash:sha256", r#"{"text":"abc"}"#]);
    out.expect_code(2);
    assert!(out.stderr.contains("tool_not_found"), "{out}");
    tx(dir.path(), &["run", "math:add", r#"{"a":1,"b":2}"#]).expect_code(0);

    dir.write("toolexec.toml", "[builtins]\nenabled = false\n");
    let out = tx(dir.path(), &["--json", "tools", "list"]);
    out.expect_code(0);
    assert_eq!(out.json()["tools"], json!([]), "{out}");

    // Served: only the enabled groups are published.
    dir.write("toolexec.toml", "[builtins]\nenabled = [\"math\"]\n");
    let mut s = StdioSession::start(&mut toolexec(dir.path(), &["serve", "--expose", "all"]));
    let names = s.tool_names(2);
    assert!(names.contains(&"math__add".to_owned()), "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("math__")), "{names:?}");
    assert!(s.finish().success());
}

#[test]
fn limits_apply() {
    let dir = TempDir::new("limits");
    dir.write(
        "toolexec.toml",
        "[limits]\nmax_input_bytes = 8\nmax_input_depth = 3\nmax_output_bytes = 64\nmax_chain_steps = 1\n",
    );
    let check = |args: &[&str], stdin: Option<&str>, code: i32, message: &str| {
        let out = run_with_input(&mut toolexec(dir.path(), args), stdin);
        out.expect_code(code);
        assert!(
            out.stderr.contains(&format!("limit_exceeded: {message}")),
            "{args:?}: {out}"
        );
    };
    check(
        &["run", "math:add", r#"{"a":1,"b":2}"#],
        None,
        2,
        "input_bytes JSON larger than 8 bytes",
    );
    dir.write(
        "toolexec.toml",
        "[limits]\nmax_input_depth = 3\nmax_output_bytes = 64\nmax_chain_steps = 1\n",
    );
    check(
        &[
            "run",
            "json:query",
            r#"{"data":{"a":{"b":{"c":1}}},"filter":"."}"#,
        ],
        None,
        2,
        "input_depth",
    );
    let long = json!({ "text": "a".repeat(100) }).to_string();
    // The result is too big: the tool's side of the contract, exit 1.
    check(
        &["run", "encoding:base64_encode", &long],
        None,
        1,
        "output_bytes JSON larger than 64 bytes",
    );
    check(
        &["chain", "-"],
        Some(
            r#"[{"tool_id":"math:add","args":{"a":1,"b":2}},{"tool_id":"math:add","args":{"a":3,"b":4}}]"#,
        ),
        2,
        "chain_steps 2 steps, at most 1 allowed",
    );
    // Within the limits all is well.
    tx(dir.path(), &["run", "math:add", r#"{"a":1,"b":2}"#]).expect_code(0);

    dir.write("toolexec.toml", "[limits]\nmax_violations = 1\n");
    let out = tx(
        dir.path(),
        &["--json", "run", "math:add", r#"{"a":"x","b":"y"}"#],
    );
    out.expect_code(2);
    let err: Value = serde_json::from_str(&out.stderr).unwrap();
    assert_eq!(
        err["error"]["details"]["violations"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "{err}"
    );
    assert_eq!(err["error"]["details"]["truncated"], true, "{err}");
}

#[test]
fn default_timeout_applies_to_server_calls() {
    let Some(python) = dep("default_timeout_applies_to_server_calls", "TOOLEXEC_PYTHON") else {
        return;
    };
    let dir = TempDir::new("timeout");
    dir.write(
        "toolexec.toml",
        &format!(
            "[limits]\ndefault_timeout = \"500ms\"\n\n[[servers]]\nname = \"py\"\ncommand = {}\nargs = [{}, \"stdio\"]\n",
            toml_str(&python),
            toml_str(PY_UPSTREAM_SERVER)
        ),
    );
    let start = Instant::now();
    let out = tx(dir.path(), &["run", "py:sleepy", r#"{"seconds": 30}"#]);
    out.expect_code(1);
    assert!(out.stderr.contains("timeout"), "{out}");
    assert!(start.elapsed() < Duration::from_secs(15), "{out}");
}

#[test]
fn gateway_settings_come_from_the_config() {
    let dir = TempDir::new("gateway");
    std::fs::create_dir(dir.path().join("conf")).unwrap();
    // The token file is relative to the config file, not the working directory.
    dir.write_private("conf/token", "config-token\n");
    dir.write(
        "conf/toolexec.toml",
        "[gateway]\nexpose = \"all\"\ntoken = { file = \"token\" }\nallowed_origins = [\"https://app.example.com\"]\n",
    );
    let port = free_port();
    let mut server = Background::spawn(&mut toolexec(
        dir.path(),
        &[
            "--config",
            "conf/toolexec.toml",
            "serve",
            "--http",
            &port.to_string(),
        ],
    ));
    server.wait_listening(port);
    let auth = "Authorization: Bearer config-token";
    assert_eq!(post_status(port, &[], INITIALIZE), 401);
    assert_eq!(post_status(port, &[auth], INITIALIZE), 200);
    assert_eq!(
        post_status(port, &[auth, "Origin: https://app.example.com"], INITIALIZE),
        200
    );
    assert_eq!(
        post_status(
            port,
            &[auth, "Origin: https://evil.example.com"],
            INITIALIZE
        ),
        403
    );
    drop(server);

    // gateway.expose applies over stdio; --expose wins.
    let config = ["--config", "conf/toolexec.toml"];
    let mut s = StdioSession::start(&mut toolexec(
        dir.path(),
        &[&config[..], &["serve"]].concat(),
    ));
    let names = s.tool_names(2);
    assert!(
        names.contains(&"math__add".to_owned()) && !names.contains(&"run_tool".to_owned()),
        "{names:?}"
    );
    assert!(s.finish().success());
    let mut s = StdioSession::start(&mut toolexec(
        dir.path(),
        &[&config[..], &["serve", "--expose", "meta"]].concat(),
    ));
    let names = s.tool_names(2);
    assert!(
        names.contains(&"run_tool".to_owned()) && !names.contains(&"math__add".to_owned()),
        "{names:?}"
    );
    assert!(s.finish().success());
}

#[test]
fn tls_keys_of_https_servers_are_read_relative_to_the_file() {
    let Some(python) = dep(
        "tls_keys_of_https_servers_are_read_relative_to_the_file",
        "TOOLEXEC_PYTHON",
    ) else {
        return;
    };
    use toolexec_testkit::tls::{TestCa, Usage};
    let dir = TempDir::new("tls");
    let ca = TestCa::new("toolexec test CA");
    let server = ca.issue(&["127.0.0.1"], Usage::Server);
    let client = ca.issue(&["toolexec-client"], Usage::Client);
    std::fs::create_dir(dir.path().join("certs")).unwrap();
    let ca_file = dir.write("certs/ca.pem", &ca.cert_pem);
    let server_cert = dir.write("server.crt", &server.cert_pem);
    let server_key = dir.write_private("server.key", &server.key_pem);
    dir.write("certs/client.crt", &client.cert_pem);
    dir.write_private("certs/client.key", &client.key_pem);
    dir.write("certs/open.key", &client.key_pem);
    // The server wants a client certificate signed by the CA.
    let port = free_port();
    let mut web = Background::spawn(
        std::process::Command::new(&python)
            .args([PY_UPSTREAM_SERVER, "https", &port.to_string()])
            .args([&server_cert, &server_key, &ca_file]),
    );
    web.wait_listening(port);
    let config = |url: &str, ca_file: &str, client_key: &str| {
        format!(
            "[[servers]]\nname = \"secure\"\nurl = \"{url}\"\n\
             ca_file = \"{ca_file}\"\nclient_cert = \"certs/client.crt\"\n\
             client_key = \"{client_key}\"\n"
        )
    };
    let https = format!("https://127.0.0.1:{port}/mcp");

    // Every key is read (relative to the file's directory) and used.
    dir.write(
        "toolexec.toml",
        &config(&https, "certs/ca.pem", "certs/client.key"),
    );
    let out = tx(
        dir.path(),
        &["--json", "run", "secure:add", r#"{"a":1,"b":2}"#],
    );
    out.expect_code(0);
    assert_eq!(out.json()["value"], json!({"result": 3}), "{out}");

    // A file that is not there: file, line and key, like other config errors.
    dir.write(
        "toolexec.toml",
        &config(&https, "certs/missing.pem", "certs/client.key"),
    );
    let out = tx(dir.path(), &["tools", "list"]);
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("config toolexec.toml:4:11: key `servers[0].ca_file`")
            && out.stderr.contains("missing.pem"),
        "{out}"
    );
    // A key file others may read is refused as secret files are.
    dir.write(
        "toolexec.toml",
        &config(&https, "certs/ca.pem", "certs/open.key"),
    );
    let out = tx(dir.path(), &["tools", "list"]);
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("config toolexec.toml:6:14: key `servers[0].client_key`")
            && out.stderr.contains("chmod 600"),
        "{out}"
    );
    // TLS keys on an http:// server are a mistake, not ignored.
    dir.write(
        "toolexec.toml",
        &config("http://127.0.0.1:9/mcp", "certs/ca.pem", "certs/client.key"),
    );
    let out = tx(dir.path(), &["tools", "list"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("key `servers[0].ca_file`") && out.stderr.contains("https://"),
        "{out}"
    );
}
