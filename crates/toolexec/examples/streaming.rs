//! Stream a long-running tool: progress, chunks, then done.
//! `cargo run -p toolexec --example streaming`
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolexec::{Exec, RunOptions, StreamEvent, StreamRequest, ToolContext, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Download {
    /// How many parts to fetch.
    parts: u32,
}

/// Runs the example; returns what it printed.
pub(crate) async fn run() -> Result<Vec<String>, toolexec::Error> {
    let exec = Exec::builder().build();
    exec.catalog().tool(
        "demo:download",
        "Downloads a file in parts, streaming each part",
        |d: Download, ctx: ToolContext| async move {
            for part in 1..=d.parts {
                if ctx.is_cancelled() {
                    return Err(ToolError::new("cancelled"));
                }
                ctx.progress(
                    f64::from(part),
                    Some(f64::from(d.parts)),
                    Some("downloading"),
                );
                ctx.chunk(json!({"part": part, "bytes": 1024})).await;
            }
            Ok::<_, ToolError>(json!({"parts": d.parts, "bytes": 1024 * d.parts}))
        },
    )?;
    let mut stream = exec.run_stream(
        StreamRequest::Tool {
            id: "demo:download".into(),
            args: json!({"parts": 3}),
        },
        RunOptions::default(),
    );
    let mut lines = Vec::new();
    while let Some(event) = stream.next().await {
        let done = matches!(event, StreamEvent::Done { .. } | StreamEvent::Error { .. });
        lines.push(serde_json::to_string(&event).unwrap_or_default());
        if done {
            break;
        }
    }
    Ok(lines)
}

#[allow(dead_code)]
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), toolexec::Error> {
    for line in run().await? {
        println!("{line}");
    }
    Ok(())
}
