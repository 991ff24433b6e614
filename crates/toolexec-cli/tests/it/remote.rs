//! `toolexec runtime-server` end to end, with real binaries: one
//! `toolexec` serves its runtimes, a second one (whose configuration maps
//! profiles to `remote`) runs command tools and hardened scripts there;
//! tool calls from the remote unit come back to the caller's catalog.
//! Tests that need bubblewrap on the server print `SKIPPED: <test>: <why>`
//! when it is unavailable, or fail under `CI`.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::{Background, Out, TempDir, run, run_with_input, toolexec};

/// A key for the tests; long enough, never printed.
const KEY: &str = "k3y-material-that-must-never-be-printed";

/// Writes a key file only its owner may read (the CLI refuses others).
fn write_key(dir: &TempDir, name: &str, text: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.write(name, text);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// `toolexec ARGS` in `dir`, with `stdin`.
fn cli(dir: &TempDir, args: &[&str], stdin: Option<&str>) -> Out {
    run_with_input(&mut toolexec(dir.path(), args), stdin)
}

/// A runtime server in its own directory (no catalog of its own: built-ins
/// off), with `KEY` in a key file. Returns it and its URL.
fn start_server(dir: &TempDir) -> (Background, String) {
    write_key(dir, "server.key", &format!("{KEY}\n"));
    dir.write("server.toml", "[builtins]\nenabled = false\n");
    let mut server = Background::spawn(&mut toolexec(
        dir.path(),
        &[
            "--config",
            "server.toml",
            "runtime-server",
            "--key-file",
            "server.key",
            "--max-runs",
            "4",
        ],
    ));
    let url = server.wait_stdout_line("listening on ");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (server, url)
}

/// The caller's configuration: `standard` and `hardened` go to the remote
/// server; a command tool runs there; a tool only the caller has
/// (`local:marker`, on the caller's unsandboxed dev runtime) proves tool
/// calls are served by the caller.
fn caller_config(url: &str, key_file: &str) -> String {
    format!(
        r#"
[runtimes]
allow_unsandboxed_host = true
dev = ["host"]
standard = ["remote"]
hardened = ["remote"]

[runtimes.remote]
url = "{url}"
key_file = "{key_file}"
max_profile = "hardened"
unit_kinds = ["command", "script"]

[[commands]]
id = "remote:args"
description = "Prints each argument on its own line, in brackets"
input_schema = {{ type = "object", properties = {{ a = {{ type = "string" }} }}, required = ["a"] }}
argv = ["sh", "-c", 'for x in "$@"; do echo "[$x]"; done', "sh", "{{a}}"]
profile = "standard"

[[commands]]
id = "remote:slow"
description = "Sleeps past its wall time"
input_schema = {{ type = "object" }}
argv = ["sleep", "30"]
profile = "standard"
[commands.limits]
wall_time = "1s"

[[commands]]
id = "local:marker"
description = "Only the caller has this tool"
input_schema = {{ type = "object" }}
argv = ["echo", "served-by-the-caller"]
profile = "dev"
"#
    )
}

/// Whether the server's bubblewrap runtime is available (else SKIPPED, or
/// a failure under `CI`).
fn server_bubblewrap(test: &str, dir: &TempDir) -> bool {
    let out = cli(
        dir,
        &["--config", "server.toml", "--json", "runtimes"],
        None,
    );
    out.expect_code(0);
    support::runtime_available(&out, "bubblewrap", test, "bubblewrap on the runtime server")
}

#[test]
fn remote_command_tools_and_hardened_scripts_run_on_the_server() {
    let server_dir = TempDir::new("srv");
    let (mut server, url) = start_server(&server_dir);
    if !server_bubblewrap(
        "remote_command_tools_and_hardened_scripts_run_on_the_server",
        &server_dir,
    ) {
        return;
    }
    let dir = TempDir::new("caller");
    write_key(&dir, "caller.key", KEY);
    dir.write("toolexec.toml", &caller_config(&url, "caller.key"));

    // The caller sees the remote runtime available and serving its profiles.
    let out = cli(&dir, &["--json", "runtimes"], None);
    out.expect_code(0);
    assert!(!out.stdout.contains(KEY), "{out}");
    let list = out.json();
    let remote = list["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "remote")
        .cloned()
        .unwrap();
    assert_eq!(remote["available"], true, "{remote}");
    assert_eq!(
        remote["profiles"],
        serde_json::json!(["standard", "hardened"])
    );

    // A command tool: hostile values stay one argv element each.
    let out = cli(
        &dir,
        &[
            "--json",
            "run",
            "remote:args",
            r#"{"a": "; rm -rf / $(id)"}"#,
        ],
        None,
    );
    out.expect_code(0);
    let stdout = out.json()["value"]["stdout"].as_str().unwrap().to_owned();
    assert_eq!(stdout, "[; rm -rf / $(id)]\n", "{out}");

    // Limits hold through the remote path: wall time → timeout (exit 1).
    let out = cli(&dir, &["--json", "run", "remote:slow"], None);
    out.expect_code(1);
    assert!(out.stderr.contains("timeout"), "{out}");

    // A hardened script on the server calling a built-in (the server has
    // none) and a tool only the caller has.
    let script = r#"
const sum = await tools.math.add({a: 2, b: 3});
const marker = await tools.local.marker({});
console.log("remote log");
return {sum: sum.result, marker: marker.stdout.trim()};
"#;
    let out = cli(
        &dir,
        &["--json", "code", "-", "--profile", "hardened"],
        Some(script),
    );
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["status"]["kind"], "ok", "{out}");
    assert_eq!(v["value"]["sum"], 5, "{out}");
    assert_eq!(v["value"]["marker"], "served-by-the-caller", "{out}");
    assert_eq!(v["stdout"], "remote log\n", "{out}");
    let ids: Vec<&str> = v["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["tool_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["math:add", "local:marker"], "{out}");

    // Budget enforced for the remote unit.
    let out = cli(
        &dir,
        &[
            "--json",
            "code",
            "-",
            "--profile",
            "hardened",
            "--max-tool-calls",
            "3",
        ],
        Some("for (let i = 0; ; i++) await tools.math.add({a: i, b: 1});"),
    );
    out.expect_code(1);
    let v = out.json();
    assert_eq!(v["status"]["limit"], "tool_calls", "{out}");
    assert_eq!(v["tool_calls"].as_array().unwrap().len(), 3, "{out}");

    // SIGTERM stops the server cleanly.
    let status = server
        .signal("-TERM", Duration::from_secs(10))
        .unwrap_or_else(|| panic!("still running 10s after SIGTERM:\n{}", server.output()));
    assert!(status.success(), "{status}:\n{}", server.output());
    assert!(!server.output().contains(KEY));
}

#[test]
fn wrong_key_is_a_clear_error() {
    let server_dir = TempDir::new("srv");
    let (server, url) = start_server(&server_dir);
    let dir = TempDir::new("caller");
    let wrong = "another-key-also-never-printed-0000";
    write_key(&dir, "caller.key", wrong);
    dir.write("toolexec.toml", &caller_config(&url, "caller.key"));
    let out = cli(&dir, &["run", "remote:args", r#"{"a": "x"}"#], None);
    out.expect_code(1);
    assert!(
        out.stderr.starts_with("error: backend_unavailable"),
        "{out}"
    );
    assert!(out.stderr.contains("bad_signature"), "{out}");
    assert!(out.stderr.contains(&url), "{out}");
    for secret in [KEY, wrong] {
        assert!(!out.stderr.contains(secret), "{out}");
        assert!(!server.output().contains(secret), "{}", server.output());
    }
    let out = cli(
        &dir,
        &["--json", "run", "remote:args", r#"{"a": "x"}"#],
        None,
    );
    out.expect_code(1);
    let err: Value = serde_json::from_str(&out.stderr).unwrap();
    assert_eq!(err["error"]["code"], "backend_unavailable", "{out}");
}

#[test]
fn runtime_server_refuses_to_start_without_a_usable_key() {
    let dir = TempDir::new("srv");
    // No key at all: a usage error from the argument parser.
    let out = cli(&dir, &["runtime-server"], None);
    out.expect_code(2);
    assert!(out.stderr.contains("--key-file"), "{out}");
    // Both: also usage.
    write_key(&dir, "k", KEY);
    let out = cli(
        &dir,
        &["runtime-server", "--key-file", "k", "--key-env", "X"],
        None,
    );
    out.expect_code(2);
    // Too short (the contents never appear), missing file, unset variable,
    // bad address, bad limits.
    write_key(&dir, "short", "tiny-secret\n");
    // Readable by others: refused, naming the file and its mode.
    {
        use std::os::unix::fs::PermissionsExt;
        let shared = dir.write("shared.key", &format!("{KEY}\n"));
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let cases: &[(&[&str], &str)] = &[
        (&["--key-file", "short"], "key_file"),
        (
            &["--key-file", "shared.key"],
            "shared.key is accessible by group or others (mode 0644)",
        ),
        (&["--key-file", "missing"], "key_file"),
        (&["--key-env", "TOOLEXEC_TEST_SURELY_UNSET_KEY"], "key_env"),
        (&["--key-file", "k", "--listen", "nowhere"], "listen"),
        (&["--key-file", "k", "--max-runs", "0"], "max-runs"),
        (&["--key-file", "k", "--max-body", "4MB"], "max-body"),
        (&["--key-file", "k", "--max-skew=0s"], "max-skew"),
    ];
    for (args, field) in cases {
        let mut all = vec!["runtime-server"];
        all.extend_from_slice(args);
        let out = run(toolexec(dir.path(), &all).env_remove("TOOLEXEC_TEST_SURELY_UNSET_KEY"));
        out.expect_code(2);
        assert!(out.stderr.contains(field), "{args:?}: {out}");
        assert!(!out.stderr.contains("tiny-secret"), "{out}");
        assert!(!out.stderr.contains(KEY), "{out}");
    }
    // --json: the address as JSON; SIGINT stops it too.
    let mut server = Background::spawn(&mut toolexec(
        dir.path(),
        &[
            "--json",
            "runtime-server",
            "--key-file",
            "k",
            "--listen",
            "0",
        ],
    ));
    let line = server.wait_stdout_line("{");
    let v: Value = serde_json::from_str(&format!("{{{line}")).unwrap();
    assert!(
        v["listening"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:")
    );
    let status = server.interrupt(Duration::from_secs(10)).unwrap();
    assert!(status.success(), "{status}");
}
