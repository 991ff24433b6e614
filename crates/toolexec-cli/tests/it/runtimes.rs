//! Sandbox runtimes from the command line: `toolexec runtimes`, hardened
//! code mode (`exec --profile hardened`), command tools from
//! `[[commands]]`, and `[runtimes]` configuration errors. Tests that need
//! bubblewrap print `SKIPPED: <test>: <why>` when it is unavailable, or fail
//! under `CI`.

use crate::support;

use serde_json::{Value, json};
use support::{Out, StdioSession, TempDir, run, run_with_input, toolexec};

/// `toolexec ARGS` in `dir`, with `stdin`.
fn cli(dir: &TempDir, args: &[&str], stdin: Option<&str>) -> Out {
    run_with_input(&mut toolexec(dir.path(), args), stdin)
}

/// Whether the bubblewrap runtime is available here; if not, says why
/// (`SKIPPED`), or fails under `CI`.
pub(crate) fn bubblewrap(test: &str) -> bool {
    let dir = TempDir::new("rt");
    let out = cli(&dir, &["--json", "runtimes"], None);
    out.expect_code(0);
    support::runtime_available(&out, "bubblewrap", test, "bubblewrap")
}

#[test]
fn runtimes_lists_each_runtime_with_its_profiles() {
    let dir = TempDir::new("rt");
    let out = cli(&dir, &["--json", "runtimes"], None);
    out.expect_code(0);
    let v = out.json();
    let names: Vec<&str> = v["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "bubblewrap",
            "runc",
            "runsc",
            "docker",
            "wasm",
            "in_process",
            "remote"
        ],
        "{out}"
    );
    let by_name = |v: &Value, name: &str| {
        v["runtimes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} is not listed: {v}"))
    };
    // Runtimes the configuration does not set up: unavailable, one line
    // saying what to set.
    for (name, setting) in [
        ("runc", "[runtimes.oci]"),
        ("runsc", "[runtimes.oci]"),
        ("docker", "[runtimes.docker]"),
        ("remote", "[runtimes.remote]"),
    ] {
        let r = by_name(&v, name);
        assert_eq!(r["available"], false, "{r}");
        let reason = r["reason"].as_str().unwrap();
        assert!(reason.contains(setting), "{name}: {reason}");
        assert!(!reason.contains('\n'), "{name}: {reason}");
    }
    assert_eq!(by_name(&v, "runc")["max_profile"], "standard");
    assert_eq!(by_name(&v, "runsc")["max_profile"], "hardened");
    assert_eq!(by_name(&v, "runsc")["profiles"], json!(["hardened"]));
    let wasm = by_name(&v, "wasm");
    assert_eq!(wasm["available"], true, "{wasm}");
    assert_eq!(wasm["unit_kinds"], json!(["wasm"]));
    // The in-process engine: available, scripts only, never hardened.
    let in_process = by_name(&v, "in_process");
    assert_eq!(in_process["available"], true, "{in_process}");
    assert_eq!(in_process["max_profile"], "standard");
    assert_eq!(in_process["unit_kinds"], json!(["script"]));
    assert_eq!(in_process["profiles"], json!(["dev", "standard"]));
    assert!(
        in_process["isolation"]
            .as_str()
            .unwrap()
            .contains("QuickJS in process"),
        "{in_process}"
    );
    let bw = &v["runtimes"][0];
    assert_eq!(bw["max_profile"], "hardened");
    assert_eq!(bw["unit_kinds"], json!(["command", "script"]));
    assert_eq!(bw["profiles"], json!(["dev", "standard", "hardened"]));
    assert!(bw["isolation"].as_str().unwrap().contains("namespaces"));
    assert!(bw["available"].is_boolean());
    assert_eq!(v["profiles"]["hardened"][0], "bubblewrap");

    // The opt-in host runtime, and a mapping from the file.
    dir.write(
        "toolexec.toml",
        "[runtimes]\nallow_unsandboxed_host = true\ndev = [\"host\"]\nstandard = [\"bubblewrap\"]\nhardened = []\n",
    );
    let out = cli(&dir, &["--json", "runtimes"], None);
    out.expect_code(0);
    let v = out.json();
    let host = v["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "host")
        .cloned()
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(host["profiles"], json!(["dev"]));
    assert_eq!(host["available"], true);
    assert_eq!(host["max_profile"], "dev");
    assert_eq!(v["runtimes"][0]["profiles"], json!(["standard"]));
    assert_eq!(v["profiles"]["hardened"], json!([]));

    // For people: a table and the mapping.
    let out = cli(&dir, &["runtimes"], None);
    out.expect_code(0);
    assert!(out.stdout.starts_with("NAME"), "{out}");
    assert!(out.stdout.contains("host"), "{out}");
    assert!(out.stdout.contains("\nin_process "), "{out}");
    assert!(out.stdout.contains("dev: host\n"), "{out}");
    assert!(out.stdout.contains("hardened: \n"), "{out}");

    // Configured: a root filesystem that does not exist, a docker socket
    // that does not exist, a remote server nobody listens on, a key file
    // that cannot be read, a key that is never printed.
    let key = dir.write("remote.key", "0123456789abcdef-never-printed\n");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    dir.write(
        "toolexec.toml",
        "[runtimes.oci]\nrootfs = \"no-such-rootfs\"\n\
         [runtimes.docker]\nimage = \"busybox:1\"\nsocket = \"/nonexistent/docker.sock\"\n\
         [runtimes.remote]\nurl = \"http://127.0.0.1:9\"\nkey_file = \"remote.key\"\n",
    );
    let out = cli(&dir, &["--json", "runtimes"], None);
    out.expect_code(0);
    assert!(!out.stdout.contains("never-printed"), "{out}");
    let v = out.json();
    for name in ["runc", "runsc"] {
        let r = by_name(&v, name);
        let reason = r["reason"].as_str().unwrap_or_default();
        assert!(!reason.contains("[runtimes.oci]"), "{name}: {r}");
        assert_eq!(r["available"], false, "{r}");
    }
    let docker = by_name(&v, "docker");
    assert!(
        docker["reason"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/docker.sock"),
        "{docker}"
    );
    let remote = by_name(&v, "remote");
    assert_eq!(remote["available"], false, "{remote}");
    assert!(
        remote["reason"].as_str().unwrap().contains("127.0.0.1:9"),
        "{remote}"
    );
    dir.write(
        "toolexec.toml",
        "[runtimes.remote]\nurl = \"http://127.0.0.1:9\"\nkey_file = \"missing.key\"\n",
    );
    let out = cli(&dir, &["--json", "runtimes"], None);
    out.expect_code(0);
    let remote = by_name(&out.json(), "remote");
    assert!(
        remote["reason"].as_str().unwrap().contains("missing.key"),
        "{remote}"
    );
}

const SCRIPT: &str = r#"
const [a, b] = await Promise.all([
    tools.math.add({a: 2, b: 3}),
    tools.run("hash:sha256", {text: "abc"}),
]);
console.log("sum", a.result);
const hits = await tools.search("multiply two numbers", 2);
return {sum: a.result, hex: b.hex.slice(0, 8), hit: hits[0].id};
"#;

#[test]
fn hardened_exec_has_the_standard_shape() {
    if !bubblewrap("hardened_exec_has_the_standard_shape") {
        return;
    }
    let dir = TempDir::new("rt");
    let standard = cli(&dir, &["--json", "code", "-"], Some(SCRIPT));
    standard.expect_code(0);
    let hardened = cli(
        &dir,
        &["--json", "code", "-", "--profile", "hardened"],
        Some(SCRIPT),
    );
    hardened.expect_code(0);
    let (s, h) = (standard.json(), hardened.json());
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&h), keys(&s), "{hardened}");
    for field in ["status", "value", "stdout", "stderr"] {
        assert_eq!(h[field], s[field], "{field}: {hardened}");
    }
    let calls = |v: &Value| {
        v["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["tool_id"].clone(), c["args"].clone(), c["result"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(calls(&h), calls(&s));
    assert_eq!(h["tool_calls"].as_array().unwrap().len(), 2);

    // For people: the same text.
    let plain = cli(&dir, &["code", "-", "--profile", "hardened"], Some(SCRIPT));
    plain.expect_code(0);
    assert!(plain.stdout.starts_with("sum 5\n"), "{plain}");
}

#[test]
fn hostile_hardened_scripts_are_contained() {
    if !bubblewrap("hostile_hardened_scripts_are_contained") {
        return;
    }
    let dir = TempDir::new("rt");
    let hardened = |code: &str, flags: &[&str]| {
        let mut args = vec!["--json", "code", "-", "--profile", "hardened"];
        args.extend_from_slice(flags);
        let out = cli(&dir, &args, Some(code));
        out.expect_code(1);
        out.json()
    };
    let spin = hardened("for (;;) {}", &["--timeout", "1s"]);
    assert_eq!(spin["status"]["kind"], "limit_exceeded", "{spin}");
    assert_eq!(spin["status"]["limit"], "timeout", "{spin}");

    let bomb = hardened(
        "const a = []; for (;;) a.push('x'.repeat(1 << 20) + a.length);",
        &["--memory", "16MiB"],
    );
    assert_eq!(bomb["status"]["limit"], "memory", "{bomb}");

    let budget = hardened(
        "for (let i = 0; ; i++) await tools.math.add({a: i, b: 1});",
        &["--max-tool-calls", "4"],
    );
    assert_eq!(budget["status"]["limit"], "tool_calls", "{budget}");
    assert_eq!(budget["tool_calls"].as_array().unwrap().len(), 4);

    // The script sees no host file system and no network.
    let escape = cli(
        &dir,
        &["--json", "code", "-", "--profile", "hardened"],
        Some("return typeof require + typeof process + typeof fetch"),
    );
    escape.expect_code(0);
    assert_eq!(escape.json()["value"], "undefinedundefinedundefined");
}

/// `[[commands]]` tools echoing their argv one per line as `[arg]`.
const COMMANDS: &str = r#"
[runtimes]
allow_unsandboxed_host = true

[[commands]]
id = "cmd:args"
description = "Prints each argument on its own line, in brackets"
input_schema = { type = "object", properties = { a = { type = "string" }, more = { type = "array", items = { type = "string" } } }, required = ["a"] }
argv = ["sh", "-c", 'for x in "$@"; do echo "[$x]"; done', "sh", "{a}", "{more}"]
profile = "PROFILE"

[[commands]]
id = "cmd:echo_json"
description = "Returns its arguments, through stdin and cat"
input_schema = '{"type": "object", "properties": {"x": {}}}'
argv = ["cat"]
stdin = "json"
output = "json"
profile = "PROFILE"

[[commands]]
id = "cmd:not_json"
description = "Prints text where JSON is expected"
input_schema = { type = "object" }
argv = ["echo", "plain words"]
output = "json"
profile = "PROFILE"

[[commands]]
id = "cmd:fail"
description = "Fails with a message on stderr"
input_schema = { type = "object" }
argv = ["sh", "-c", "echo 'it broke' >&2; exit 3"]
profile = "PROFILE"

[[commands]]
id = "cmd:sleep"
description = "Sleeps"
input_schema = { type = "object", properties = { secs = { type = "integer" } }, required = ["secs"] }
argv = ["sleep", "{secs}"]
profile = "PROFILE"
[commands.limits]
wall_time = "1s"
"#;

fn command_tools(profile: &str) {
    let dir = TempDir::new("cmd");
    dir.write("toolexec.toml", &COMMANDS.replace("PROFILE", profile));
    let runj = |id: &str, args: Value| {
        let a = args.to_string();
        run(&mut toolexec(dir.path(), &["--json", "run", id, &a]))
    };
    let out = runj(
        "cmd:args",
        json!({"a": "; rm -rf /", "more": ["$(id)", "--option=x", "a b", "`reboot`"]}),
    );
    out.expect_code(0);
    assert_eq!(
        out.json()["value"]["stdout"],
        "[; rm -rf /]\n[$(id)]\n[--option=x]\n[a b]\n[`reboot`]\n",
        "{out}"
    );
    // A missing required placeholder fails validation before anything runs.
    runj("cmd:args", json!({"more": ["x"]})).expect_code(2);
    // Objects cannot become argv elements.
    let out = runj("cmd:args", json!({"a": "x", "more": [{"k": 1}]}));
    out.expect_code(2);

    // A NUL byte cannot reach an argv element: the runtime's refusal keeps
    // its own code (invalid input, exit 2), never wrapped in another.
    let out = runj("cmd:args", json!({"a": "x\u{0}y", "more": []}));
    out.expect_code(2);
    let error: Value = serde_json::from_str(&out.stderr).unwrap_or_default();
    let error = &error["error"];
    assert_eq!(error["code"], "invalid_request", "{out}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("invalid_request: unit.argv"), "{out}");
    assert_eq!(message.matches("invalid_request").count(), 1, "{out}");
    assert!(!message.contains("backend_unavailable"), "{out}");

    let out = runj("cmd:echo_json", json!({"x": {"nested": [1, "two"]}}));
    out.expect_code(0);
    assert_eq!(out.json()["value"], json!({"x": {"nested": [1, "two"]}}));

    let out = runj("cmd:not_json", json!({}));
    out.expect_code(1);
    assert!(out.stderr.contains("execution_failed"), "{out}");
    assert!(out.stderr.contains("not JSON"), "{out}");

    let out = runj("cmd:fail", json!({}));
    out.expect_code(1);
    assert!(out.stderr.contains("execution_failed"), "{out}");
    assert!(out.stderr.contains("code 3"), "{out}");
    assert!(out.stderr.contains("it broke"), "{out}");

    let out = runj("cmd:sleep", json!({"secs": 20}));
    out.expect_code(1);
    assert!(out.stderr.contains("timeout"), "{out}");
}

#[test]
fn command_tools_run_on_the_host_runtime() {
    command_tools("dev");
}

#[test]
fn command_tools_run_in_bubblewrap() {
    if !bubblewrap("command_tools_run_in_bubblewrap") {
        return;
    }
    command_tools("standard");
}

#[test]
fn command_tools_without_a_runtime_are_unavailable() {
    let dir = TempDir::new("cmd");
    dir.write(
        "toolexec.toml",
        "[runtimes]\nstandard = [\"nothing\"]\n\n[[commands]]\nid = \"cmd:x\"\ndescription = \"x\"\ninput_schema = { type = \"object\" }\nargv = [\"true\"]\n",
    );
    let out = run(&mut toolexec(dir.path(), &["run", "cmd:x", "{}"]));
    out.expect_code(1);
    assert!(out.stderr.contains("backend_unavailable"), "{out}");
    assert!(out.stderr.contains("nothing: not registered"), "{out}");
}

#[test]
fn runtime_and_command_config_errors_name_file_line_and_key() {
    // The position is the value the key names (a list element, not the
    // list), or the table lacking the key.
    let cases: &[(&str, &str, &str)] = &[
        ("[runtimes]\ndev = [\"host\"]\n", ":2:8", "runtimes.dev[0]"),
        (
            "[runtimes]\nallow_unsandboxed_host = true\nhardened = [\"host\"]\n",
            ":3:13",
            "runtimes.hardened[0]",
        ),
        (
            "[runtimes]\nstandard = [\"Bad Name\"]\n",
            ":2:13",
            "runtimes.standard[0]",
        ),
        ("[runtimes]\nbogus = 1\n", ":2:1", "runtimes"),
        ("[runtimes.oci]\nroots = \"x\"\n", ":2:1", "runtimes.oci"),
        (
            "[runtimes.docker]\nimage = \" \"\n",
            ":2:9",
            "runtimes.docker.image",
        ),
        (
            "[runtimes.remote]\nurl = \"https://h:1\"\n",
            ":2:7",
            "runtimes.remote.url",
        ),
        (
            "[runtimes.remote]\nurl = \"http://user:pw@h:1\"\n",
            ":2:7",
            "runtimes.remote.url",
        ),
        (
            "[runtimes.remote]\nkey_file = \"k\"\nkey_env = \"K\"\n",
            ":3:11",
            "runtimes.remote.key_env",
        ),
        (
            "[runtimes.remote]\nmax_profile = \"ultra\"\n",
            ":2:15",
            "runtimes.remote.max_profile",
        ),
        (
            "[runtimes.remote]\nunit_kinds = [\"command\", \"vm\"]\n",
            ":2:",
            "runtimes.remote.unit_kinds",
        ),
        (
            "[runtimes.remote]\nunit_kinds = []\n",
            ":2:14",
            "runtimes.remote.unit_kinds",
        ),
        (
            "[runtimes.wasm]\npool_instances = 0\n",
            ":2:18",
            "runtimes.wasm.pool_instances",
        ),
        (
            "[runtimes.wasm]\nmax_memory = \"1KiB\"\n",
            ":2:14",
            "runtimes.wasm.max_memory",
        ),
        (
            "[runtimes.bubblewrap]\npool_size = 1000\n",
            ":2:13",
            "runtimes.bubblewrap.pool_size",
        ),
        (
            "[[commands]]\nid = \"nonamespace\"\ndescription = \"d\"\ninput_schema = {}\nargv = [\"x\"]\n",
            ":2:6",
            "commands[0].id",
        ),
        (
            "[[commands]]\nid = \"a:b\"\ndescription = \"d\"\ninput_schema = \"{not json\"\nargv = [\"x\"]\n",
            ":4:16",
            "commands[0].input_schema",
        ),
        (
            "[[commands]]\nid = \"a:b\"\ndescription = \"d\"\ninput_schema = {}\nargv = [\"{a}\"]\n",
            ":5:9",
            "commands[0].argv[0]",
        ),
        (
            "[[commands]]\nid = \"a:b\"\ndescription = \"d\"\ninput_schema = { properties = { a = {} } }\nargv = [\"x\", \"--a={a}\"]\n",
            ":5:14",
            "commands[0].argv[1]",
        ),
        (
            "[[commands]]\nid = \"a:b\"\ndescription = \"d\"\ninput_schema = {}\nargv = [\"x\"]\nstdin = \"yaml\"\n",
            ":6:9",
            "commands[0].stdin",
        ),
        (
            "[[commands]]\nid = \"a:b\"\ndescription = \"d\"\ninput_schema = {}\nargv = [\"x\"]\nprofile = \"paranoid\"\n",
            ":6:11",
            "commands[0].profile",
        ),
        (
            "[[commands]]\nid = \"a:b\"\ndescription = \"d\"\ninput_schema = {}\nargv = [\"x\"]\n[commands.limits]\nmemory = \"12 parsecs\"\n",
            ":7:10",
            "commands[0].limits.memory",
        ),
        (
            "[[commands]]\nid = \"a:b\"\ndescription = \"d\"\ninput_schema = {}\nargv = [\"x\"]\n\n[[commands]]\nid = \"a:b\"\ndescription = \"d\"\ninput_schema = {}\nargv = [\"x\"]\n",
            ":8:6",
            "commands[1].id",
        ),
    ];
    for (text, position, key) in cases {
        let dir = TempDir::new("cfg");
        dir.write("toolexec.toml", text);
        let out = run(&mut toolexec(dir.path(), &["runtimes"]));
        out.expect_code(2);
        assert!(
            out.stderr.contains(&format!("toolexec.toml{position}")),
            "{text:?}: {out}"
        );
        assert!(
            out.stderr.contains(&format!("key `{key}")),
            "{text:?}: {out}"
        );
    }
}

/// `execute_code` through `toolexec serve` (stdio) with `code`.
fn serve_execute_code(dir: &TempDir, flags: &[&str], code: &str) -> Value {
    let mut args = vec!["serve"];
    args.extend_from_slice(flags);
    let mut s = StdioSession::start(&mut toolexec(dir.path(), &args));
    let r = s.request(
        2,
        "tools/call",
        json!({"name": "execute_code", "arguments": {"code": code}}),
    );
    s.finish();
    r["result"].clone()
}

#[test]
fn serve_code_profile_runs_execute_code_in_a_sandbox() {
    // With no runtime for `hardened`, a hardened gateway refuses the script
    // rather than running it in process; standard still runs it.
    let dir = TempDir::new("rt");
    dir.write("toolexec.toml", "[runtimes]\nhardened = []\n");
    let script = "const s = await tools.math.add({a: 2, b: 3}); return s.result";
    let r = serve_execute_code(&dir, &["--code-profile", "hardened"], script);
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(
        r["structuredContent"]["error"]["code"], "backend_unavailable",
        "{r}"
    );
    let r = serve_execute_code(&dir, &[], script);
    assert_eq!(r["structuredContent"]["value"], 5, "{r}");
    // The same from the file; the flag wins over it.
    dir.write(
        "toolexec.toml",
        "[runtimes]\nhardened = []\n[gateway]\ncode_profile = \"hardened\"\n",
    );
    let r = serve_execute_code(&dir, &[], script);
    assert_eq!(
        r["structuredContent"]["error"]["code"], "backend_unavailable",
        "{r}"
    );
    let r = serve_execute_code(&dir, &["--code-profile", "standard"], script);
    assert_eq!(r["structuredContent"]["value"], 5, "{r}");
    // A bad profile in the file: the position and key.
    dir.write("toolexec.toml", "[gateway]\ncode_profile = \"dev\"\n");
    let out = run(&mut toolexec(dir.path(), &["serve"]));
    out.expect_code(2);
    assert!(out.stderr.contains("toolexec.toml:2:16"), "{out}");
    assert!(out.stderr.contains("gateway.code_profile"), "{out}");

    if !bubblewrap("serve_code_profile_runs_execute_code_in_a_sandbox") {
        return;
    }
    // Through bubblewrap: same value, the tool call in the host's log.
    let dir = TempDir::new("rt");
    let r = serve_execute_code(&dir, &["--code-profile", "hardened"], script);
    assert_ne!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["value"], 5, "{r}");
    assert_eq!(
        r["structuredContent"]["tool_calls"][0]["tool_id"], "math:add",
        "{r}"
    );
    let r = serve_execute_code(
        &dir,
        &["--code-profile", "hardened"],
        "return typeof require + typeof process",
    );
    assert_eq!(r["structuredContent"]["value"], "undefinedundefined", "{r}");
}

#[test]
fn oci_runtimes_run_command_tools_from_the_config() {
    let test = "oci_runtimes_run_command_tools_from_the_config";
    let dir = TempDir::new("oci");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/make-test-rootfs.sh"
    );
    let rootfs = dir.path().join("rootfs");
    let built = std::process::Command::new("bash")
        .arg(script)
        .arg(&rootfs)
        .output();
    if !matches!(&built, Ok(o) if o.status.success()) {
        let why = format!("{script} failed: {built:?}");
        toolexec_testkit::skip!(test, why);
    }
    for (runtime, profile) in [("runc", "standard"), ("runsc", "hardened")] {
        dir.write(
            "toolexec.toml",
            &format!(
                "[runtimes]\n{profile} = [\"{runtime}\"]\n[runtimes.oci]\nrootfs = \"rootfs\"\n\
                 [[commands]]\nid = \"oci:echo\"\ndescription = \"echo\"\n\
                 input_schema = {{ type = \"object\", properties = {{ w = {{ type = \"string\" }} }} }}\n\
                 argv = [\"echo\", \"{{w}}\"]\nprofile = \"{profile}\"\n"
            ),
        );
        let out = cli(&dir, &["--json", "runtimes"], None);
        out.expect_code(0);
        let list = out.json();
        let r = list["runtimes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == runtime)
            .cloned()
            .unwrap();
        if r["available"] != true {
            let why = r["reason"].as_str().unwrap_or("unavailable").to_owned();
            toolexec_testkit::skip(test, format!("{runtime}: {why}"));
            continue;
        }
        let out = cli(
            &dir,
            &["--json", "run", "oci:echo", r#"{"w": "a $(id) ; b"}"#],
            None,
        );
        out.expect_code(0);
        assert_eq!(
            out.json()["value"]["stdout"],
            "a $(id) ; b\n",
            "{runtime}: {out}"
        );
    }
}
