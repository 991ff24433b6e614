//! Resident memory of a catalog of 10,000 tools, each with its own schema.
//! `cargo run --release -p toolexec --example catalog_memory` (figures in BENCHMARKS.md).
use std::sync::Arc;

use serde_json::json;
use toolexec::{Backend, BoxFuture, Call, Catalog, Tool, ToolOutput};

struct Noop;

impl Backend for Noop {
    fn kind(&self) -> &str {
        "noop"
    }
    fn call<'a>(&'a self, _: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, toolexec::Error>> {
        Box::pin(async { Ok(ToolOutput::default()) })
    }
}

/// Resident set size in bytes (Linux), 0 elsewhere.
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn main() -> Result<(), toolexec::Error> {
    let n = 10_000;
    let backend: Arc<dyn Backend> = Arc::new(Noop);
    let tools = (0..n)
        .map(|i| {
            let schema = json!({
                "type": "object",
                "properties": {
                    format!("p{i}"): {"type": "string", "description": "some parameter description here"},
                    "q": {"type": "integer", "minimum": 0}
                },
                "required": [format!("p{i}")]
            });
            let tool = Tool::builder(&format!("ns{}:tool_{i}", i % 50))
                .description("Does a thing with its parameters and returns results for the user")
                .input_schema(schema)
                .build()?;
            Ok((tool, backend.clone()))
        })
        .collect::<Result<Vec<_>, toolexec::Error>>()?;
    let before = rss();
    let catalog = Catalog::new();
    catalog.register_many(tools, false)?;
    let after = rss();
    println!(
        "{} tools: {:.1} MiB resident growth, {:.1} KB per tool",
        catalog.len(),
        (after - before) as f64 / (1 << 20) as f64,
        (after - before) as f64 / n as f64 / 1024.0
    );
    Ok(())
}
