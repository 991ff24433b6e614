//! The HTTP provider's costs:
//!
//! - `call/direct_reqwest` and `call/http_tool`: one GET to the same local
//!   server (axum, in this process, loopback), sent with a bare pooled
//!   reqwest client and through the tool (`run_tool`: validation, request
//!   building, the concurrency slot, response reading, output validation).
//!   The difference is the tool's overhead (issue target: ≤ 50 µs).
//! - `import/github`: importing GitHub's REST API description (1,223
//!   operations, `$TOOLEXEC_OPENAPI_GITHUB` from
//!   `scripts/install-test-deps.sh`) and registering every tool (schema
//!   compilation included); before the timed runs, one import in this
//!   process reports the resident memory it added and the peak.
//!
//! `cargo bench -p toolexec-http --bench http`

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolexec::Exec;
use toolexec_http::openapi::{self, ImportOptions};

const SPEC: &str = r#"{
  "openapi": "3.1.0",
  "info": {"title": "bench", "version": "1"},
  "paths": {"/items/{item_id}": {"get": {
    "operationId": "get_item",
    "parameters": [{"name": "item_id", "in": "path", "required": true, "schema": {"type": "integer"}}],
    "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {
      "type": "object",
      "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
      "required": ["id", "name"]
    }}}}}
  }}}
}"#;

async fn item(axum::extract::Path(id): axum::extract::Path<u64>) -> axum::Json<serde_json::Value> {
    axum::Json(json!({"id": id, "name": "hammer"}))
}

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn calls(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route("/items/{item_id}", axum::routing::get(item));
    rt.spawn(async move { axum::serve(listener, app).await });

    let dir = std::env::temp_dir().join(format!("toolexec-http-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("spec.json");
    std::fs::write(&spec, SPEC).unwrap();
    let mut options = ImportOptions::new("bench", spec.display().to_string());
    options.base_url = Some(format!("http://127.0.0.1:{port}"));
    let exec = rt.block_on(async {
        let import = openapi::import(options).await.unwrap();
        let exec = Exec::new(Arc::new(toolexec::Catalog::new()));
        exec.catalog().register_many(import.tools(), false).unwrap();
        exec
    });
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(toolexec_http::tls::Tls::unused().config)
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/items/7");

    let mut group = c.benchmark_group("call");
    group.bench_function("direct_reqwest", |b| {
        b.to_async(rt).iter(|| async {
            let r = client.get(&url).send().await.unwrap();
            let v: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
            assert_eq!(v["id"], 7);
        })
    });
    group.bench_function("http_tool", |b| {
        b.to_async(rt).iter(|| async {
            let out = exec
                .run_tool("bench:get_item", json!({"item_id": 7}))
                .await
                .unwrap();
            assert_eq!(out.value["id"], 7);
        })
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

fn import(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    let Ok(spec) = std::env::var("TOOLEXEC_OPENAPI_GITHUB") else {
        eprintln!(
            "SKIPPED: import/github: TOOLEXEC_OPENAPI_GITHUB is not set (scripts/install-test-deps.sh)"
        );
        return;
    };
    let once = || {
        let mut options = ImportOptions::new("github", spec.clone());
        options.base_url = Some("http://127.0.0.1:9".into());
        rt.block_on(async {
            let import = openapi::import(options).await.unwrap();
            let catalog = toolexec::Catalog::new();
            catalog.register_many(import.tools(), false).unwrap();
            (import.tools.len(), catalog)
        })
    };
    let before = rss_kib("VmRSS:");
    let (n, catalog) = once();
    let after = rss_kib("VmRSS:");
    eprintln!(
        "import/github: {n} tools; resident memory +{} MiB with the catalog held, peak {} MiB",
        after.saturating_sub(before) / 1024,
        rss_kib("VmHWM:") / 1024
    );
    drop(catalog);
    let mut group = c.benchmark_group("import");
    group.sample_size(10);
    group.bench_function("github", |b| b.iter(once));
    group.finish();
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    calls(c, &rt);
    import(c, &rt);
}

criterion_group!(benches, bench);
criterion_main!(benches);
