//! Every server scenario of the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, active and pending) against
//! `toolexec serve --http` in front of a fixture upstream on the Python SDK
//! that implements what each scenario asks for
//! (`toolexec-mcp/tests/fixtures/py_conformance_server.py`), published
//! under its own names (`prefix = false`). The suite runs against the
//! fixture directly first, so a failure says whose it is.

use crate::support::{self, Background, TempDir, deps, free_port, toml_str, toolexec};

use std::path::Path;
use std::process::Command;

const PY_CONFORMANCE_SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../toolexec-mcp/tests/fixtures/py_conformance_server.py"
);

/// The suite's server scenarios, as `list --server` names them.
fn scenarios(node: &str, cli: &str) -> Vec<String> {
    let out = support::run(Command::new(node).args([cli, "list", "--server"]));
    out.expect_code(0);
    out.stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Runs every scenario against `url`, results under `out`.
fn run_suite(node: &str, cli: &str, url: &str, out: &Path) {
    std::fs::create_dir_all(out).unwrap();
    // The exit status is 1 whenever a scenario fails: judged per scenario.
    let _ = support::run(
        Command::new(node)
            .args([cli, "server", "--url", url, "--suite", "all", "-o"])
            .arg(out)
            .current_dir(out),
    );
}

/// The scenarios that did not run, or have a failed or warning check.
fn problems(out: &Path, scenarios: &[String]) -> Vec<String> {
    let dirs: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut problems = Vec::new();
    for scenario in scenarios {
        let prefix = format!("server-{scenario}-");
        let Some(dir) = dirs.iter().find(|d| {
            d.strip_prefix(&prefix)
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        }) else {
            problems.push(format!("{scenario}: did not run"));
            continue;
        };
        let text = std::fs::read_to_string(out.join(dir).join("checks.json")).unwrap_or_default();
        let checks: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap_or_default();
        if checks.is_empty() {
            problems.push(format!("{scenario}: no checks recorded"));
        }
        for c in checks {
            if c["status"] == "FAILURE" || c["status"] == "WARNING" {
                problems.push(format!(
                    "{scenario}: {} {}: {}",
                    c["status"], c["id"], c["errorMessage"]
                ));
            }
        }
    }
    problems
}

#[test]
fn every_server_scenario_passes_through_serve() {
    let test = "every_server_scenario_passes_through_serve";
    let Some(v) = deps(
        test,
        &[
            "TOOLEXEC_PYTHON",
            "TOOLEXEC_NODE22",
            "TOOLEXEC_MCP_CONFORMANCE",
        ],
    ) else {
        return;
    };
    let (python, node, cli) = (&v[0], &v[1], &v[2]);
    let dir = TempDir::new("conformance");
    let all = scenarios(node, cli);
    assert!(all.len() >= 32, "the suite lists {all:?}");

    let fixture_port = free_port();
    let mut fixture = Background::spawn(
        Command::new(python)
            .arg(PY_CONFORMANCE_SERVER)
            .args(["http", &fixture_port.to_string()]),
    );
    fixture.wait_listening(fixture_port);
    let direct = dir.path().join("direct");
    run_suite(
        node,
        cli,
        &format!("http://127.0.0.1:{fixture_port}/mcp"),
        &direct,
    );
    let bad = problems(&direct, &all);
    assert!(
        bad.is_empty(),
        "the fixture itself fails (not toolexec's doing):\n{}\n{}",
        bad.join("\n"),
        fixture.output()
    );

    let config = dir.write(
        "toolexec.toml",
        &format!(
            "[builtins]\nenabled = []\n\n[[servers]]\nname = \"conformance\"\nurl = {}\nprefix = false\n",
            toml_str(format!("http://127.0.0.1:{fixture_port}/mcp"))
        ),
    );
    let port = free_port();
    let mut serve = Background::spawn(&mut toolexec(
        dir.path(),
        &[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--http",
            &format!("127.0.0.1:{port}"),
            "--insecure-no-auth",
            "--expose",
            "all",
        ],
    ));
    serve.wait_listening(port);
    let through = dir.path().join("serve");
    run_suite(node, cli, &format!("http://127.0.0.1:{port}/mcp"), &through);
    let bad = problems(&through, &all);
    assert!(
        bad.is_empty(),
        "through toolexec serve:\n{}\n{}",
        bad.join("\n"),
        serve.output()
    );
}
