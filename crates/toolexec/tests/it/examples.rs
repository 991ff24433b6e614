//! Runs every example under `examples/` and checks what it printed.

#[path = "../../examples/basic.rs"]
mod basic;
#[path = "../../examples/chain.rs"]
mod chain;
#[path = "../../examples/discovery.rs"]
mod discovery;
#[path = "../../examples/streaming.rs"]
mod streaming;

#[tokio::test]
async fn basic_example() {
    let lines = basic::run().await.unwrap();
    assert_eq!(lines[0], "math:add → {\"sum\":42.0}");
    assert!(
        lines[1].starts_with("validation_input → validation_input: tool math:add"),
        "{}",
        lines[1]
    );
}

#[tokio::test]
async fn chain_example() {
    let lines = chain::run().await.unwrap();
    assert!(lines[1].starts_with("step 1 math:mul → 21.0"), "{lines:?}");
    assert_eq!(lines.last().unwrap(), "ok=true output=42.0");
}

#[tokio::test]
async fn discovery_example() {
    let lines = discovery::run().await.unwrap();
    assert!(
        lines.contains(&"namespace weather (2 tools)".to_owned()),
        "{lines:?}"
    );
    let first_hit = lines.iter().find(|l| l.starts_with("search → ")).unwrap();
    assert!(first_hit.starts_with("search → weather:"), "{lines:?}");
    assert!(
        lines.contains(&"describe(full) → 1 examples".to_owned()),
        "{lines:?}"
    );
}

#[tokio::test]
async fn streaming_example() {
    let lines = streaming::run().await.unwrap();
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("\"type\":\"chunk\""))
            .count(),
        3
    );
    assert!(
        lines.last().unwrap().contains("\"type\":\"done\""),
        "{lines:?}"
    );
    assert!(lines.last().unwrap().contains("3072"), "{lines:?}");
}
