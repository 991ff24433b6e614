//! Progressive discovery: namespaces, ranked search, docs at three levels.
//! `cargo run -p toolexec --example discovery`
use serde_json::{Value, json};
use toolexec::{DetailLevel, Exec, LocalTool, ToolDocs, ToolError, ToolExample};

/// Runs the example; returns what it printed.
pub(crate) async fn run() -> Result<Vec<String>, toolexec::Error> {
    let exec = Exec::builder().build();
    let tools = [
        (
            "weather:forecast",
            "Get the weather forecast for a city for the next days",
        ),
        (
            "weather:current",
            "Get current weather conditions for a city",
        ),
        ("mail:send", "Send an email message to a recipient"),
        ("files:read", "Read a text file from the workspace"),
    ];
    for (id, description) in tools {
        LocalTool::new(id, |v: Value| async move { Ok::<_, ToolError>(v) })
            .description(description)
            .tags(["demo"])
            .docs(ToolDocs::new(description).example(ToolExample::new("call it", json!({}))))
            .register(exec.catalog())?;
    }
    let mut lines = Vec::new();
    for ns in exec.list_namespaces() {
        lines.push(format!("namespace {} ({} tools)", ns.name, ns.tools));
    }
    for m in exec.search_tools("what is the weather in Paris", 3) {
        lines.push(format!("search → {} {:.2} {}", m.id, m.score, m.summary));
    }
    let doc = exec.describe_tool("weather:forecast", DetailLevel::Summary)?;
    lines.push(format!("describe(summary) → {}", doc.summary));
    let doc = exec.describe_tool("weather:forecast", DetailLevel::Full)?;
    lines.push(format!("describe(full) → {} examples", doc.examples.len()));
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
