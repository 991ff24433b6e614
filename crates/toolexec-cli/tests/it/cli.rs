//! The `toolexec` binary end to end: output, exit codes, stdin, chains, streams.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn toolexec(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolexec"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn toolexec");
    let mut pipe = child.stdin.take().unwrap();
    if let Some(input) = stdin {
        pipe.write_all(input.as_bytes()).unwrap();
    }
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn run_prints_the_value_and_exits_zero() {
    let out = toolexec(&["run", "math:add", r#"{"a": 2, "b": 3}"#], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = toolexec(&["--json", "run", "math:add", r#"{"a": 2, "b": 3}"#], None);
    let v = stdout_json(&out);
    assert_eq!(v["value"]["result"], json!(5.0));
}

#[test]
fn run_reads_arguments_from_stdin() {
    let out = toolexec(
        &["run", "hash:sha256", "-", "--json"],
        Some(r#"{"text": "abc"}"#),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout_json(&out)["value"]["hex"],
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn usage_and_input_errors_exit_two_with_the_code_in_the_message() {
    for (args, code) in [
        (vec!["run", "nonsense"], "invalid_tool_id"),
        (vec!["run", "math:nope"], "tool_not_found"),
        (
            vec!["run", "math:add", r#"{"a": "x", "b": 1}"#],
            "validation_input",
        ),
        (vec!["run", "math:add", "[1, 2]"], "invalid_request"),
        (vec!["run", "math:add", "{not json"], "invalid_request"),
        (vec!["tools", "describe", "math"], "invalid_tool_id"),
    ] {
        let out = toolexec(&args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(code), "{args:?}: {}", stderr(&out));
    }
    // clap's own usage errors are 2 as well.
    assert_eq!(toolexec(&["frobnicate"], None).status.code(), Some(2));
}

#[test]
fn tool_errors_exit_one_and_json_errors_are_structured() {
    let out = toolexec(
        &["--json", "run", "math:divide", r#"{"a": 1, "b": 0}"#],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["error"]["code"], "execution_failed");
    let out = toolexec(&["--json", "run", "math:add", r#"{"a": "x"}"#], None);
    let err: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["error"]["code"], "validation_input");
    assert!(
        err["error"]["details"]["violations"]
            .as_array()
            .unwrap()
            .len()
            >= 2
    );
}

#[test]
fn tools_list_search_describe_and_namespaces() {
    let out = toolexec(&["tools", "list"], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("ID"), "{text}");
    assert!(text.contains("math:add"), "{text}");

    let v = stdout_json(&toolexec(
        &["--json", "tools", "list", "--namespace", "time"],
        None,
    ));
    let ids: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"time:now") && ids.iter().all(|i| i.starts_with("time:")),
        "{ids:?}"
    );

    let v = stdout_json(&toolexec(
        &["--json", "tools", "search", "sha256 hash of text"],
        None,
    ));
    assert_eq!(v["results"][0]["id"], "hash:sha256", "{v}");

    let v = stdout_json(&toolexec(
        &[
            "--json", "tools", "describe", "math:add", "--detail", "full",
        ],
        None,
    ));
    assert!(
        v["input_schema"].is_object() && !v["examples"].as_array().unwrap().is_empty(),
        "{v}"
    );
    let md = toolexec(&["tools", "describe", "math:add"], None);
    assert!(String::from_utf8_lossy(&md.stdout).contains("## Input schema"));

    let v = stdout_json(&toolexec(&["--json", "tools", "namespaces"], None));
    let names: Vec<&str> = v["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    for ns in ["encoding", "hash", "json", "math", "text", "time"] {
        assert!(names.contains(&ns), "{names:?}");
    }
}

#[test]
fn paging_through_the_cli_visits_every_tool_once() {
    let all = stdout_json(&toolexec(
        &["--json", "tools", "list", "--limit", "1000"],
        None,
    ));
    let total = all["tools"].as_array().unwrap().len();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut args = vec!["--json", "tools", "list", "--limit", "4"];
        if let Some(c) = &cursor {
            args.extend(["--cursor", c.as_str()]);
        }
        let v = stdout_json(&toolexec(&args, None));
        seen.extend(
            v["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["id"].as_str().unwrap().to_owned()),
        );
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen.len(), total);
}

#[test]
fn chains_run_from_files_and_stdin() {
    let chain = r#"[
        {"tool_id": "math:add", "args": {"a": 1, "b": 2}},
        {"tool_id": "math:multiply", "args": {"a": 10}, "use_previous": false},
        {"tool_id": "text:case", "args": {"text": "Done Now", "to": "upper"}}
    ]"#;
    let out = toolexec(&["--json", "chain", "-"], Some(chain));
    assert_eq!(
        out.status.code(),
        Some(2),
        "multiply lacks b: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v = stdout_json(&out);
    assert_eq!(v["ok"], false);
    assert_eq!(v["steps"][1]["error"]["code"], "validation_input");
    assert_eq!(v["steps"][2]["skipped"], true);

    let dir = toolexec_testkit::TempDir::new("cli-chain");
    let file = dir.write(
        "chain.json",
        r#"{"steps": [
            {"tool_id": "encoding:base64_encode", "args": {"text": "hi"}},
            {"tool_id": "encoding:base64_decode", "use_previous": true}
        ]}"#,
    );
    let out = toolexec(&["--json", "chain", file.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = stdout_json(&out);
    // The previous result `{"base64": "aGk="}` became the whole arguments.
    assert_eq!(v["output"], json!({"text": "hi"}), "{v}");
    let missing = toolexec(
        &["chain", dir.path().join("missing.json").to_str().unwrap()],
        None,
    );
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("invalid_request"));
}

#[test]
fn streaming_prints_json_lines_ending_in_done() {
    let out = toolexec(
        &[
            "--json",
            "run",
            "math:add",
            r#"{"a": 1, "b": 1}"#,
            "--stream",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["type"], "done");
    let out = toolexec(&["--json", "run", "math:nope", "--stream"], None);
    assert_eq!(out.status.code(), Some(2));
    let last: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "error");
}

#[test]
fn timeouts_are_flags() {
    let out = toolexec(
        &[
            "run",
            "math:add",
            r#"{"a": 1, "b": 1}"#,
            "--timeout",
            "5 parsecs",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    let out = toolexec(
        &["run", "math:add", r#"{"a": 1, "b": 1}"#, "--timeout", "2s"],
        None,
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn oversized_and_deeply_nested_input_is_refused_cleanly() {
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let out = toolexec(&["run", "math:add", &format!("{{\"a\": {deep}}}")], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("invalid_request"), "{}", stderr(&out));
    let big = format!("{{\"text\": \"{}\"}}", "x".repeat(2 << 20));
    let out = toolexec(&["run", "text:word_count", "-"], Some(&big));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("limit_exceeded"), "{}", stderr(&out));
}
