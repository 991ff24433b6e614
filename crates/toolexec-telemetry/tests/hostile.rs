//! Telemetry under a hung collector and a full disk: calls are neither
//! blocked nor failed, the losses are counted, nothing crashes. One test in
//! its own binary, as the subscriber is process-wide.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolexec::{Exec, ToolError};
use toolexec_telemetry::{AuditOptions, MetricsOptions, OtlpOptions, Telemetry, TelemetryOptions};

/// A collector that accepts connections, reads the request and never answers.
fn hung_collector() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            let mut s = stream;
            let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.flush();
            held.push(s);
        }
    });
    port
}

#[test]
fn a_hung_collector_and_a_full_disk_cost_calls_nothing() {
    let port = hung_collector();
    let mut otlp = OtlpOptions::new(format!("http://127.0.0.1:{port}"));
    otlp.queue = 64;
    otlp.batch = 16;
    otlp.interval = Duration::from_millis(20);
    otlp.timeout = Duration::from_secs(2);
    // /dev/full fails every write with ENOSPC, as a full disk does.
    let audit = AuditOptions::new("/dev/full");
    let telemetry = Telemetry::install(TelemetryOptions {
        otlp: Some(otlp),
        metrics: Some(MetricsOptions::default()),
        audit: Some(audit),
        ..TelemetryOptions::default()
    })
    .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    assert!(telemetry.observer().is_some() && telemetry.call_tracer().is_some());
    let exec = telemetry.instrument(Exec::builder()).build();
    exec.catalog()
        .tool("demo:echo", "Echoes", |v: serde_json::Value| async move {
            Ok::<_, ToolError>(v)
        })
        .unwrap();
    let exec = Arc::new(exec);
    let slowest = runtime.block_on(async {
        let mut slowest = Duration::ZERO;
        for i in 0..2_000 {
            let t = Instant::now();
            let out = exec.run_tool("demo:echo", json!({"i": i})).await.unwrap();
            slowest = slowest.max(t.elapsed());
            assert_eq!(out.value["i"], i);
        }
        slowest
    });
    // A blocked call would wait for the export timeout (2 s); this bound
    // only says none did, it is not a latency measurement (see the bench).
    assert!(slowest < Duration::from_secs(1), "a call took {slowest:?}");
    let export = telemetry.export_stats().unwrap();
    let audit = telemetry.audit_stats().unwrap();
    // Let the writer thread reach the records.
    let start = Instant::now();
    while audit
        .write_errors
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no audit write error counted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let dropped = export.dropped.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        dropped > 0,
        "a hung collector and a 64-span queue must drop spans"
    );
    assert_eq!(
        export.exported.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    let rendered = telemetry.metrics().unwrap().render();
    assert!(
        rendered.contains("toolexec_telemetry_spans_dropped_total"),
        "{rendered}"
    );
    assert!(
        rendered.contains("toolexec_audit_write_errors_total"),
        "{rendered}"
    );
    assert!(rendered.contains(r#"toolexec_tool_calls_total{tool="demo:echo",namespace="demo",backend="local",outcome="ok"} 2000"#), "{rendered}");
    drop(runtime);
    let t = Instant::now();
    telemetry.shutdown(Duration::from_secs(1));
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "shutdown took {:?}",
        t.elapsed()
    );
}
