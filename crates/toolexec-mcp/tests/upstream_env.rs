//! A stdio upstream server gets a cleared environment: the allow-list
//! (`INHERITED_ENV`), the names its configuration passes on (`inherit_env`)
//! and its own `env`, nothing else of this process's (tokens, keys, other
//! servers' secrets). The server is the Python SDK fixture, which reports
//! its environment through tools. Needs `TOOLEXEC_PYTHON`.
//!
//! The only test of this binary, so it can set this process's variables
//! before any other thread exists.

#[path = "support/upstream.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolexec::{Catalog, Exec, Secret, glob_match};
use toolexec_mcp::upstream::{INHERITED_ENV, Upstream, UpstreamConfig, UpstreamTransport};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/py_upstream_server.py"
);

/// Variables of this process the server must not see.
const PARENT_SECRETS: [(&str, &str); 3] = [
    ("TOOLEXEC_TOKEN", "parent-gateway-token"),
    ("TOOLEXEC_REMOTE_KEY", "parent-remote-key-0123456789"),
    ("OTHER_SERVER_API_KEY", "parent-other-server-secret"),
];

#[test]
fn stdio_server_sees_only_allowed_and_configured_variables() {
    let Some(python) = toolexec_testkit::deps(
        "stdio_server_sees_only_allowed_and_configured_variables",
        &["TOOLEXEC_PYTHON"],
    )
    .map(|mut v| v.remove(0)) else {
        return;
    };
    // SAFETY: this is the only test of this binary and no runtime or other
    // thread has been started yet, so nothing reads the environment meanwhile.
    unsafe {
        for (name, value) in PARENT_SECRETS {
            std::env::set_var(name, value);
        }
        std::env::set_var("TOOLEXEC_TEST_PASSED_ON", "passed-by-name");
        std::env::set_var("LC_TIME", "C");
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(check(python));
}

async fn check(python: String) {
    let mut env = BTreeMap::new();
    env.insert("CONFIGURED".to_owned(), Secret::new("configured-value"));
    let mut config = UpstreamConfig::new(
        "py",
        UpstreamTransport::Stdio {
            command: python,
            args: vec![FIXTURE.to_owned(), "stdio".to_owned()],
            env,
            inherit_env: vec!["TOOLEXEC_TEST_PASSED_*".to_owned()],
            cwd: Some(std::env::temp_dir()),
        },
    );
    config.call_timeout = Duration::from_secs(20);
    let catalog = Arc::new(Catalog::new());
    let upstream = Upstream::connect(config, catalog.clone()).await.unwrap();
    let exec = Exec::new(catalog);
    let show = |name: &'static str| {
        let exec = exec.clone();
        async move {
            let out = exec
                .run_tool("py:show_env", json!({ "name": name }))
                .await
                .unwrap();
            out.value["result"].as_str().unwrap().to_owned()
        }
    };

    // Configured, passed on by name, and allow-listed variables arrive.
    assert_eq!(show("CONFIGURED").await, "configured-value");
    assert_eq!(show("TOOLEXEC_TEST_PASSED_ON").await, "passed-by-name");
    assert_eq!(show("LC_TIME").await, "C");
    assert_eq!(show("PATH").await, std::env::var("PATH").unwrap());
    // The parent's secrets do not.
    for (name, _) in PARENT_SECRETS {
        assert_eq!(show(name).await, "", "{name} reached the server");
    }

    // Nothing else either: every name is allow-listed or configured.
    let out = exec.run_tool("py:env_names", json!({})).await.unwrap();
    let names: Vec<String> = match &out.value["result"] {
        Value::Array(a) => a.iter().map(|v| v.as_str().unwrap().to_owned()).collect(),
        other => panic!("{other}"),
    };
    let allowed = |n: &str| {
        n == "CONFIGURED"
            || glob_match("TOOLEXEC_TEST_PASSED_*", n)
            || INHERITED_ENV.iter().any(|p| glob_match(p, n))
    };
    let extra: Vec<&String> = names.iter().filter(|n| !allowed(n)).collect();
    assert!(extra.is_empty(), "not allowed: {extra:?} (all: {names:?})");
    // This process has variables of its own the server did not get.
    assert!(std::env::var_os("TOOLEXEC_TOKEN").is_some());
    assert!(!names.iter().any(|n| n == "TOOLEXEC_TOKEN"), "{names:?}");
    upstream.shutdown().await;
}
