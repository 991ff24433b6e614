//! The file as a whole: a full example, errors with their position and
//! key, secrets that never print.

use std::os::unix::fs::PermissionsExt;

use std::path::Path;
use std::time::Duration;

use toolexec_builtins::Group;
use toolexec_mcp::upstream::UpstreamTransport;

use super::{Config, ConfigError};

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/toolexec.toml"))
}

#[test]
fn full_example_parses() {
    // SAFETY: tests in this module are the only users of this variable.
    unsafe { std::env::set_var("TOOLEXEC_TEST_SECRET", "hunter2") };
    let c = parse(
        r#"
[builtins]
enabled = ["math", "json"]

[limits]
default_timeout = "10s"
max_input_bytes = 4096

[gateway]
expose = "both"
token = { env = "TOOLEXEC_TEST_SECRET" }

[[servers]]
name = "everything"
command = "node"
args = ["server.js", "stdio"]
env = { API_KEY = { env = "TOOLEXEC_TEST_SECRET" }, MODE = "test" }
timeout = "5s"

[[servers]]
name = "remote"
url = "http://127.0.0.1:3001/mcp"
headers = { "X-Api-Key" = "abc" }
bearer_token = { env = "TOOLEXEC_TEST_SECRET" }
lazy = true
prefix = false
"#,
    )
    .unwrap();
    assert_eq!(c.builtins, [Group::Math, Group::Json]);
    assert_eq!(c.limits.default_timeout, Duration::from_secs(10));
    assert_eq!(c.limits.max_input_bytes, 4096);
    assert_eq!(c.servers.len(), 2);
    assert_eq!(c.servers[0].call_timeout, Duration::from_secs(5));
    assert_eq!(c.servers[1].call_timeout, Duration::from_secs(10));
    assert!(c.servers[1].lazy);
    assert_eq!(c.unprefixed, ["remote"]);
    assert_eq!(c.gateway.token.as_ref().unwrap().expose(), "hunter2");
    let debug = format!("{c:?}");
    assert!(
        !debug.contains("hunter2"),
        "secret leaked into Debug: {debug}"
    );
}

#[test]
fn errors_name_file_line_and_key() {
    let cases = [
        (
            "[limits]\ndefault_timeout = \"5 parsecs\"\n",
            "2:19",
            "limits.default_timeout",
        ),
        (
            "[[servers]]\nname = \"a\"\ncommand = \"x\"\nbogus = 1\n",
            "4:1",
            "servers[0]",
        ),
        (
            "[builtins]\nenabled = [\"math\", \"nope\"]\n",
            "2:",
            "builtins.enabled",
        ),
        ("[[servers]]\nname = \"a\"\n", "1:1", "servers[0].command"),
        // A value a check refuses is reported where it is written.
        (
            "[[servers]]\nname = \"a b\"\ncommand = \"x\"\n",
            "2:8",
            "servers[0].name",
        ),
        (
            "[[servers]]\nname = \"a\"\ncommand = \"x\"\nurl = \"http://h\"\n",
            "4:7",
            "servers[0].url",
        ),
        (
            "[[servers]]\nname = \"a\"\nurl = \"http://h\"\nbearer_token = { env = \"TOOLEXEC_SURELY_UNSET\" }\n",
            "4:16",
            "servers[0].bearer_token",
        ),
        (
            "[gateway]\nexpose = \"everything\"\n",
            "2:10",
            "gateway.expose",
        ),
        (
            "[cluster]\nnamespaces = [\"billing\"]\n",
            "2:",
            "cluster.namespaces",
        ),
        (
            "[cluster]\nnats = \"http://h:4222\"\n",
            "2:",
            "cluster.nats",
        ),
        (
            "[cluster]\nnats = \"nats://h:4222\"\nheartbeat = \"5ms\"\n",
            "3:",
            "cluster.heartbeat",
        ),
        (
            "[cluster]\nnats = \"nats://h:4222\"\ntoken = { env = \"TOOLEXEC_SURELY_UNSET\" }\n",
            "3:",
            "cluster.token",
        ),
        // Scripts on workers would go around the gateway's policy.
        (
            "[cluster]\nnats = \"nats://h:4222\"\ncode = true\n[[policy.rules]]\neffect = \"allow\"\n",
            "3:",
            "cluster.code",
        ),
        (
            "[[policy.rules]]\neffect = \"allow\"\nannotations = { fooHint = true }\n",
            "3:",
            "policy.rules[0].annotations.fooHint",
        ),
        (
            "[[policy.rules]]\neffect = \"allow\"\ntool = [\"a:*\"]\n",
            "3:1",
            "policy.rules[0]",
        ),
        ("[quotas.tool]\nrate = 0.0\n", "2:8", "quotas.tool.rate"),
        (
            "[gateway]\ntokens = [{ name = \"a\", token = \"x\" }, { name = \"a\", token = \"y\" }]\n",
            "2:",
            "gateway.tokens[1].name",
        ),
        (
            "[gateway]\ntoken = \"t\"\ntokens = [{ name = \"a\", token = \"x\" }]\n",
            "3:",
            "gateway.tokens",
        ),
        ("this is not toml", "1:", ""),
    ];
    for (text, position, key) in cases {
        let err = parse(text).unwrap_err().to_string();
        assert!(
            err.starts_with("invalid_request: config /etc/toolexec.toml"),
            "{err}"
        );
        assert!(
            err.contains(&format!("toolexec.toml:{position}")),
            "{text:?}: {err}"
        );
        assert!(err.contains(key), "{text:?}: {err}");
    }
}

#[test]
fn secret_file_errors_never_print_contents() {
    let dir = std::env::temp_dir().join(format!("toolexec-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), "s3cr3t-token\n").unwrap();
    std::fs::set_permissions(dir.join("token"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = Config::parse(
        "[gateway]\ntoken = { file = \"token\" }\n",
        &dir.join("toolexec.toml"),
    )
    .unwrap();
    assert_eq!(c.gateway.token.unwrap().expose(), "s3cr3t-token");
    let err = Config::parse(
        "[gateway]\ntoken = { file = \"missing\" }\n",
        &dir.join("toolexec.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("gateway.token") && err.contains("missing"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A secret file its group or others may read is refused, whatever the
/// secret is for, with the path and the mode (never the contents).
#[test]
fn secret_files_readable_by_others_are_refused() {
    let dir = std::env::temp_dir().join(format!("toolexec-cfg-mode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("secret");
    std::fs::write(&file, "s3cr3t-value\n").unwrap();
    let configs = [
        (
            "[gateway]\ntoken = { file = \"secret\" }\n",
            "gateway.token",
        ),
        (
            "[[servers]]\nname = \"a\"\ncommand = \"x\"\nenv = { K = { file = \"secret\" } }\n",
            "servers[0].env.K",
        ),
        (
            "[[servers]]\nname = \"a\"\nurl = \"http://h\"\nbearer_token = { file = \"secret\" }\n",
            "servers[0].bearer_token",
        ),
    ];
    for mode in [0o644, 0o640, 0o604] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        for (text, key) in configs {
            let err = Config::parse(text, &dir.join("toolexec.toml"))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("invalid_request: config "), "{err}");
            assert!(err.contains(key), "{err}");
            assert!(err.contains(&file.display().to_string()), "{err}");
            assert!(err.contains(&format!("mode {mode:04o}")), "{err}");
            assert!(!err.contains("s3cr3t"), "{err}");
        }
    }
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    for (text, _) in configs {
        Config::parse(text, &dir.join("toolexec.toml")).unwrap();
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn inherit_env_is_for_command_servers() {
    let c = parse(
        "[[servers]]\nname = \"a\"\ncommand = \"x\"\ninherit_env = [\"HTTPS_PROXY\", \"AWS_*\"]\n",
    )
    .unwrap();
    match &c.servers[0].transport {
        UpstreamTransport::Stdio { inherit_env, .. } => {
            assert_eq!(inherit_env, &["HTTPS_PROXY", "AWS_*"]);
        }
        other => panic!("{other:?}"),
    }
    let err = parse("[[servers]]\nname = \"a\"\nurl = \"http://h\"\ninherit_env = [\"A\"]\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("inherit_env"), "{err}");
}

#[test]
fn transport_sse_is_the_legacy_http_sse_transport() {
    let c = parse(
        "[[servers]]\nname = \"old\"\nurl = \"http://127.0.0.1:9/sse\"\ntransport = \"sse\"\n",
    )
    .unwrap();
    match &c.servers[0].transport {
        UpstreamTransport::Sse { url, .. } => assert_eq!(url, "http://127.0.0.1:9/sse"),
        other => panic!("{other:?}"),
    }
    let c = parse(
        "[[servers]]\nname = \"new\"\nurl = \"http://h/mcp\"\ntransport = \"streamable-http\"\n",
    )
    .unwrap();
    assert!(matches!(
        c.servers[0].transport,
        UpstreamTransport::Http { .. }
    ));
    for (text, key) in [
        (
            "[[servers]]\nname = \"a\"\nurl = \"http://h\"\ntransport = \"websocket\"\n",
            "key `servers[0].transport`: expected \"sse\"",
        ),
        (
            "[[servers]]\nname = \"a\"\ncommand = \"x\"\ntransport = \"sse\"\n",
            "key `servers[0].transport`: transport is for url servers",
        ),
        (
            "[[servers]]\nname = \"a\"\nurl = \"http://h\"\ntransport = \"sse\"\n\
             auth = { token_exchange = { token_endpoint = \"http://i/t\", client_id = \"c\", \
             client_secret = \"s\" } }\n",
            "key `servers[0].auth`: auth is for streamable HTTP servers",
        ),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(key), "{text}: {err}");
    }
}

#[test]
fn relay_names_what_serve_relays_to_clients() {
    use toolexec_mcp::upstream::ClientRelay;
    let c = parse("[[servers]]\nname = \"a\"\ncommand = \"x\"\n").unwrap();
    assert_eq!(c.servers[0].relay, ClientRelay::GATEWAY);
    let c =
        parse("[[servers]]\nname = \"a\"\ncommand = \"x\"\nrelay = [\"roots\", \"sampling\"]\n")
            .unwrap();
    assert_eq!(
        c.servers[0].relay,
        ClientRelay {
            roots: true,
            sampling: true,
            ..ClientRelay::NONE
        }
    );
    let c = parse("[[servers]]\nname = \"a\"\ncommand = \"x\"\nrelay = []\n").unwrap();
    assert!(!c.servers[0].relay.any());
    let err = parse("[[servers]]\nname = \"a\"\ncommand = \"x\"\nrelay = [\"everything\"]\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("key `servers[0].relay`"), "{err}");
}

/// Checks that run after deserialization report the value they refuse; the
/// runtimes' own types refuse keys they do not read from files.
#[test]
fn refusals_point_at_the_value_and_unread_keys_are_unknown() {
    let err = parse("[limits]\nmax_chain_steps = 0\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("toolexec.toml:2:19: key `limits.max_chain_steps`: must be greater than 0"),
        "{err}"
    );
    // A docker table without an image: the runtime is unavailable, not an
    // error; an empty image is refused.
    let c = parse("[runtimes.docker]\nsocket = \"/run/d.sock\"\n").unwrap();
    assert!(c.runtimes.docker.unwrap().image.is_empty());
    let err = parse("[runtimes.docker]\nimage = \"\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("toolexec.toml:2:9: key `runtimes.docker.image`: must name an image"),
        "{err}"
    );
    let err = parse("[runtimes.wasm]\ncache_entries = 1\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("toolexec.toml:2:1: key `runtimes.wasm.cache_entries`: unknown field"),
        "{err}"
    );
    let c =
        parse("[runtimes.wasm]\nmax_memory = \"64MiB\"\n[runtimes.bubblewrap]\npool_size = 2\n")
            .unwrap();
    assert_eq!(c.runtimes.wasm.max_memory_bytes, 64 << 20);
    assert_eq!(c.runtimes.bubblewrap.pool_size, 2);
}

#[test]
fn policy_quotas_and_named_tokens_parse() {
    let c = parse(
        r#"
[gateway]
tokens = [{ name = "ci", token = "ci-secret" }, { name = "alice", token = "a-secret" }]

[policy]
default = "deny"

[[policy.rules]]
name = "ci-reads"
effect = "allow"
tokens = ["ci"]
annotations = { readOnlyHint = true }

[[policy.rules]]
name = "admins"
effect = "allow"
claims = { groups = "admin", tenant = 7 }

[quotas.caller]
rate = 10
burst = 20
concurrent = 4

[quotas.tool]
concurrent = 16
"#,
    )
    .unwrap();
    let names: Vec<&str> = c.gateway.tokens.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["ci", "alice"]);
    assert_eq!(c.policy.as_ref().map(|p| p.len()), Some(2));
    let quotas = c.quotas.unwrap();
    assert_eq!(quotas.caller.unwrap().rate, Some(10.0));
    assert_eq!(quotas.tool.unwrap().concurrent, Some(16));
}

#[test]
fn gateway_auth_is_an_oauth_resource_server() {
    let c = parse(
        r#"
[gateway.auth]
issuer = "https://as.example.com"
audience = ["https://gw.example.com/mcp", "toolexec"]
scopes = ["tools"]
leeway = "30s"
"#,
    )
    .unwrap();
    let o = c.gateway.oauth.unwrap();
    assert_eq!(o.issuer, "https://as.example.com");
    assert_eq!(o.audience, ["https://gw.example.com/mcp", "toolexec"]);
    assert_eq!(o.leeway, std::time::Duration::from_secs(30));
    for (text, key) in [
        (
            "[gateway.auth]\nissuer = \"as.example.com\"\naudience = \"https://gw/mcp\"\n",
            "gateway.auth.issuer",
        ),
        (
            "[gateway.auth]\nissuer = \"https://as\"\naudience = \"urn:x\"\n",
            "gateway.auth.resource",
        ),
        (
            "[gateway]\ntoken = \"t\"\n[gateway.auth]\nissuer = \"https://as\"\naudience = \"https://gw/mcp\"\n",
            "gateway.auth",
        ),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(key), "{text:?}: {err}");
    }
}

#[test]
fn cluster_and_worker_tables() {
    let c = parse(
        "[cluster]\nnats = [\"nats://a:4222\", \"tls://b:4222\"]\nname = \"prod\"\n\
         namespaces = [\"billing\"]\ncode = true\nheartbeat = \"1s\"\nmax_queue = 50\n\
         token = \"t0ken\"\n[worker]\nnamespaces = [\"search\"]\ncapacity = 4\ncode = true\n",
    )
    .unwrap();
    let settings = c.cluster.settings.as_ref().unwrap();
    assert_eq!(settings.urls, ["nats://a:4222", "tls://b:4222"]);
    assert_eq!(settings.name, "prod");
    assert_eq!(settings.heartbeat, std::time::Duration::from_secs(1));
    assert_eq!(settings.max_queue, 50);
    assert_eq!(c.cluster.namespaces, ["billing"]);
    assert!(c.cluster.code);
    assert_eq!(c.cluster.worker.namespaces, ["search"]);
    assert_eq!(c.cluster.worker.capacity, Some(4));
    assert!(c.cluster.worker.code);
    assert!(!format!("{c:?}").contains("t0ken"));
    // No [cluster]: nothing goes to a fleet.
    assert!(parse("").unwrap().cluster.settings.is_none());
}
