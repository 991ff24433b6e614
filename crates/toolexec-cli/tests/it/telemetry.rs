//! Telemetry end to end: spans exported to a real OTLP receiver (built on
//! the official OpenTelemetry protobuf package) with one trace from the
//! client through toolexec to an upstream MCP server; Prometheus (Debian's)
//! scraping `serve --metrics`; `/metrics` behind the HTTP gateway's token;
//! and the audit log.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Background, StdioSession, TempDir, dep, free_port, toml_str, toolexec};

const RECEIVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/otlp_receiver.py"
);
const TRACED_UPSTREAM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/py_traced_upstream.py"
);

/// The client's own trace: toolexec must continue it.
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// `toolexec serve --expose both --metrics 127.0.0.1:PORT` in `dir`.
fn serve_with_metrics(dir: &Path, port: u16) -> StdioSession {
    let metrics = format!("127.0.0.1:{port}");
    StdioSession::start(&mut toolexec(
        dir,
        &["serve", "--expose", "both", "--metrics", &metrics],
    ))
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A code execution calling an upstream tool, started by a client that sent
/// `_meta.traceparent`: every span lands in one trace, parented as the
/// work nested (mcp_request → execute_code → execute_tool →
/// upstream_request), and the upstream received the upstream span's
/// context. The audit log has the call with its trace id and caller.
#[test]
fn one_trace_spans_client_toolexec_and_upstream() {
    one_trace("one_trace_spans_client_toolexec_and_upstream", &[]);
}

/// The same with the script in a sandbox (`--code-profile hardened`): its
/// tool calls come back through the sandbox's tool channel and stay in the
/// request's trace, under `execute_code`.
#[test]
fn one_trace_through_a_hardened_code_run() {
    let test = "one_trace_through_a_hardened_code_run";
    if crate::runtimes::bubblewrap(test) {
        one_trace(test, &["--code-profile", "hardened"]);
    }
}

/// `execute_code` calling `up:echo` through `serve FLAGS`; see
/// [`one_trace_spans_client_toolexec_and_upstream`].
fn one_trace(test: &str, flags: &[&str]) {
    let Some(python) = dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let dir = TempDir::new("otlp");
    let spans = dir.path().join("spans.jsonl");
    let upstream_log = dir.path().join("upstream.jsonl");
    let audit = dir.path().join("audit.jsonl");
    let mut receiver = Background::spawn(
        std::process::Command::new(&python).args([RECEIVER, spans.to_str().unwrap()]),
    );
    let port = receiver.wait_stdout_line("listening ");
    std::fs::write(
        dir.path().join("toolexec.toml"),
        format!(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\nservice_name = \"toolexec-test\"\n\
             [audit]\npath = {}\n\
             [[servers]]\nname = \"up\"\ncommand = {}\nargs = [{}, {}]\n",
            toml_str(audit.to_str().unwrap()),
            toml_str(&python),
            toml_str(TRACED_UPSTREAM),
            toml_str(upstream_log.to_str().unwrap()),
        ),
    )
    .unwrap();
    let mut args = vec!["serve"];
    args.extend_from_slice(flags);
    let mut session = StdioSession::start(&mut toolexec(dir.path(), &args));
    let r = session.request(
        7,
        "tools/call",
        json!({
            "name": "execute_code",
            "arguments": {"code": "return (await tools.up.echo({text: 'hi'})).text"},
            "_meta": {"traceparent": format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")},
        }),
    );
    assert_eq!(r["result"]["isError"], false, "{r}\n{}", session.stderr());
    // The exporter sends what is queued when serve exits.
    assert!(session.finish().success(), "{}", session.stderr());

    let all = lines(&spans);
    let ours: Vec<&Value> = all
        .iter()
        .filter(|s| s["trace_id"] == CLIENT_TRACE)
        .collect();
    let find = |name: &str| -> &Value {
        ours.iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no span {name:?} in trace {CLIENT_TRACE}: {all:#?}"))
    };
    let request = find("tools/call execute_code");
    let code = find("execute_code");
    let tool = find("execute_tool up:echo");
    let upstream = find("tools/call echo");
    assert_eq!(request["parent_span_id"], CLIENT_SPAN, "{request}");
    assert_eq!(request["attributes"]["mcp.method.name"], "tools/call");
    assert_eq!(request["service"], "toolexec-test");
    // Nested as the work was, though code-mode calls cross tasks.
    let parent_of = |child: &Value, parent: &Value| {
        let mut id = child["parent_span_id"].clone();
        while id != parent["span_id"] {
            let next = ours
                .iter()
                .find(|s| s["span_id"] == id)
                .unwrap_or_else(|| panic!("{child} is not under {parent}: {ours:#?}"));
            id = next["parent_span_id"].clone();
        }
    };
    parent_of(code, request);
    parent_of(tool, code);
    parent_of(upstream, tool);
    if flags.contains(&"hardened") {
        // The script ran in the sandbox; its call came back out of it into
        // the code run's scope (captured before the sandbox started).
        let sandbox = find("sandbox_run");
        assert_eq!(
            sandbox["attributes"]["toolexec.sandbox.profile"],
            "hardened"
        );
        assert_eq!(
            sandbox["attributes"]["toolexec.sandbox.runtime"],
            "bubblewrap"
        );
        parent_of(sandbox, code);
    }
    assert_eq!(tool["attributes"]["gen_ai.tool.name"], "up:echo");
    assert_eq!(tool["attributes"]["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tool["attributes"]["toolexec.backend"], "mcp", "{tool}");
    assert!(
        tool["attributes"]
            .get("gen_ai.tool.call.arguments")
            .is_none(),
        "arguments are opt-in: {tool}"
    );
    // The upstream got the upstream span's context.
    let seen = lines(&upstream_log);
    assert_eq!(seen.len(), 1, "{seen:?}");
    let traceparent = format!(
        "00-{CLIENT_TRACE}-{}-01",
        upstream["span_id"].as_str().unwrap()
    );
    assert_eq!(seen[0]["traceparent"], traceparent.as_str(), "{seen:?}");
    // The audit record of the inner call: caller, trace, digest, no arguments.
    let records = lines(&audit);
    let echo = records
        .iter()
        .find(|r| r["tool"] == "up:echo")
        .unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(echo["outcome"], "ok");
    assert_eq!(echo["trace_id"], CLIENT_TRACE);
    assert_eq!(echo["caller"]["principal"], "stdio", "{echo}");
    assert!(
        echo["args_digest"].as_str().unwrap().starts_with("sha256:"),
        "{echo}"
    );
    assert!(echo.get("args").is_none(), "{echo}");
}

/// Prometheus scrapes `serve --metrics` and its query API returns the
/// calls of a scripted workload by tool and outcome.
#[test]
fn prometheus_scrapes_the_workload() {
    let test = "prometheus_scrapes_the_workload";
    let Some(prometheus) = dep(test, "TOOLEXEC_PROMETHEUS") else {
        return;
    };
    let dir = TempDir::new("prom");
    let metrics_port = free_port();
    let mut session = serve_with_metrics(dir.path(), metrics_port);
    for id in 10..15 {
        let r = session.request(
            id,
            "tools/call",
            json!({"name": "math__add", "arguments": {"a": 1, "b": id}}),
        );
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    for id in 20..22 {
        let r = session.request(
            id,
            "tools/call",
            json!({"name": "math__add", "arguments": {"a": "x"}}),
        );
        assert_eq!(r["result"]["isError"], true, "{r}");
    }
    let r = session.request(
        30,
        "tools/call",
        json!({"name": "search_tools", "arguments": {"query": "add numbers"}}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");

    let prom_port = free_port();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: toolexec\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        ),
    )
    .unwrap();
    let mut prom = Background::spawn(std::process::Command::new(prometheus).args([
        &format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ),
        &format!("--storage.tsdb.path={}", dir.path().join("data").display()),
        &format!("--web.listen-address=127.0.0.1:{prom_port}"),
    ]));
    prom.wait_listening(prom_port);
    let query = |q: &str| -> Value {
        let url = format!("/api/v1/query?query={}", q.replace(' ', "%20"));
        let body = crate::support::get(prom_port, &url);
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
    };
    // Prometheus answers 503 until its storage is ready.
    let start = Instant::now();
    while crate::support::get_with(prom_port, "/-/ready", &[]).0 != 200 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not ready after 60s:\n{}",
            prom.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let value = |v: &Value| -> f64 { v[1].as_str().unwrap().parse().unwrap() };
    let start = Instant::now();
    let ok = loop {
        let r = query(r#"toolexec_tool_calls_total{tool="math:add",outcome="ok"}"#);
        if let Some(first) = r["data"]["result"].as_array().and_then(|a| a.first()) {
            break first.clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no series after 60s: {r}\n{}",
            prom.output()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(value(&ok["value"]), 5.0, "{ok}");
    assert_eq!(ok["metric"]["namespace"], "math");
    assert_eq!(ok["metric"]["backend"], "local");
    let failed = query(r#"toolexec_tool_calls_total{tool="math:add",outcome="validation_input"}"#);
    assert_eq!(
        value(&failed["data"]["result"][0]["value"]),
        2.0,
        "{failed}"
    );
    let latency = query(r#"toolexec_tool_call_duration_seconds_count{tool="math:add"}"#);
    assert_eq!(
        value(&latency["data"]["result"][0]["value"]),
        7.0,
        "{latency}"
    );
    let searches = query(r#"toolexec_search_duration_seconds_count{mode="lexical"}"#);
    assert_eq!(
        value(&searches["data"]["result"][0]["value"]),
        1.0,
        "{searches}"
    );
    let in_flight = query("toolexec_runs_in_flight");
    assert_eq!(
        value(&in_flight["data"]["result"][0]["value"]),
        0.0,
        "{in_flight}"
    );
    assert!(session.finish().success());
}

/// Over HTTP, `/metrics` is behind the gateway's token.
#[test]
fn metrics_over_http_need_the_token() {
    let dir = TempDir::new("metrics-http");
    dir.write_private("token", "s3cret-token-for-metrics");
    let port = free_port();
    let mut cmd = toolexec(
        dir.path(),
        &[
            "serve",
            "--http",
            &port.to_string(),
            "--token-file",
            "token",
        ],
    );
    let mut server = Background::spawn(&mut cmd);
    server.wait_listening(port);
    let (status, _) = crate::support::get_with(port, "/metrics", &[]);
    assert_eq!(status, 401);
    let (status, body) = crate::support::get_with(
        port,
        "/metrics",
        &["Authorization: Bearer s3cret-token-for-metrics"],
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("# TYPE toolexec_runs_in_flight gauge"),
        "{body}"
    );
}

/// `protocol = "grpc"` exports to an OTLP/gRPC receiver (grpcio with the
/// official service definition); `toolexec run` flushes its spans at exit.
#[test]
fn spans_export_over_grpc() {
    let test = "spans_export_over_grpc";
    let Some(python) = dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let dir = TempDir::new("otlp-grpc");
    let spans = dir.path().join("spans.jsonl");
    let mut receiver = Background::spawn(std::process::Command::new(&python).args([
        RECEIVER,
        spans.to_str().unwrap(),
        "grpc",
    ]));
    let port = receiver.wait_stdout_line("listening ");
    std::fs::write(
        dir.path().join("toolexec.toml"),
        format!("[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\nprotocol = \"grpc\"\n"),
    )
    .unwrap();
    let out = crate::support::run(&mut toolexec(
        dir.path(),
        &["run", "math:add", r#"{"a": 1, "b": 2}"#],
    ));
    assert_eq!(out.code(), Some(0), "{out:?}");
    let all = lines(&spans);
    let span = all
        .iter()
        .find(|s| s["name"] == "execute_tool math:add")
        .unwrap_or_else(|| panic!("{all:#?}\n{}", receiver.output()));
    assert_eq!(span["attributes"]["toolexec.backend"], "local");
    assert_eq!(span["service"], "toolexec");
}

/// A client's trace that it did not sample.
const UNSAMPLED_TRACE: &str = "11111111111111111111111111111111";

/// `serve` with `telemetry` (TOML under `[telemetry]`, the endpoint added)
/// answers three `tools/call`: one without `traceparent`, one in
/// [`UNSAMPLED_TRACE`] (flag 00), one in [`CLIENT_TRACE`] (flag 01). The
/// spans the collector got, each with its `x-api-key` header; `None` when
/// Python is missing (the test is skipped).
fn three_traces(test: &str, telemetry: &str) -> Option<Vec<Value>> {
    let python = dep(test, "TOOLEXEC_PYTHON")?;
    let dir = TempDir::new("otlp-sampling");
    let spans = dir.path().join("spans.jsonl");
    let mut receiver = Background::spawn(
        std::process::Command::new(&python)
            .args([RECEIVER, spans.to_str().unwrap()])
            .env("HEADER", "x-api-key"),
    );
    let port = receiver.wait_stdout_line("listening ");
    std::fs::write(
        dir.path().join("toolexec.toml"),
        format!("[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\n{telemetry}"),
    )
    .unwrap();
    let mut session = StdioSession::start(
        toolexec(dir.path(), &["serve", "--expose", "both"]).env("OTLP_KEY", "k3y-from-env"),
    );
    for (id, traceparent) in [
        (1, None),
        (2, Some(format!("00-{UNSAMPLED_TRACE}-{CLIENT_SPAN}-00"))),
        (3, Some(format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))),
    ] {
        let mut params = json!({"name": "math__add", "arguments": {"a": 1, "b": 2}});
        if let Some(t) = traceparent {
            params["_meta"] = json!({ "traceparent": t });
        }
        let r = session.request(id, "tools/call", params);
        assert_eq!(r["result"]["isError"], false, "{r}\n{}", session.stderr());
    }
    assert!(session.finish().success(), "{}", session.stderr());
    let all = lines(&spans);
    assert!(!all.is_empty(), "nothing exported: {}", receiver.output());
    Some(all)
}

/// The trace ids of `spans` that have a call span, each once.
fn traces_with_calls(spans: &[Value]) -> Vec<&str> {
    let mut ids: Vec<&str> = spans
        .iter()
        .filter(|s| s["name"] == "execute_tool math:add")
        .map(|s| s["trace_id"].as_str().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// `[telemetry] headers` reach the collector on every export (the key from
/// a secret source), and `sampling_ratio` decides for new traces only: at
/// 0, a request without `traceparent` and one whose client did not sample
/// export nothing, while a client's sampled trace is exported whole (its
/// request span and the call's own span).
#[test]
fn otlp_headers_and_sampling_ratio_apply() {
    let config = "sampling_ratio = 0.0\nheaders = { \"x-api-key\" = { env = \"OTLP_KEY\" } }\n";
    let Some(all) = three_traces("otlp_headers_and_sampling_ratio_apply", config) else {
        return;
    };
    assert_eq!(traces_with_calls(&all), [CLIENT_TRACE], "{all:#?}");
    for span in &all {
        assert_eq!(
            span["trace_id"], CLIENT_TRACE,
            "only the sampled trace: {all:#?}"
        );
        assert_eq!(span["header"], "k3y-from-env", "{span}");
    }
}

/// `trust_remote_sampling = false`: a client's sampled flag decides
/// nothing. At ratio 1 every trace is exported, the one its client did not
/// sample too, each keeping its trace id.
#[test]
fn remote_sampling_flags_can_be_ignored() {
    let config = "sampling_ratio = 1.0\ntrust_remote_sampling = false\n";
    let Some(all) = three_traces("remote_sampling_flags_can_be_ignored", config) else {
        return;
    };
    let traces = traces_with_calls(&all);
    assert_eq!(traces.len(), 3, "{all:#?}");
    assert!(
        traces.contains(&UNSAMPLED_TRACE) && traces.contains(&CLIENT_TRACE),
        "{traces:?}"
    );
}

/// Sandboxed runs are counted by runtime, profile and what ended them, on
/// `serve --metrics`: a command that exits 0 (`ok`), and one its wall-time
/// limit stops (bubblewrap, profile standard).
#[test]
fn sandbox_runs_are_measured() {
    if !crate::runtimes::bubblewrap("sandbox_runs_are_measured") {
        return;
    }
    let dir = TempDir::new("sandbox-metrics");
    std::fs::write(
        dir.path().join("toolexec.toml"),
        r#"
[[commands]]
id = "box:hi"
description = "Says hi"
input_schema = { type = "object" }
argv = ["echo", "hi"]
profile = "standard"

[[commands]]
id = "box:slow"
description = "Sleeps past its limit"
input_schema = { type = "object" }
argv = ["sleep", "30"]
profile = "standard"
[commands.limits]
wall_time = "300ms"
"#,
    )
    .unwrap();
    let port = free_port();
    let mut session = serve_with_metrics(dir.path(), port);
    let hi = session.request(1, "tools/call", json!({"name": "box__hi", "arguments": {}}));
    assert_eq!(hi["result"]["isError"], false, "{hi}\n{}", session.stderr());
    let slow = session.request(
        2,
        "tools/call",
        json!({"name": "box__slow", "arguments": {}}),
    );
    assert_eq!(slow["result"]["isError"], true, "{slow}");
    let (status, body) = crate::support::get_with(port, "/metrics", &[]);
    assert_eq!(status, 200, "{body}");
    let series = |ended_by: &str| {
        format!(
            "toolexec_sandbox_runs_total{{runtime=\"bubblewrap\",profile=\"standard\",ended_by=\"{ended_by}\"}} 1"
        )
    };
    assert!(body.contains(&series("ok")), "{body}");
    assert!(body.contains(&series("wall_time")), "{body}");
    assert!(
        body.contains("toolexec_sandbox_run_duration_seconds_count{runtime=\"bubblewrap\",profile=\"standard\",ended_by=\"wall_time\"} 1"),
        "{body}"
    );
    assert!(session.finish().success(), "{}", session.stderr());
}

/// The process ids whose parent is `parent` and whose command line
/// contains `needle` (from /proc).
fn children(parent: u32, needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid ...`: comm may hold spaces, so after ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(parent) && String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// Upstream health on `serve --metrics`: `toolexec_upstream_up` is 1 for
/// a connected server, and after its process is killed the server is
/// restarted, `toolexec_upstream_restarts` counts it, and it is up again.
#[test]
fn upstream_health_is_measured() {
    let test = "upstream_health_is_measured";
    let Some(python) = dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let dir = TempDir::new("upstream-metrics");
    std::fs::write(
        dir.path().join("toolexec.toml"),
        format!(
            "[[servers]]\nname = \"demo\"\ncommand = {}\nargs = [{}]\n",
            toml_str(&python),
            toml_str(crate::support::PY_DEMO_UPSTREAM),
        ),
    )
    .unwrap();
    let port = free_port();
    let mut session = serve_with_metrics(dir.path(), port);
    let metrics_until = |what: &str, want: &[&str]| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = crate::support::get_with(port, "/metrics", &[]);
            if status == 200 && want.iter().all(|w| body.contains(w)) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {want:?} not in\n{body}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let up = r#"toolexec_upstream_up{server="demo"} 1"#;
    metrics_until(
        "connected",
        &[up, r#"toolexec_upstream_restarts{server="demo"} 0"#],
    );
    let upstream = children(session.pid(), "py_demo_upstream.py");
    assert_eq!(upstream.len(), 1, "{upstream:?}");
    let killed = std::process::Command::new("kill")
        .args(["-9", &upstream[0].to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    metrics_until(
        "restarted",
        &[up, r#"toolexec_upstream_restarts{server="demo"} 1"#],
    );
    assert!(session.finish().success(), "{}", session.stderr());
}

/// OTLP over TLS, both protocols: a collector whose certificate a CA made
/// in the test signed receives the spans when `ca_file` names that CA, and
/// none without it (the system's roots do not trust it).
#[test]
fn spans_export_over_tls() {
    let test = "spans_export_over_tls";
    let Some(python) = dep(test, "TOOLEXEC_PYTHON") else {
        return;
    };
    let ca = toolexec_testkit::tls::TestCa::new("otlp test CA");
    let server = ca.issue(&["127.0.0.1"], toolexec_testkit::tls::Usage::Server);
    for protocol in ["http_protobuf", "grpc"] {
        for trusted in [true, false] {
            let dir = TempDir::new("otlp-tls");
            dir.write("ca.pem", &ca.cert_pem);
            dir.write("cert.pem", &server.cert_pem);
            dir.write("key.pem", &server.key_pem);
            let spans = dir.path().join("spans.jsonl");
            let mut args = vec![RECEIVER, spans.to_str().unwrap()];
            if protocol == "grpc" {
                args.push("grpc");
            }
            let mut receiver = Background::spawn(
                std::process::Command::new(&python)
                    .args(&args)
                    .env("TLS_CERT", dir.path().join("cert.pem"))
                    .env("TLS_KEY", dir.path().join("key.pem")),
            );
            let port = receiver.wait_stdout_line("listening ");
            let ca_file = if trusted {
                "ca_file = \"ca.pem\"\n"
            } else {
                ""
            };
            dir.write(
                "toolexec.toml",
                &format!(
                    "[telemetry]\notlp_endpoint = \"https://127.0.0.1:{port}\"\n\
                     protocol = \"{protocol}\"\nexport_timeout_ms = 3000\n{ca_file}"
                ),
            );
            let out = crate::support::run(&mut toolexec(
                dir.path(),
                &["run", "math:add", r#"{"a": 1, "b": 2}"#],
            ));
            assert_eq!(out.code(), Some(0), "{out:?}");
            let exported = lines(&spans)
                .iter()
                .any(|s| s["name"] == "execute_tool math:add");
            assert_eq!(
                exported,
                trusted,
                "{protocol}, CA trusted: {trusted}\n{out:?}\n{}",
                receiver.output()
            );
        }
    }
}

/// A collector that is down (nothing listens) costs a call nothing: `run`
/// answers and exits 0; the lost spans are reported on stderr, as JSON
/// lines with `--log-format json`.
#[test]
fn a_collector_that_is_down_costs_nothing() {
    let dir = TempDir::new("otlp-down");
    let port = free_port();
    std::fs::write(
        dir.path().join("toolexec.toml"),
        format!("[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    let out = crate::support::run(&mut toolexec(
        dir.path(),
        &[
            "--json",
            "--log-format",
            "json",
            "run",
            "math:add",
            r#"{"a": 1, "b": 2}"#,
        ],
    ));
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert_eq!(out.json()["value"]["result"], 3.0, "{out:?}");
    // The loss is reported, as a JSON log line (`--log-format json`).
    let warning: Value = out
        .stderr
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .find(|v| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("spans dropped"))
        })
        .unwrap_or_else(|| panic!("no JSON warning: {out:?}"));
    assert_eq!(warning["level"], "WARN", "{warning}");
}
