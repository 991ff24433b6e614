//! `toolexec serve --http` with callers told apart: named tokens, OAuth
//! access tokens of a test issuer (PyJWT), a `[policy]` and `[quotas]`,
//! driven by the Python SDK and the Inspector.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::serve::{Inspector, serve_client, serve_http};
use crate::support::{self, Background, INITIALIZE, TempDir, dep, get_with, post_status, toml_str};

/// `toolexec --config CONFIG serve --expose all --http 127.0.0.1:PORT`,
/// listening: the server and its port.
fn serve_all(dir: &TempDir, config: &Path) -> (Background, u16) {
    serve_http(
        dir.path(),
        &[
            "--config",
            config.to_str().unwrap(),
            "serve",
            "--expose",
            "all",
        ],
        &[],
    )
}

/// The audience of the test issuer's tokens.
const AUDIENCE: &str = "https://toolexec.test/mcp";

/// The test OAuth issuer (`py_oauth_issuer.py`) for [`AUDIENCE`], started:
/// its process and what it printed (`issuer`, `tokens`).
fn start_issuer(dir: &TempDir, python: &str) -> (Background, Value) {
    let mut issuer = Background::spawn(
        Command::new(python)
            .arg(support::PY_OAUTH_ISSUER)
            .arg(AUDIENCE)
            .current_dir(dir.path()),
    );
    let started = serde_json::from_str(&issuer.wait_stdout_line("ISSUER ")).unwrap();
    (issuer, started)
}

/// Calls of one math tool and one hash tool, for callers allowed one
/// namespace or both.
fn add_and_hash() -> Value {
    json!([
        {"tool": "math__add", "args": {"a": 2, "b": 3}},
        {"tool": "hash__sha256", "args": {"text": "abc"}},
    ])
}

/// `[gateway] tokens`, `[policy]` and `[quotas]` through `toolexec serve
/// --http`, driven by the Python SDK: callers are their tokens' names, see
/// and run what the policy allows them, and are held to their quotas.
#[test]
fn named_tokens_a_policy_and_quotas_over_http() {
    let Some(python) = dep(
        "named_tokens_a_policy_and_quotas_over_http",
        "TOOLEXEC_PYTHON",
    ) else {
        return;
    };
    let dir = TempDir::new("policy");
    let config = dir.write(
        "toolexec.toml",
        r#"
[builtins]
enabled = ["math", "hash"]

[gateway]
tokens = [
    { name = "ops", token = "ops-secret" },
    { name = "root", token = "root-secret" },
    { name = "busy", token = "busy-secret" },
]

[[policy.rules]]
name = "staff"
effect = "allow"
tokens = ["ops", "root", "busy"]

[[policy.rules]]
name = "hashing-is-root-only"
effect = "deny"
tokens = ["ops"]
namespaces = ["hash"]

[quotas.caller]
rate = 0.001
burst = 3
"#,
    );
    let (_server, port) = serve_all(&dir, &config);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let calls = add_and_hash();
    let client = |token: &str, calls: &Value| {
        serve_client(dir.path(), &python, calls, &["http", &url, token])
    };
    let ops = client("ops-secret", &calls);
    let tools = ops["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("math__add")), "{ops}");
    assert!(
        !tools
            .iter()
            .any(|t| t.as_str().unwrap().starts_with("hash__")),
        "{ops}"
    );
    assert_eq!(
        ops["calls"][0]["structured"],
        json!({"result": 5.0}),
        "{ops}"
    );
    let denied = &ops["calls"][1];
    assert_eq!(denied["is_error"], true, "{ops}");
    assert_eq!(
        denied["structured"]["error"]["code"], "not_allowed",
        "{ops}"
    );
    assert_eq!(
        denied["structured"]["error"]["details"]["rule"], "hashing-is-root-only",
        "{ops}"
    );

    let root = client("root-secret", &calls);
    assert!(
        root["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("hash__sha256")),
        "{root}"
    );
    assert_eq!(root["calls"][1]["is_error"], false, "{root}");

    // Three calls fit the bucket; the fourth is refused with a hint.
    let four = json!([
        {"tool": "math__add", "args": {"a": 1, "b": 1}},
        {"tool": "math__add", "args": {"a": 1, "b": 1}},
        {"tool": "math__add", "args": {"a": 1, "b": 1}},
        {"tool": "math__add", "args": {"a": 1, "b": 1}},
    ]);
    let busy = client("busy-secret", &four);
    let errors: Vec<&Value> = busy["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["is_error"])
        .collect();
    assert_eq!(
        errors,
        [&json!(false), &json!(false), &json!(false), &json!(true)],
        "{busy}"
    );
    let error = &busy["calls"][3]["structured"]["error"];
    assert_eq!(error["code"], "limit_exceeded", "{busy}");
    assert!(
        error["details"]["retry_after_ms"].as_u64().unwrap() > 0,
        "{busy}"
    );
    // Another caller's bucket is its own.
    let again = client("root-secret", &calls);
    assert_eq!(again["calls"][0]["is_error"], false, "{again}");
}

/// `[gateway.auth]`: access tokens of a test issuer (PyJWT) checked by
/// `toolexec serve --http`; the Python SDK and the Inspector connect with a
/// valid one, and the token's subject and claims are what the policy
/// decides on.
#[test]
fn oauth_access_tokens_over_http() {
    let test = "oauth_access_tokens_over_http";
    let Some(python) = dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let dir = TempDir::new("oauth");
    let audience = AUDIENCE;
    let (issuer, started) = start_issuer(&dir, &python);
    let url = started["issuer"].as_str().unwrap();
    let token = |name: &str| started["tokens"][name].as_str().unwrap().to_owned();
    let config = dir.write(
        "toolexec.toml",
        &format!(
            r#"
[builtins]
enabled = ["math", "hash"]

[gateway.auth]
issuer = {url}
audience = {audience}
scopes = ["tools"]

[[policy.rules]]
name = "alice-does-math"
effect = "allow"
subjects = ["alice"]
tools = ["math:*"]

[[policy.rules]]
name = "admins"
effect = "allow"
claims = {{ groups = "admin" }}
"#,
            url = toml_str(url),
            audience = toml_str(audience),
        ),
    );
    let (_server, port) = serve_all(&dir, &config);
    let mcp = format!("http://127.0.0.1:{port}/mcp");
    let calls = add_and_hash();
    let alice = serve_client(
        dir.path(),
        &python,
        &calls,
        &["http", &mcp, &token("alice")],
    );
    let tools = alice["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("math__add")), "{alice}");
    assert!(!tools.contains(&json!("hash__sha256")), "{alice}");
    assert_eq!(
        alice["calls"][0]["structured"],
        json!({"result": 5.0}),
        "{alice}"
    );
    assert_eq!(
        alice["calls"][1]["structured"]["error"]["code"], "not_allowed",
        "{alice}"
    );
    let bob = serve_client(dir.path(), &python, &calls, &["http", &mcp, &token("bob")]);
    assert_eq!(bob["calls"][1]["is_error"], false, "{bob}");

    // Refusals, with the challenge RFC 6750 and RFC 9728 ask for.
    let bearer = |t: &str| format!("Authorization: Bearer {t}");
    assert_eq!(post_status(port, &[], INITIALIZE), 401);
    assert_eq!(
        post_status(port, &[&bearer(&token("expired"))], INITIALIZE),
        401
    );
    assert_eq!(
        post_status(port, &[&bearer(&token("unscoped"))], INITIALIZE),
        403
    );
    assert_eq!(post_status(port, &[&bearer("not-a-jwt")], INITIALIZE), 401);
    let (status, body) = get_with(port, "/.well-known/oauth-protected-resource/mcp", &[]);
    assert_eq!(status, 200, "{body}");
    let meta: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(meta["authorization_servers"], json!([url]), "{meta}");

    // The Inspector, with the token in a header.
    if let Some(inspector) = Inspector::find(test) {
        let (code, v) = inspector.run(
            &[
                "--method",
                "tools/call",
                "--tool-name",
                "math__add",
                "--tool-args-json",
                r#"{"a": 2, "b": 3}"#,
                "--header",
                &bearer(&token("alice")),
            ],
            &[&mcp],
        );
        assert_eq!(code, 0, "{v}");
        assert_eq!(
            v["result"]["structuredContent"],
            json!({"result": 5}),
            "{v}"
        );
    }
    drop(issuer);
}

/// `auth.token_exchange` on an upstream server: each caller's call reaches
/// it with a token the issuer exchanged for that caller's own (RFC 8693),
/// so the server sees alice as alice and bob as bob, acted for by the
/// gateway; exchanges are cached per caller token, and a caller with no
/// access token (a local command) is refused rather than sent without one.
#[test]
fn token_exchange_acts_as_the_caller() {
    let test = "token_exchange_acts_as_the_caller";
    let Some(python) = dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let dir = TempDir::new("exchange");
    let audience = AUDIENCE;
    let (issuer, started) = start_issuer(&dir, &python);
    let url = started["issuer"].as_str().unwrap();
    let token = |name: &str| started["tokens"][name].as_str().unwrap().to_owned();
    let up_port = support::free_port();
    let mut upstream = Background::spawn(
        Command::new(&python)
            .args([support::PY_UPSTREAM_SERVER, "http", &up_port.to_string()])
            .current_dir(dir.path()),
    );
    upstream.wait_listening(up_port);
    let config = dir.write(
        "toolexec.toml",
        &format!(
            r#"
[builtins]
enabled = []

[gateway.auth]
issuer = {url}
audience = {audience}

[[servers]]
name = "up"
url = "http://127.0.0.1:{up_port}/mcp"
auth = {{ token_exchange = {{ token_endpoint = {endpoint}, client_id = "gateway", client_secret = "gw-secret", audience = "upstream-api" }} }}
"#,
            url = toml_str(url),
            audience = toml_str(audience),
            endpoint = toml_str(format!("{url}/token")),
        ),
    );
    let (_server, port) = serve_all(&dir, &config);
    let mcp = format!("http://127.0.0.1:{port}/mcp");
    let whoami = json!([{"tool": "up__whoami", "args": {}}, {"tool": "up__whoami", "args": {}}]);
    for name in ["alice", "bob"] {
        let seen = serve_client(dir.path(), &python, &whoami, &["http", &mcp, &token(name)]);
        for call in seen["calls"].as_array().unwrap() {
            assert_eq!(call["is_error"], false, "{seen}");
            let claims = &call["structured"]["result"];
            assert_eq!(claims["sub"], name, "{seen}");
            assert_eq!(claims["aud"], "upstream-api", "{seen}");
            assert_eq!(claims["act"]["sub"], "gateway", "{seen}");
            assert_eq!(
                claims["resource"],
                format!("http://127.0.0.1:{up_port}/mcp"),
                "{seen}"
            );
        }
    }
    // One exchange per caller token: the second call of each used the cache.
    let (status, body) = get_with(
        url.rsplit(':').next().unwrap().parse().unwrap(),
        "/exchanges",
        &[],
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["count"], 2);

    // A local caller has no access token to exchange: refused, never sent
    // with another credential.
    let local = support::run(&mut support::toolexec(
        dir.path(),
        &[
            "--config",
            config.to_str().unwrap(),
            "run",
            "up:whoami",
            "{}",
        ],
    ));
    assert!(
        local.stderr.contains("not_allowed") && local.stderr.contains("token exchange"),
        "{local}"
    );
    drop(issuer);
}
