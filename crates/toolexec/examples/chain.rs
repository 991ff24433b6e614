//! Run a chain: each step may take the previous step's result.
//! `cargo run -p toolexec --example chain`
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolexec::{Exec, ToolError, parse_chain};

#[derive(Deserialize, JsonSchema)]
struct Mul {
    /// The factor.
    by: f64,
    /// The previous step's result, injected by `use_previous`.
    #[serde(default)]
    previous: f64,
}

/// Runs the example; returns what it printed.
pub(crate) async fn run() -> Result<Vec<String>, toolexec::Error> {
    let exec = Exec::builder().build();
    exec.catalog().tool(
        "math:mul",
        "Multiplies previous by `by`",
        |m: Mul| async move { Ok::<_, ToolError>(m.previous * m.by) },
    )?;
    exec.catalog().tool(
        "math:const",
        "Returns `value`",
        |v: serde_json::Value| async move { Ok::<_, ToolError>(v["value"].clone()) },
    )?;
    // The same JSON shape the CLI (`toolexec chain FILE`) and the gateway take.
    let steps = parse_chain(&json!([
        {"tool_id": "math:const", "args": {"value": 3}},
        {"tool_id": "math:mul", "args": {"by": 7}, "use_previous": true},
        {"tool_id": "math:mul", "args": {"by": 2}, "use_previous": true}
    ]))?;
    let result = exec.run_chain(&steps).await?;
    let mut lines = Vec::new();
    for (i, step) in result.steps.iter().enumerate() {
        let value = step
            .output
            .as_ref()
            .map(|o| o.value.to_string())
            .unwrap_or_default();
        lines.push(format!(
            "step {i} {} → {value} ({:.3} ms)",
            step.tool_id, step.duration_ms
        ));
    }
    lines.push(format!(
        "ok={} output={}",
        result.ok,
        result.output.unwrap_or_default()
    ));
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
