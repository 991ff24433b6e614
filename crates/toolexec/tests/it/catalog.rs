//! Catalog: registration rules, paging, namespaces, events, concurrency.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use toolexec::{
    Catalog, CatalogEvent, ErrorCode, ListRequest, LocalTool, Tool, ToolDocs, ToolError,
    ToolExample,
};

fn echo(catalog: &Catalog, id: &str) {
    LocalTool::new(id, |v: Value| async move { Ok::<_, ToolError>(v) })
        .description(format!("Echo tool {id}"))
        .register(catalog)
        .unwrap();
}

#[test]
fn duplicates_are_refused_and_replace_replaces() {
    let c = Catalog::new();
    echo(&c, "a:x");
    let (tool, backend) = LocalTool::new("a:x", |v: Value| async move { Ok::<_, ToolError>(v) })
        .description("second")
        .build()
        .unwrap();
    let err = c.register(tool.clone(), backend.clone()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyExists);
    assert_eq!(c.get("a:x").unwrap().tool().description, "Echo tool a:x");
    let previous = c.replace(tool, backend).unwrap();
    assert!(previous.is_some());
    assert_eq!(c.get("a:x").unwrap().tool().description, "second");
    assert_eq!(c.len(), 1);
    assert_eq!(c.search("second", 5, None).len(), 1);
    assert!(
        c.search("echo", 5, None).is_empty(),
        "old text left the index"
    );
}

#[test]
fn invalid_definitions_are_rejected_at_registration() {
    let c = Catalog::new();
    let bad_schema = Tool::builder("a:bad")
        .input_schema(json!({"type": "object", "properties": {"n": {"type": "nonsense"}}}))
        .build()
        .unwrap();
    let err = c.register(bad_schema, Arc::new(Noop)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidDefinition);
    assert!(err.to_string().contains("input_schema"), "{err}");

    let remote = Tool::builder("a:remote")
        .input_schema(
            json!({"type": "object", "properties": {"n": {"$ref": "http://127.0.0.1:9/s.json"}}}),
        )
        .build()
        .unwrap();
    let err = c.register(remote, Arc::new(Noop)).unwrap_err();
    assert!(err.to_string().contains("refused"), "{err}");

    let bad_example = Tool::builder("a:ex")
        .input_schema(json!({"type": "object", "properties": {"n": {"type": "integer"}}}))
        .docs(ToolDocs::new("x").example(ToolExample::new("wrong", json!({"n": "1"}))))
        .build()
        .unwrap();
    let err = c.register(bad_example, Arc::new(Noop)).unwrap_err();
    assert!(err.to_string().contains("docs.examples[0].args"), "{err}");

    let err = Tool::builder("a b:c").build().unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidToolId);
    assert!(c.is_empty(), "nothing half-registered");
    assert!(c.namespaces().is_empty());
}

struct Noop;
impl toolexec::Backend for Noop {
    fn kind(&self) -> &str {
        "noop"
    }
    fn call<'a>(
        &'a self,
        _call: toolexec::Call<'a>,
    ) -> toolexec::BoxFuture<'a, Result<toolexec::ToolOutput, toolexec::Error>> {
        Box::pin(async { Ok(toolexec::ToolOutput::default()) })
    }
}

#[test]
fn register_many_is_all_or_nothing() {
    let c = Catalog::new();
    echo(&c, "b:exists");
    let batch: Vec<_> = ["b:one", "b:two", "b:exists"]
        .iter()
        .map(|id| {
            (
                Tool::builder(id).build().unwrap(),
                Arc::new(Noop) as Arc<dyn toolexec::Backend>,
            )
        })
        .collect();
    let err = c.register_many(batch, false).unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyExists);
    assert_eq!(c.len(), 1);
    let batch: Vec<_> = (0..300)
        .map(|i| {
            let tool = Tool::builder(&format!("bulk:t{i:03}"))
                .input_schema(
                    json!({"type": "object", "properties": {format!("p{i}"): {"type": "string"}}}),
                )
                .build()
                .unwrap();
            (tool, Arc::new(Noop) as Arc<dyn toolexec::Backend>)
        })
        .collect();
    assert_eq!(c.register_many(batch, false).unwrap(), 300);
    assert_eq!(c.len(), 301);
    assert_eq!(
        c.search("p250", 1, None)[0].tool.tool().id.to_string(),
        "bulk:t250"
    );
}

#[test]
fn paging_is_stable_and_complete() {
    let c = Catalog::new();
    for ns in ["alpha", "beta"] {
        for i in 0..25 {
            echo(&c, &format!("{ns}:t{i:02}"));
        }
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = c
            .list(&ListRequest {
                namespace: None,
                cursor: cursor.clone(),
                limit: Some(7),
            })
            .unwrap();
        seen.extend(page.tools.iter().map(|t| t.tool().id.to_string()));
        // Registering ahead of the cursor never shifts later pages.
        if seen.len() == 7 {
            echo(&c, "alpha:a_first");
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), 50);
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted);

    let beta = c
        .list(&ListRequest {
            namespace: Some("beta".into()),
            cursor: None,
            limit: Some(1000),
        })
        .unwrap();
    assert_eq!(beta.tools.len(), 25);
    assert!(beta.next_cursor.is_none());
    assert!(beta.tools.iter().all(|t| t.tool().namespace() == "beta"));

    let err = c
        .list(&ListRequest {
            namespace: None,
            cursor: Some("::garbage".into()),
            limit: None,
        })
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidRequest);
    let err = c
        .list(&ListRequest {
            limit: Some(0),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidRequest);
}

#[test]
fn namespaces_are_counted_and_cleaned_up() {
    let c = Catalog::new();
    echo(&c, "x:a");
    echo(&c, "x:b:1");
    echo(&c, "x:b:2");
    echo(&c, "y:a");
    let ns: Vec<(String, usize)> = c
        .namespaces()
        .into_iter()
        .map(|n| (n.name, n.tools))
        .collect();
    assert_eq!(ns, [("x".to_owned(), 3), ("y".to_owned(), 1)]);
    c.unregister("y:a").unwrap();
    assert_eq!(c.namespaces().len(), 1);
    assert_eq!(
        c.unregister("y:a").unwrap_err().code(),
        ErrorCode::ToolNotFound
    );
    assert!(c.search("y", 10, Some("y")).is_empty());
}

#[tokio::test]
async fn subscribers_see_every_change() {
    let c = Catalog::new();
    let mut rx = c.subscribe();
    echo(&c, "e:one");
    let (tool, backend) = LocalTool::new("e:one", |v: Value| async move { Ok::<_, ToolError>(v) })
        .build()
        .unwrap();
    c.replace(tool, backend).unwrap();
    c.unregister("e:one").unwrap();
    assert_eq!(
        rx.recv().await.unwrap(),
        CatalogEvent::Registered { id: "e:one".into() }
    );
    assert_eq!(
        rx.recv().await.unwrap(),
        CatalogEvent::Replaced { id: "e:one".into() }
    );
    assert_eq!(
        rx.recv().await.unwrap(),
        CatalogEvent::Unregistered { id: "e:one".into() }
    );
}

#[test]
fn reads_stay_consistent_while_another_thread_registers() {
    let c = Arc::new(Catalog::new());
    echo(&c, "stable:tool");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let c = c.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) && i < 2000 {
                echo(&c, &format!("churn:t{i}"));
                if i % 2 == 0 {
                    c.unregister(&format!("churn:t{i}")).unwrap();
                }
                i += 1;
            }
            i
        })
    };
    let mut reads = 0;
    while !writer.is_finished() {
        assert!(c.get("stable:tool").is_ok());
        for hit in c.search("echo tool", 5, None) {
            // Every hit resolves to a registered tool.
            assert!(
                c.get(&hit.tool.tool().id.to_string()).is_ok()
                    || hit.tool.tool().namespace() == "churn"
            );
        }
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert!(reads > 0);
    assert_eq!(c.len(), 1 + written / 2);
    let listed = c
        .list(&ListRequest {
            namespace: Some("churn".into()),
            limit: Some(1000),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(listed.tools.len(), written / 2);
}
