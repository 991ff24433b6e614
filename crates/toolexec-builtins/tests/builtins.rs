//! The built-in catalog through the real pipeline: definitions, every docs
//! example, per-tool behaviour and hostile jq filters.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolexec::{Error, Exec, ListRequest, RunOptions};

fn exec() -> Exec {
    Exec::builder()
        .catalog(toolexec_builtins::catalog())
        .build()
}

async fn ok(exec: &Exec, id: &str, args: Value) -> Value {
    match exec.run_tool(id, args.clone()).await {
        Ok(out) => out.value,
        Err(e) => panic!("{id} {args}: {e}"),
    }
}

async fn err(exec: &Exec, id: &str, args: Value) -> Error {
    match exec.run_tool(id, args.clone()).await {
        Ok(out) => panic!("{id} {args} should fail, got {}", out.value),
        Err(e) => e,
    }
}

/// Asserts a tool failure (`execution_failed`) whose message contains `needle`.
async fn fails(exec: &Exec, id: &str, args: Value, needle: &str) {
    let e = err(exec, id, args).await;
    assert_eq!(e.code().as_str(), "execution_failed", "{e}");
    assert!(
        e.to_string().contains(needle),
        "{e} should mention {needle:?}"
    );
}

async fn invalid(exec: &Exec, id: &str, args: Value) {
    let e = err(exec, id, args).await;
    assert_eq!(e.code().as_str(), "validation_input", "{e}");
}

const IDS: &[&str] = &[
    "encoding:base64_decode",
    "encoding:base64_encode",
    "encoding:uuid",
    "hash:sha256",
    "hash:sha512",
    "json:diff",
    "json:merge",
    "json:patch",
    "json:query",
    "math:add",
    "math:divide",
    "math:multiply",
    "math:power",
    "math:round",
    "math:sqrt",
    "math:stats",
    "math:subtract",
    "text:case",
    "text:regex_replace",
    "text:split",
    "text:word_count",
    "time:convert",
    "time:now",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_is_documented_and_every_example_runs() {
    let exec = exec();
    let page = exec.catalog().list(&ListRequest::default()).unwrap();
    let ids: Vec<String> = page.tools.iter().map(|t| t.tool().id.to_string()).collect();
    assert_eq!(ids, IDS);
    let mut examples = 0;
    for entry in &page.tools {
        let tool = entry.tool();
        let id = tool.id.to_string();
        assert!(
            tool.title.as_deref().is_some_and(|t| !t.is_empty()),
            "{id}: title"
        );
        assert!(tool.description.len() > 40, "{id}: description");
        assert!(
            tool.docs.summary.as_deref().is_some_and(|s| !s.is_empty()),
            "{id}: summary"
        );
        assert!(!tool.docs.notes.is_empty(), "{id}: notes");
        assert!(!tool.docs.examples.is_empty(), "{id}: examples");
        assert!(!tool.tags.is_empty(), "{id}: tags");
        let ann = tool
            .annotations
            .as_ref()
            .unwrap_or_else(|| panic!("{id}: annotations"));
        assert_eq!(ann.read_only_hint, Some(true), "{id}");
        assert_eq!(ann.open_world_hint, Some(false), "{id}");
        let idempotent = !matches!(id.as_str(), "time:now" | "encoding:uuid");
        assert_eq!(ann.idempotent_hint, Some(idempotent), "{id}");

        let input = &tool.input_schema;
        assert_eq!(input["type"], "object", "{id}");
        assert_eq!(
            input["additionalProperties"], false,
            "{id}: unknown fields must be rejected"
        );
        let props = input["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{id}: properties"));
        for (name, prop) in props {
            let described = prop.get("description").is_some()
                || prop.get("$ref").is_some()
                || prop.get("allOf").is_some();
            assert!(described, "{id}.{name} has no description: {prop}");
        }
        let output = tool
            .output_schema
            .as_ref()
            .unwrap_or_else(|| panic!("{id}: output schema"));
        assert_eq!(
            output["type"], "object",
            "{id}: structured results are objects"
        );

        for ex in &tool.docs.examples {
            let out = exec
                .run_tool(&id, ex.args.clone())
                .await
                .unwrap_or_else(|e| panic!("{id} example {:?}: {e}", ex.title));
            if let Some(expected) = &ex.result {
                assert_eq!(&out.value, expected, "{id} example {:?}", ex.title);
            }
            examples += 1;
        }
    }
    assert!(examples >= 35, "{examples}");
}

#[tokio::test]
async fn unknown_fields_and_bad_types_are_rejected() {
    let exec = exec();
    invalid(&exec, "math:add", json!({"a": 1, "b": 2, "c": 3})).await;
    invalid(&exec, "math:add", json!({"a": "1", "b": 2})).await;
    invalid(&exec, "math:round", json!({"value": 1.5, "decimals": 16})).await;
    invalid(&exec, "math:stats", json!({"values": []})).await;
    invalid(&exec, "text:case", json!({"text": "x", "to": "shouting"})).await;
    invalid(
        &exec,
        "text:split",
        json!({"text": "x", "separator": ",", "limit": 0}),
    )
    .await;
    invalid(&exec, "json:query", json!({"filter": ".", "input": {}})).await;
    invalid(
        &exec,
        "json:patch",
        json!({"document": {}, "patch": [{"op": "frobnicate", "path": "/a"}]}),
    )
    .await;
    invalid(
        &exec,
        "hash:sha256",
        json!({"text": "x", "encoding": "hex"}),
    )
    .await;
    invalid(&exec, "encoding:uuid", json!({"count": 101})).await;
    invalid(&exec, "time:now", json!({"tz": "UTC"})).await;
}

#[tokio::test]
async fn math() {
    let exec = exec();
    let r = |v: f64| json!({"result": v});
    assert_eq!(
        ok(&exec, "math:add", json!({"a": 0.1, "b": 0.2})).await,
        r(0.1 + 0.2)
    );
    assert_eq!(
        ok(&exec, "math:subtract", json!({"a": 1, "b": 3})).await,
        r(-2.0)
    );
    assert_eq!(
        ok(&exec, "math:multiply", json!({"a": -1.5, "b": 4})).await,
        r(-6.0)
    );
    assert_eq!(
        ok(&exec, "math:divide", json!({"a": 7, "b": 2})).await,
        r(3.5)
    );
    fails(
        &exec,
        "math:divide",
        json!({"a": 1, "b": 0}),
        "division by zero",
    )
    .await;
    fails(
        &exec,
        "math:divide",
        json!({"a": 0, "b": 0}),
        "division by zero",
    )
    .await;
    fails(
        &exec,
        "math:multiply",
        json!({"a": 1e300, "b": 1e300}),
        "overflows",
    )
    .await;
    assert_eq!(
        ok(&exec, "math:power", json!({"base": 2, "exponent": -2})).await,
        r(0.25)
    );
    fails(
        &exec,
        "math:power",
        json!({"base": -8, "exponent": 0.5}),
        "not a number",
    )
    .await;
    fails(
        &exec,
        "math:power",
        json!({"base": 0, "exponent": -1}),
        "overflows",
    )
    .await;
    assert_eq!(ok(&exec, "math:sqrt", json!({"value": 0})).await, r(0.0));
    fails(&exec, "math:sqrt", json!({"value": -4}), "negative").await;
    assert_eq!(ok(&exec, "math:round", json!({"value": 2.5})).await, r(3.0));
    assert_eq!(
        ok(
            &exec,
            "math:round",
            json!({"value": 1.23456, "decimals": 3})
        )
        .await,
        r(1.235)
    );
    let s = ok(&exec, "math:stats", json!({"values": [10, -2, 7]})).await;
    assert_eq!(
        s,
        json!({"count": 3, "sum": 15.0, "min": -2.0, "max": 10.0, "mean": 5.0, "median": 7.0})
    );
    fails(
        &exec,
        "math:stats",
        json!({"values": [1e308, 1e308]}),
        "overflows",
    )
    .await;
}

#[tokio::test]
async fn text() {
    let exec = exec();
    let case = |text: &str, to: &str| json!({"text": text, "to": to});
    assert_eq!(
        ok(&exec, "text:case", case("hello world", "upper")).await,
        json!({"text": "HELLO WORLD"})
    );
    assert_eq!(
        ok(&exec, "text:case", case("Hello World!", "lower")).await,
        json!({"text": "hello world!"})
    );
    assert_eq!(
        ok(&exec, "text:case", case("XMLHttpRequest", "kebab")).await,
        json!({"text": "xml-http-request"})
    );
    assert_eq!(
        ok(&exec, "text:case", case("some_var name", "pascal")).await,
        json!({"text": "SomeVarName"})
    );
    assert_eq!(
        ok(&exec, "text:case", case("", "title")).await,
        json!({"text": ""})
    );

    let split = ok(
        &exec,
        "text:split",
        json!({"text": "a::b::c", "separator": "::"}),
    )
    .await;
    assert_eq!(split, json!({"parts": ["a", "b", "c"]}));
    let split = ok(
        &exec,
        "text:split",
        json!({"text": "héllo", "separator": ""}),
    )
    .await;
    assert_eq!(split, json!({"parts": ["h", "é", "l", "l", "o"]}));
    let split = ok(
        &exec,
        "text:split",
        json!({"text": "no separator", "separator": ";"}),
    )
    .await;
    assert_eq!(split, json!({"parts": ["no separator"]}));

    let rr = |text: &str, pattern: &str, replacement: &str| json!({"text": text, "pattern": pattern, "replacement": replacement});
    let out = ok(&exec, "text:regex_replace", rr("a1b22c333", "\\d+", "#")).await;
    assert_eq!(out, json!({"text": "a#b#c#", "replacements": 3}));
    let out = ok(
        &exec,
        "text:regex_replace",
        rr(
            "John Smith",
            "(?P<first>\\w+) (?P<last>\\w+)",
            "${last}, ${first}",
        ),
    )
    .await;
    assert_eq!(out, json!({"text": "Smith, John", "replacements": 1}));
    let out = ok(
        &exec,
        "text:regex_replace",
        rr("Price: 5", "(\\d)", "$$${1}0"),
    )
    .await;
    assert_eq!(out, json!({"text": "Price: $50", "replacements": 1}));
    let out = ok(&exec, "text:regex_replace", rr("nothing", "x+", "y")).await;
    assert_eq!(out, json!({"text": "nothing", "replacements": 0}));
    fails(
        &exec,
        "text:regex_replace",
        rr("x", "(unclosed", "y"),
        "invalid regular expression \"(unclosed\"",
    )
    .await;
    fails(
        &exec,
        "text:regex_replace",
        rr("x", "(?<=a)b", "y"),
        "look-around",
    )
    .await;
    fails(
        &exec,
        "text:regex_replace",
        rr("x", "\\w{1000}{1000}", "y"),
        "invalid regular expression",
    )
    .await;
    // A replacement that would blow up the text is refused.
    let big = "a".repeat(200_000);
    let huge = "b".repeat(200_000);
    fails(
        &exec,
        "text:regex_replace",
        rr(&big, "", &huge),
        "longer than",
    )
    .await;

    let wc = ok(
        &exec,
        "text:word_count",
        json!({"text": "  naïve café \r\n\r\nend\n"}),
    )
    .await;
    assert_eq!(wc, json!({"words": 3, "characters": 21, "lines": 3}));
    assert_eq!(
        ok(&exec, "text:word_count", json!({"text": ""})).await,
        json!({"words": 0, "characters": 0, "lines": 0})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_query() {
    let exec = exec();
    let q = |filter: &str, data: Value| json!({"filter": filter, "data": data});
    let data = json!({"users": [{"name": "ann", "age": 31}, {"name": "bob", "age": 17}]});
    let out = ok(
        &exec,
        "json:query",
        q("[.users[] | select(.age >= 18) | .name]", data.clone()),
    )
    .await;
    assert_eq!(out, json!({"results": [["ann"]]}));
    let out = ok(
        &exec,
        "json:query",
        q(".users | map(.age) | add / length", data.clone()),
    )
    .await;
    assert_eq!(out, json!({"results": [24.0]}));
    let out = ok(&exec, "json:query", q(".missing[]?", data.clone())).await;
    assert_eq!(out, json!({"results": []}));
    let out = ok(
        &exec,
        "json:query",
        json!({"filter": "[1, 2] | {a: .[0]}, (\"x\" | ascii_upcase)"}),
    )
    .await;
    assert_eq!(out, json!({"results": [{"a": 1}, "X"]}));
    let out = ok(
        &exec,
        "json:query",
        q(
            "to_entries | map(\"\\(.key)=\\(.value)\") | join(\"&\")",
            json!({"a": 1, "b": "x"}),
        ),
    )
    .await;
    assert_eq!(out, json!({"results": ["a=1&b=x"]}));
    let out = ok(
        &exec,
        "json:query",
        q(
            "[.[] | test(\"^a\")], (.[0] | sub(\"a\"; \"A\"))",
            json!(["abc", "bcd"]),
        ),
    )
    .await;
    assert_eq!(out, json!({"results": [[true, false], "Abc"]}));
    let out = ok(
        &exec,
        "json:query",
        q(
            "[limit(3; repeat(1))], ([nan, infinite] | map(tojson))",
            Value::Null,
        ),
    )
    .await;
    assert_eq!(out["results"][0], json!([1, 1, 1]));
    let out = ok(&exec, "json:query", q("[nan, 1e1000]", Value::Null)).await;
    assert_eq!(out, json!({"results": [[null, f64::MAX]]}));
    let out = ok(
        &exec,
        "json:query",
        q("reduce .[] as $x (0; . + $x)", json!([1, 2, 3])),
    )
    .await;
    assert_eq!(out, json!({"results": [6]}));
    let out = ok(
        &exec,
        "json:query",
        q("[.[] | tostring]", json!([1, "a", [true], {"k": null}])),
    )
    .await;
    assert_eq!(
        out,
        json!({"results": [["1", "a", "[true]", "{\"k\":null}"]]})
    );

    fails(
        &exec,
        "json:query",
        q(".a.b", json!({"a": 5})),
        "jq error: cannot index 5",
    )
    .await;
    fails(
        &exec,
        "json:query",
        q("error(\"custom failure\")", Value::Null),
        "custom failure",
    )
    .await;
    fails(
        &exec,
        "json:query",
        q(".[", Value::Null),
        "invalid jq filter",
    )
    .await;
    fails(
        &exec,
        "json:query",
        q("map(.x", Value::Null),
        "invalid jq filter",
    )
    .await;
    fails(
        &exec,
        "json:query",
        q("frobnicate(1)", Value::Null),
        "undefined filter frobnicate/1",
    )
    .await;
    fails(
        &exec,
        "json:query",
        q("input", Value::Null),
        "undefined filter input/0",
    )
    .await;
    fails(
        &exec,
        "json:query",
        q("import \"x\" as x; 1", Value::Null),
        "modules are not supported",
    )
    .await;
    fails(&exec, "json:query", q("halt_error", Value::Null), "halt").await;
}

#[tokio::test]
async fn json_query_env_is_empty() {
    let exec = exec();
    let out = ok(&exec, "json:query", json!({"filter": "env | length"})).await;
    assert_eq!(out, json!({"results": [0]}));
    fails(
        &exec,
        "json:query",
        json!({"filter": "$ENV.PATH"}),
        "undefined variable",
    )
    .await;
}

/// Runs a hostile filter with a short deadline: it must end with a clean
/// error (or within the limits), quickly, and leave the engine usable.
async fn hostile(exec: &Exec, filter: &str, data: Value) -> Error {
    let opts = RunOptions::timeout(Duration::from_secs(2));
    eprintln!("hostile: {}", &filter[..filter.len().min(80)]);
    let start = Instant::now();
    let r = exec
        .run_tool_with("json:query", json!({"filter": filter, "data": data}), &opts)
        .await;
    let elapsed = start.elapsed();
    assert!(
        elapsed < Duration::from_secs(4),
        "{filter}: took {elapsed:?}"
    );
    let e = match r {
        Ok(out) => panic!(
            "{filter}: should fail, got {} bytes",
            out.value.to_string().len()
        ),
        Err(e) => e,
    };
    let code = e.code().as_str();
    assert!(
        matches!(code, "timeout" | "execution_failed" | "limit_exceeded"),
        "{filter}: {e}"
    );
    // The engine still answers.
    let out = ok(
        exec,
        "json:query",
        json!({"filter": ".a + 1", "data": {"a": 1}}),
    )
    .await;
    assert_eq!(out, json!({"results": [2]}));
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_jq_filters_end_cleanly() {
    let exec = exec();
    // Tail-recursive loop: spins without growing the stack; stopped at the deadline.
    let e = hostile(&exec, "def f: f; f", Value::Null).await;
    assert_eq!(e.code().as_str(), "timeout", "{e}");
    // Real recursion: stopped by the stack guard long before overflowing.
    let e = hostile(&exec, "def f: [f]; f", Value::Null).await;
    assert!(e.to_string().contains("recursed too deeply"), "{e}");
    hostile(&exec, "def f: 1 + f; f", Value::Null).await;
    // Tail loops passing closures grow jaq's binding list (freed recursively).
    hostile(&exec, "def f(g): f(g | g); f(.)", Value::Null).await;
    hostile(
        &exec,
        "def f(g; $n): if $n == 0 then 0 else f(g; $n - 1) end; f(.; 1e9)",
        Value::Null,
    )
    .await;
    hostile(&exec, "null | path(getpath([range(1e8) | 0]))", Value::Null).await;
    // Infinite output.
    let e = hostile(&exec, "repeat(1)", Value::Null).await;
    assert!(e.to_string().contains("more than 10000 results"), "{e}");
    hostile(&exec, "range(1e12)", Value::Null).await;
    // Huge collections: memory budget or deadline.
    hostile(&exec, "[range(1e9)]", Value::Null).await;
    hostile(&exec, "[limit(1e9; repeat(1))] | length", Value::Null).await;
    hostile(&exec, "last(range(1e12))", Value::Null).await;
    hostile(&exec, "[recurse(. + 1)]", json!(0)).await;
    // Allocation bombs that would abort the process.
    let e = hostile(&exec, "\"x\" * 1000000000000000", Value::Null).await;
    assert!(e.to_string().contains("string longer than"), "{e}");
    hostile(&exec, "reduce range(64) as $i (\"ab\"; . + .)", Value::Null).await;
    let e = hostile(
        &exec,
        "\"x\" * 10000000 as $s | [range(1000) | $s + \"y\"] | length",
        Value::Null,
    )
    .await;
    assert!(e.to_string().contains("memory budget"), "{e}");
    hostile(
        &exec,
        "reduce range(30) as $i ([1]; . + .) | length",
        Value::Null,
    )
    .await;
    let e = hostile(&exec, "reduce range(40) as $i (7; . * .)", Value::Null).await;
    assert!(e.to_string().contains("integer wider"), "{e}");
    // Deep values would overflow jaq's recursive printer, comparison and drop.
    let e = hostile(
        &exec,
        "reduce range(1000000) as $i (null; [.]) | tojson",
        Value::Null,
    )
    .await;
    assert!(e.to_string().contains("nested deeper"), "{e}");
    hostile(
        &exec,
        "reduce range(1000000) as $i (null; {a: .}) | . == .",
        Value::Null,
    )
    .await;
    hostile(&exec, "[\"[\" * 100000 | fromjson]", Value::Null).await;
    hostile(&exec, "reduce range(200) as $i (0; [.]) ", Value::Null).await;
    // Quadratic work inside natives still stops at the deadline.
    hostile(
        &exec,
        "[range(200000) | 0] | indices([range(100000) | 0] + [1])",
        Value::Null,
    )
    .await;
    // Output limits.
    let e = hostile(&exec, "[range(2000000)]", Value::Null).await;
    assert!(e.to_string().contains("larger than"), "{e}");
    let e = hostile(&exec, "\"x\" * 9000000", Value::Null).await;
    assert!(e.to_string().contains("larger than"), "{e}");
    // A deeply nested input is refused by the pipeline before the tool runs.
    let mut deep = json!(1);
    for _ in 0..500 {
        deep = json!([deep]);
    }
    let e = hostile(&exec, ".", deep).await;
    assert_eq!(e.code().as_str(), "limit_exceeded", "{e}");
    // A deeply nested filter parses on the big stack (or is refused).
    let nested = "[".repeat(8000) + &"]".repeat(8000);
    let r = exec
        .run_tool_with(
            "json:query",
            json!({"filter": nested}),
            &RunOptions::timeout(Duration::from_secs(5)),
        )
        .await;
    assert!(r.is_err(), "an 8000-deep result exceeds the result depth");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_jq_work_succeeds() {
    let exec = exec();
    let q = |filter: &str| json!({"filter": filter});
    let out = ok(
        &exec,
        "json:query",
        q("[limit(100000; repeat(1))] | length"),
    )
    .await;
    assert_eq!(out, json!({"results": [100000]}));
    let out = ok(&exec, "json:query", q("[range(100000)] | map(. * 2) | add")).await;
    assert_eq!(out, json!({"results": [9999900000_i64]}));
    let out = ok(
        &exec,
        "json:query",
        q("reduce range(1000) as $i (null; [.]) | [paths] | length"),
    )
    .await;
    assert_eq!(out, json!({"results": [1000]}));
    let out = ok(
        &exec,
        "json:query",
        q("[range(100000)] | map(tostring) | join(\",\") | length"),
    )
    .await;
    assert_eq!(out, json!({"results": [588889]}));
    let out = ok(
        &exec,
        "json:query",
        q("reduce range(100000) as $i ([]; . + [$i]) | length"),
    )
    .await;
    assert_eq!(out, json!({"results": [100000]}));
    let out = ok(
        &exec,
        "json:query",
        q("[range(10000)] | map(tostring) | sort | .[0:3]"),
    )
    .await;
    assert_eq!(out, json!({"results": [["0", "1", "10"]]}));
    // Concurrent queries share the worker pool.
    let calls = (0..8).map(|i| {
        let exec = exec.clone();
        async move {
            exec.run_tool("json:query", json!({"filter": ". * 2", "data": i}))
                .await
                .unwrap()
                .value
        }
    });
    let outs = futures_join_all(calls).await;
    for (i, out) in outs.into_iter().enumerate() {
        assert_eq!(out, json!({"results": [i * 2]}));
    }
}

async fn futures_join_all<F>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut outs = Vec::new();
    for h in handles {
        outs.push(h.await.unwrap());
    }
    outs
}

#[tokio::test]
async fn json_merge_diff_patch() {
    let exec = exec();
    let out = ok(
        &exec,
        "json:merge",
        json!({"base": {"a": [1, 2], "b": {"c": 1}}, "patch": {"a": null, "b": {"d": 2}}}),
    )
    .await;
    assert_eq!(out, json!({"result": {"b": {"c": 1, "d": 2}}}));
    let out = ok(
        &exec,
        "json:merge",
        json!({"base": {"a": 1}, "patch": "replaced"}),
    )
    .await;
    assert_eq!(out, json!({"result": "replaced"}));

    let from = json!({"list": [1, 2, 3], "name": "x", "gone": true});
    let to = json!({"list": [1, 5], "name": "x", "new": {"k": [null]}});
    let diff = ok(&exec, "json:diff", json!({"from": from, "to": to})).await;
    let patch = diff["patch"].clone();
    assert!(patch.as_array().is_some_and(|p| !p.is_empty()));
    let applied = ok(
        &exec,
        "json:patch",
        json!({"document": from, "patch": patch}),
    )
    .await;
    assert_eq!(applied, json!({"result": to}));
    let same = ok(
        &exec,
        "json:diff",
        json!({"from": [1, {"a": 2}], "to": [1, {"a": 2}]}),
    )
    .await;
    assert_eq!(same, json!({"patch": []}));

    let doc = json!({"a": {"b": [1]}});
    let out = ok(
        &exec,
        "json:patch",
        json!({"document": doc, "patch": [
            {"op": "copy", "from": "/a/b", "path": "/c"},
            {"op": "move", "from": "/a", "path": "/d"},
            {"op": "add", "path": "/c/0", "value": 0},
            {"op": "add", "path": "/e~1f", "value": "slash"}
        ]}),
    )
    .await;
    assert_eq!(
        out,
        json!({"result": {"c": [0, 1], "d": {"b": [1]}, "e/f": "slash"}})
    );
    fails(
        &exec,
        "json:patch",
        json!({"document": doc, "patch": [{"op": "test", "path": "/a/b/0", "value": 2}]}),
        "operation 0 (test",
    )
    .await;
    fails(
        &exec,
        "json:patch",
        json!({"document": doc, "patch": [
            {"op": "add", "path": "/x", "value": 1},
            {"op": "replace", "path": "/nope/deeper", "value": 1}
        ]}),
        "operation 1 (replace",
    )
    .await;
    let bomb: Vec<Value> = (0..40)
        .map(|i| json!({"op": "copy", "from": "", "path": format!("/k{i}")}))
        .collect();
    fails(
        &exec,
        "json:patch",
        json!({"document": {"s": "x".repeat(10_000)}, "patch": bomb}),
        "larger than",
    )
    .await;
}

#[tokio::test]
async fn time() {
    let exec = exec();
    let now = ok(&exec, "time:now", json!({})).await;
    assert_eq!(now["timezone"], "UTC");
    assert!(
        now["iso8601"].as_str().unwrap().ends_with("+00:00"),
        "{now}"
    );
    let secs = now["unix_seconds"].as_i64().unwrap();
    let millis = now["unix_millis"].as_i64().unwrap();
    assert!(secs > 1_700_000_000 && millis / 1000 == secs, "{now}");
    let tokyo = ok(&exec, "time:now", json!({"timezone": "Asia/Tokyo"})).await;
    assert!(
        tokyo["iso8601"].as_str().unwrap().ends_with("+09:00"),
        "{tokyo}"
    );
    assert_eq!(tokyo["offset"], "+09:00");
    fails(
        &exec,
        "time:now",
        json!({"timezone": "Mars/Olympus_Mons"}),
        "unknown time zone \"Mars/Olympus_Mons\"",
    )
    .await;

    let conv = |time: Value, to: &str| json!({"time": time, "to_timezone": to});
    let out = ok(
        &exec,
        "time:convert",
        conv(json!("2024-01-01T00:00:00+05:30"), "UTC"),
    )
    .await;
    assert_eq!(out["iso8601"], "2023-12-31T18:30:00+00:00");
    // Daylight saving time: New York is -05:00 in winter, -04:00 in summer.
    let out = ok(
        &exec,
        "time:convert",
        conv(json!("2024-01-15T12:00:00Z"), "America/New_York"),
    )
    .await;
    assert_eq!(out["offset"], "-05:00");
    let out = ok(
        &exec,
        "time:convert",
        conv(json!(1_700_000_000.5), "Europe/London"),
    )
    .await;
    assert_eq!(out["iso8601"], "2023-11-14T22:13:20.5+00:00");
    assert_eq!(out["unix_seconds"], 1_700_000_000);
    let out = ok(&exec, "time:convert", conv(json!("1700000000"), "UTC")).await;
    assert_eq!(out["iso8601"], "2023-11-14T22:13:20+00:00");
    let out = ok(
        &exec,
        "time:convert",
        conv(
            json!("2024-03-10T12:00:00-04:00[America/New_York]"),
            "Asia/Kolkata",
        ),
    )
    .await;
    assert_eq!(out["iso8601"], "2024-03-10T21:30:00+05:30");
    // Civil times need a source zone.
    fails(
        &exec,
        "time:convert",
        conv(json!("2024-03-10 09:00"), "UTC"),
        "from_timezone",
    )
    .await;
    let out = ok(
        &exec,
        "time:convert",
        json!({"time": "2024-03-10", "from_timezone": "Australia/Sydney", "to_timezone": "UTC"}),
    )
    .await;
    assert_eq!(out["iso8601"], "2024-03-09T13:00:00+00:00");
    fails(
        &exec,
        "time:convert",
        conv(json!("next tuesday"), "UTC"),
        "cannot read \"next tuesday\"",
    )
    .await;
    fails(
        &exec,
        "time:convert",
        conv(json!("2024-01-01T00:00:00Z"), "Nowhere/City"),
        "Nowhere/City",
    )
    .await;
    fails(
        &exec,
        "time:convert",
        conv(json!(1e20), "UTC"),
        "out of range",
    )
    .await;
}

#[tokio::test]
async fn hash_and_encoding() {
    let exec = exec();
    let h = ok(&exec, "hash:sha256", json!({"text": ""})).await;
    assert_eq!(
        h["hex"],
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    let a = ok(&exec, "hash:sha256", json!({"text": "héllo"})).await;
    let b = ok(
        &exec,
        "hash:sha256",
        json!({"text": "aMOpbGxv", "encoding": "base64"}),
    )
    .await;
    assert_eq!(a, b, "base64 of the UTF-8 bytes hashes the same");
    fails(
        &exec,
        "hash:sha256",
        json!({"text": "@@@", "encoding": "base64"}),
        "not valid base64",
    )
    .await;

    let enc = ok(
        &exec,
        "encoding:base64_encode",
        json!({"text": "ünï©ode ✓"}),
    )
    .await;
    let dec = ok(
        &exec,
        "encoding:base64_decode",
        json!({"base64": enc["base64"]}),
    )
    .await;
    assert_eq!(dec, json!({"text": "ünï©ode ✓"}));
    let dec = ok(
        &exec,
        "encoding:base64_decode",
        json!({"base64": "aGVs\nbG8"}),
    )
    .await;
    assert_eq!(dec, json!({"text": "hello"}));
    fails(
        &exec,
        "encoding:base64_decode",
        json!({"base64": "not base64!"}),
        "invalid base64",
    )
    .await;
    fails(
        &exec,
        "encoding:base64_decode",
        json!({"base64": "aGVsbG8_"}),
        "url_safe",
    )
    .await;
    fails(
        &exec,
        "encoding:base64_decode",
        json!({"base64": "/w=="}),
        "not UTF-8",
    )
    .await;

    let one = ok(&exec, "encoding:uuid", json!({})).await;
    let list = one["uuids"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    let u = list[0].as_str().unwrap();
    assert_eq!(u.len(), 36);
    assert_eq!(&u[14..15], "4", "version 4: {u}");
    let many = ok(&exec, "encoding:uuid", json!({"count": 100})).await;
    let mut uuids: Vec<&str> = many["uuids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    uuids.sort_unstable();
    uuids.dedup();
    assert_eq!(uuids.len(), 100);
}

#[test]
fn groups_register_separately() {
    let catalog = toolexec::Catalog::new();
    toolexec_builtins::register(&catalog, &[toolexec_builtins::Group::Time]).unwrap();
    assert_eq!(catalog.len(), 2);
    toolexec_builtins::register(&catalog, &[toolexec_builtins::Group::Text]).unwrap();
    assert_eq!(catalog.len(), 6);
    let all = toolexec_builtins::catalog();
    assert_eq!(all.len(), IDS.len());
}
