//! `[cluster] profiles`: sandboxed command units of a profile run on the
//! workers that run units of it (`toolexec worker --unit-profile`).

use super::*;

/// A caller whose hardened units go to the fleet: a command that fails
/// (so its outcome names the runtime), one that outlives its worker, and
/// hardened scripts (script units) that call a tool only the caller has
/// (`text:case`: the workers have `math` and `ledger` only).
fn caller_config(dir: &TempDir, nats: &Nats, cluster: &str) -> String {
    let text = format!(
        r#"
[builtins]
enabled = ["text"]

[cluster]
nats = {nats}
name = {cluster}
heartbeat = "{HEARTBEAT}"
profiles = ["hardened"]

[[commands]]
id = "sbx:fail"
description = "Says where it ran, and fails"
input_schema = {{ type = "object" }}
argv = ["sh", "-c", "echo from-the-unit >&2; exit 3"]
profile = "hardened"

[[commands]]
id = "sbx:slow"
description = "Sleeps for two seconds"
input_schema = {{ type = "object" }}
argv = ["sleep", "2"]
profile = "hardened"
"#,
        nats = toml_str(nats.url()),
        cluster = toml_str(cluster),
    );
    let path = dir.write("caller.toml", &text);
    path.to_str().unwrap().to_owned()
}

/// Hardened units run on a worker of the profile: command units, and the
/// script units of hardened code runs, whose tool calls the caller serves.
/// With no such worker they are refused (never run on the caller's
/// machine instead). A unit whose worker dies mid-run is not run again:
/// it ends `interrupted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hardened_units_run_on_workers_of_their_profile() {
    const TEST: &str = "hardened_units_run_on_workers_of_their_profile";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let listing = run(&mut toolexec(dir.path(), &["--json", "runtimes"]));
    if !crate::support::runtime_available(&listing, "bubblewrap", TEST, "bubblewrap") {
        return;
    }
    let config = worker_config(&dir, &nats, "units", ledger_port, "");
    let caller = caller_config(&dir, &nats, "units");
    let cli = |args: &[&str]| {
        let mut all = vec!["--config", caller.as_str(), "--json"];
        all.extend_from_slice(args);
        run(&mut toolexec(dir.path(), &all))
    };

    // No worker runs hardened units: refused, with the reason.
    let out = cli(&["run", "sbx:fail", "{}"]);
    out.expect_code(1);
    assert!(out.stderr.contains("backend_unavailable"), "{out}");
    assert!(out.stderr.contains("--unit-profile"), "{out}");

    let mut first = worker_with(
        dir.path(),
        &config,
        "u0",
        2,
        &["--unit-profile", "hardened"],
    );
    let listing = cli(&["runtimes"]);
    listing.expect_code(0);
    let fleet = listing.json()["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "fleet")
        .cloned()
        .unwrap();
    assert_eq!(fleet["available"], true, "{listing}");
    assert_eq!(fleet["profiles"], json!(["hardened"]), "{listing}");
    // The worker advertises what it runs.
    let status = cli(&["cluster", "status"]);
    let advert = &status.json()["workers"][0];
    assert_eq!(advert["units"], json!(["hardened"]), "{status}");
    assert!(
        advert["runtimes"]
            .as_array()
            .unwrap()
            .contains(&json!("bubblewrap:hardened")),
        "{status}"
    );

    // A command unit: it ran in the worker's bubblewrap.
    let out = cli(&["run", "sbx:fail", "{}"]);
    out.expect_code(1);
    let error: serde_json::Value = serde_json::from_str(&out.stderr).unwrap();
    let error = &error["error"];
    assert_eq!(error["code"], "execution_failed", "{out}");
    assert_eq!(
        error["details"]["data"]["runtime"], "fleet/bubblewrap",
        "{out}"
    );
    assert!(out.stderr.contains("from-the-unit"), "{out}");

    // A hardened script: a script unit on the worker, its call served by
    // the caller's catalog.
    let script = r#"
        const r = await tools.text.case({text: "unit", to: "upper"});
        return r.text;
    "#;
    let out = crate::support::run_with_input(
        &mut toolexec(
            dir.path(),
            &[
                "--config",
                &caller,
                "--json",
                "code",
                "-",
                "--profile",
                "hardened",
            ],
        ),
        Some(script),
    );
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["value"], "UNIT", "{out}");
    assert_eq!(v["tool_calls"][0]["tool_id"], "text:case", "{out}");

    // The worker dies while the unit sleeps: not run again.
    let mut slow = Background::spawn(&mut toolexec(
        dir.path(),
        &["--config", &caller, "--json", "run", "sbx:slow", "{}"],
    ));
    // Killed once the worker holds the unit.
    let start = Instant::now();
    loop {
        let status = cli(&["cluster", "status"]);
        let running = status.json()["namespaces"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|n| n["namespace"] == "<unit:hardened>" && n["running"] == 1);
        if running {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{status}");
        std::thread::sleep(Duration::from_millis(50));
    }
    first.kill();
    let _second = worker_with(
        dir.path(),
        &config,
        "u1",
        2,
        &["--unit-profile", "hardened"],
    );
    let status = slow.wait_exit(Duration::from_secs(30));
    let output = slow.output();
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{output}");
    assert!(output.contains("interrupted"), "{output}");
}

/// A worker takes units only of profiles a runtime of its machine
/// enforces, and it says so as root and as an unprivileged user (CI runs
/// this test both ways). Where bubblewrap serves `hardened` (root, with
/// per-run cgroups) a worker takes hardened units; where it serves
/// `standard` at most (`nobody`), a worker asked for hardened units
/// refuses to start and says why. Either way, a standard unit runs in the
/// worker's bubblewrap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unit_profiles_follow_what_the_worker_enforces() {
    const TEST: &str = "unit_profiles_follow_what_the_worker_enforces";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let listing = run(&mut toolexec(dir.path(), &["--json", "runtimes"]));
    if !crate::support::runtime_available(&listing, "bubblewrap", TEST, "bubblewrap") {
        return;
    }
    let bubblewrap = listing.json()["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "bubblewrap")
        .cloned()
        .unwrap();
    let serves_hardened = bubblewrap["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p == "hardened");
    eprintln!("{TEST}: bubblewrap serves hardened here: {serves_hardened}");
    let common = format!(
        "[cluster]\nnats = {}\nname = \"enforced\"\nheartbeat = \"{HEARTBEAT}\"\n",
        toml_str(nats.url())
    );
    let worker_config = dir.write("worker.toml", &common);
    let worker_config = worker_config.to_str().unwrap();
    let caller = dir.write(
        "caller.toml",
        &format!(
            "{common}profiles = [\"standard\"]\n\n[[commands]]\nid = \"sbx:where\"\n\
             description = \"Fails, saying where it ran\"\ninput_schema = {{ type = \"object\" }}\n\
             argv = [\"sh\", \"-c\", \"echo in-the-sandbox >&2; exit 3\"]\nprofile = \"standard\"\n"
        ),
    );
    let caller = caller.to_str().unwrap();

    let hardened_worker = [
        "--config",
        worker_config,
        "worker",
        "--unit-profile",
        "hardened",
    ];
    if serves_hardened {
        let mut w = Background::spawn(&mut toolexec(dir.path(), &hardened_worker));
        w.wait_stdout_line("worker ");
    } else {
        let out = run(&mut toolexec(dir.path(), &hardened_worker));
        out.expect_code(2);
        assert!(out.stderr.contains("invalid_request"), "{out}");
        assert!(
            out.stderr.contains("cannot run hardened command units"),
            "{out}"
        );
        // The reason, without a code inside the code.
        assert!(!out.stderr.contains("backend_unavailable"), "{out}");
    }

    let mut w = Background::spawn(&mut toolexec(
        dir.path(),
        &[
            "--config",
            worker_config,
            "worker",
            "--unit-profile",
            "standard",
        ],
    ));
    w.wait_stdout_line("worker ");
    let out = run(&mut toolexec(
        dir.path(),
        &["--config", caller, "--json", "run", "sbx:where", "{}"],
    ));
    out.expect_code(1);
    let error: serde_json::Value = serde_json::from_str(&out.stderr).unwrap();
    assert_eq!(
        error["error"]["details"]["data"]["runtime"], "fleet/bubblewrap",
        "{out}"
    );
    assert!(out.stderr.contains("in-the-sandbox"), "{out}");
}
