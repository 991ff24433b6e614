//! Register a typed async function as a tool and run it through the
//! validated pipeline. `cargo run -p toolexec --example basic`
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolexec::{Exec, ToolError};

/// Arguments of `math:add`.
#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    /// First addend.
    a: f64,
    /// Second addend.
    b: f64,
}

/// Result of `math:add`.
#[derive(Serialize, JsonSchema)]
struct Sum {
    sum: f64,
}

/// Runs the example; returns what it printed, for the test that exercises it.
pub(crate) async fn run() -> Result<Vec<String>, toolexec::Error> {
    let exec = Exec::builder().build();
    exec.catalog()
        .tool("math:add", "Adds two numbers", |a: AddArgs| async move {
            Ok::<_, ToolError>(Sum { sum: a.a + a.b })
        })?;
    let mut lines = Vec::new();
    let out = exec.run_tool("math:add", json!({"a": 2, "b": 40})).await?;
    lines.push(format!("math:add → {}", out.value));
    // Bad input never reaches the handler: a typed error lists each violation.
    let err = exec
        .run_tool("math:add", json!({"a": "two"}))
        .await
        .expect_err("invalid input is rejected");
    lines.push(format!("{} → {err}", err.code()));
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
