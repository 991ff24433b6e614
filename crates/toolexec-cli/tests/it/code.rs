//! Code mode from the command line: `toolexec code FILE|-`, `tools types`
//! and the TypeScript in `tools describe`, over the built-in catalog.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Out, TempDir, run, run_with_input, toolexec};

/// `toolexec ARGS` in a fresh directory (no stray `toolexec.toml`).
fn exec(args: &[&str], stdin: Option<&str>) -> Out {
    let dir = TempDir::new("code");
    run_with_input(&mut toolexec(dir.path(), args), stdin)
}

/// `toolexec code FILE ARGS` with `code` written to `FILE`.
fn exec_file(code: &str, args: &[&str]) -> (Out, String) {
    let dir = TempDir::new("code");
    let path = dir.write("script.js", code);
    let path = path.to_str().unwrap().to_owned();
    let mut all = vec!["code", path.as_str()];
    all.extend_from_slice(args);
    (run(&mut toolexec(dir.path(), &all)), path)
}

const MULTI_TOOL: &str = r#"
const [sum, product, digest, words] = await Promise.all([
    tools.math.add({a: 2, b: 3}),
    tools.run("math:multiply", {a: 4, b: 5}),
    tools.hash.sha256({text: "abc"}),
    tools.text.word_count({text: "one two three"}),
]);
console.log("partial", sum.result, product.result);
console.warn("a warning");
return {sum: sum.result, product: product.result, hex: digest.hex.slice(0, 8), words: words.words};
"#;

#[test]
fn exec_runs_a_file_calling_several_builtins() {
    let (out, _) = exec_file(MULTI_TOOL, &[]);
    out.expect_code(0);
    // The script's stdout first, then the returned value as pretty JSON.
    let (log, value) = out.stdout.split_once('\n').unwrap();
    assert_eq!(log, "partial 5 20", "{out}");
    let value: Value = serde_json::from_str(value).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        value,
        json!({"sum": 5, "product": 20, "hex": "ba7816bf", "words": 3})
    );
    assert_eq!(out.stderr, "a warning\n", "{out}");

    // Strings print raw; no return prints nothing.
    let (out, _) = exec_file(
        "return `sum: ${(await tools.math.add({a: 1, b: 2})).result}`",
        &[],
    );
    out.expect_code(0);
    assert_eq!(out.stdout, "sum: 3\n");
    let (out, _) = exec_file("console.log('only output')", &[]);
    out.expect_code(0);
    assert_eq!(out.stdout, "only output\n");
}

#[test]
fn exec_reads_the_script_from_stdin() {
    let out = exec(&["code", "-"], Some(MULTI_TOOL));
    out.expect_code(0);
    assert!(out.stdout.starts_with("partial 5 20\n"), "{out}");
    assert!(out.stdout.contains("\"product\": 20"), "{out}");
    // --json works on stdin scripts too, and `--json` may come last.
    let out = exec(&["code", "-", "--json"], Some("return [1, 'two']"));
    out.expect_code(0);
    assert_eq!(out.json()["value"], json!([1, "two"]));
}

#[test]
fn syntax_errors_exit_two_with_line_and_column() {
    let (out, path) = exec_file("console.log('never');\nconst b = 1 +;\n", &[]);
    out.expect_code(2);
    assert!(
        out.stderr
            .contains(&format!("error: syntax_error: {path}:2:14: ")),
        "{out}"
    );
    assert_eq!(out.stdout, "", "nothing ran: {out}");
    let out = exec(&["code", "-"], Some("let x = ;"));
    out.expect_code(2);
    assert!(
        out.stderr.contains("error: syntax_error: <stdin>:1:9: "),
        "{out}"
    );
}

#[test]
fn exceptions_exit_one_with_the_stack() {
    let (out, _) = exec_file(
        "function inner() { throw new TypeError('bad input') }\nfunction outer() { inner() }\nconsole.log('before');\nouter();",
        &[],
    );
    out.expect_code(1);
    assert_eq!(out.stdout, "before\n", "{out}");
    assert!(
        out.stderr
            .contains("error: exception: TypeError: bad input\n"),
        "{out}"
    );
    assert!(
        out.stderr.contains("at inner") && out.stderr.contains("at outer"),
        "{out}"
    );
}

#[test]
fn limits_exit_one_naming_the_limit() {
    let started = Instant::now();
    let (out, _) = exec_file("for (;;) {}", &["--timeout", "200ms"]);
    out.expect_code(1);
    assert!(
        out.stderr.contains("error: limit_exceeded: timeout: "),
        "{out}"
    );
    assert!(started.elapsed() < Duration::from_secs(20), "{out}");

    let (out, _) = exec_file(
        "await tools.math.add({a: 1, b: 1});\nawait tools.math.add({a: 2, b: 2});\nreturn 'done'",
        &["--max-tool-calls", "1"],
    );
    out.expect_code(1);
    assert!(
        out.stderr.contains("error: limit_exceeded: tool_calls: "),
        "{out}"
    );

    let (out, _) = exec_file(
        "const keep = []; for (;;) keep.push('x'.repeat(1 << 16) + keep.length);",
        &["--memory", "8MiB"],
    );
    out.expect_code(1);
    assert!(
        out.stderr.contains("error: limit_exceeded: memory: "),
        "{out}"
    );

    let (out, _) = exec_file(
        "for (let i = 0; i < 100; i++) console.log('line', i);",
        &["--max-output", "256"],
    );
    out.expect_code(1);
    assert!(
        out.stderr.contains("error: limit_exceeded: output: "),
        "{out}"
    );
    assert!(out.stdout.starts_with("line 0\nline 1\n"), "{out}");
}

#[test]
fn allow_restricts_the_tools_a_script_may_call() {
    let script = "const s = await tools.math.add({a: 1, b: 2});\nreturn await tools.hash.sha256({text: 'x'});";
    let (out, _) = exec_file(script, &["--allow", "math:*"]);
    out.expect_code(1);
    assert!(
        out.stderr
            .contains("error: tool_error: call 1 (hash:sha256) failed: not_allowed"),
        "{out}"
    );
    // Repeatable: both patterns count.
    let (out, _) = exec_file(script, &["--allow", "math:*", "--allow", "hash:sha256"]);
    out.expect_code(0);
    assert!(out.stdout.contains("\"hex\""), "{out}");
}

#[test]
fn json_prints_the_whole_outcome() {
    let (out, _) = exec_file(MULTI_TOOL, &["--json"]);
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["status"], json!({"kind": "ok"}));
    assert_eq!(v["value"]["sum"], 5);
    assert_eq!(v["stdout"], "partial 5 20\n");
    assert_eq!(v["stderr"], "a warning\n");
    let calls = v["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[0]["tool_id"], "math:add");
    // The log summarizes arguments and results: size, digest, preview.
    assert_eq!(calls[0]["args"]["preview"], r#"{"a":2,"b":3}"#);
    assert_eq!(calls[0]["args"]["bytes"], 13);
    assert!(calls[0]["result"]["sha256"].is_string());
    assert_eq!(calls[0]["ok"], true);
    assert!(calls[0]["duration_ms"].is_number());
    assert!(v["duration_ms"].is_number());

    // Failures: the outcome on stdout, the exit code as without --json.
    let (out, _) = exec_file("const x = ;", &["--json"]);
    out.expect_code(2);
    let v = out.json();
    assert_eq!(v["status"]["kind"], "syntax_error");
    assert_eq!(
        (&v["status"]["line"], &v["status"]["column"]),
        (&json!(1), &json!(11))
    );
    let (out, _) = exec_file(
        "await tools.hash.sha256({text: 'x'})",
        &["--json", "--allow", "math:add"],
    );
    out.expect_code(1);
    let v = out.json();
    assert_eq!(v["status"]["kind"], "tool_error");
    assert_eq!(v["status"]["error"]["code"], "not_allowed");
    assert_eq!(v["tool_calls"][0]["ok"], false);
}

#[test]
fn bad_input_and_flags_exit_two() {
    let out = exec(&["code", "/no/such/script.js"], None);
    out.expect_code(2);
    assert!(
        out.stderr.contains("cannot open /no/such/script.js"),
        "{out}"
    );

    let big = format!("return 1;\n{}", " ".repeat(1 << 20));
    let (out, _) = exec_file(&big, &[]);
    out.expect_code(2);
    assert!(out.stderr.contains("larger than 1048576 bytes"), "{out}");

    let (out, _) = exec_file("return 1", &["--memory", "8MB"]);
    out.expect_code(2);
    assert!(out.stderr.contains("KiB, MiB or GiB"), "{out}");
    let (out, _) = exec_file("return 1", &["--memory", "lots"]);
    out.expect_code(2);
    assert!(out.stderr.contains("expected a size like"), "{out}");
    let (out, _) = exec_file("return 1", &["--timeout", "soon"]);
    out.expect_code(2);
}

#[test]
fn tools_types_prints_typescript_declarations() {
    let out = exec(&["tools", "types", "math"], None);
    out.expect_code(0);
    let ts = &out.stdout;
    assert!(ts.contains("interface MathTools {"), "{ts}");
    assert!(
        ts.contains("  add(args: {\n    /** The left operand. */\n    a: number;"),
        "{ts}"
    );
    assert!(ts.contains("    b: number;"), "{ts}");
    assert!(
        ts.contains("  }): Promise<{\n    /** The result. */\n    result: number;\n  }>;"),
        "{ts}"
    );
    assert!(ts.contains("declare const tools: {"), "{ts}");
    assert!(!ts.contains("interface TextTools"), "{ts}");

    let all = exec(&["tools", "types"], None);
    all.expect_code(0);
    for iface in [
        "MathTools",
        "TextTools",
        "JsonTools",
        "TimeTools",
        "HashTools",
        "EncodingTools",
    ] {
        assert!(
            all.stdout.contains(&format!("interface {iface} {{")),
            "{iface}"
        );
    }
    let json = exec(&["--json", "tools", "types", "hash"], None);
    json.expect_code(0);
    let v = json.json();
    assert_eq!(v["namespace"], "hash");
    assert!(v["typescript"].as_str().unwrap().contains("sha256(args: {"));

    let out = exec(&["tools", "types", "nope"], None);
    out.expect_code(2);
    assert!(out.stderr.contains("no namespace \"nope\""), "{out}");
}

#[test]
fn describe_shows_the_typescript_declaration() {
    let out = exec(&["tools", "describe", "math:add"], None);
    out.expect_code(0);
    let md = &out.stdout;
    let section = md
        .split_once("## TypeScript")
        .map(|x| x.1)
        .unwrap_or_else(|| panic!("{md}"));
    assert!(section.contains("```ts\n"), "{md}");
    assert!(section.contains("  add(args: {"), "{md}");
    assert!(section.contains("    a: number;"), "{md}");

    for detail in ["full", "schema"] {
        let out = exec(
            &[
                "--json", "tools", "describe", "math:add", "--detail", detail,
            ],
            None,
        );
        out.expect_code(0);
        let v = out.json();
        assert_eq!(v["id"], "math:add", "the description's own fields stay");
        assert_eq!(v["input_schema"]["type"], "object");
        let ts = v["typescript"]
            .as_str()
            .unwrap_or_else(|| panic!("{detail}: {v}"));
        assert!(
            ts.contains("interface MathTools {") && ts.contains("add(args: {"),
            "{ts}"
        );
    }
    let out = exec(
        &[
            "--json", "tools", "describe", "math:add", "--detail", "summary",
        ],
        None,
    );
    out.expect_code(0);
    assert!(out.json().get("typescript").is_none());
    let out = exec(
        &["tools", "describe", "math:add", "--detail", "summary"],
        None,
    );
    assert!(!out.stdout.contains("TypeScript"), "{out}");
}
