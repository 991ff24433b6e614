//! The channel protocol over a real socketpair: the host's
//! `ChannelServer` against the sandbox's `ChannelClient` and raw frames.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use toolexec::{CancellationToken, Exec};
use toolexec_runtime::protocol::{ChannelClient, ChannelConfig, ChannelServer, ProtocolError};
use toolexec_runtime::{RuntimeLimits, ToolCallLog, ToolHost, ValueSummary};

fn host(limits: &RuntimeLimits) -> ToolHost {
    ToolHost::new(
        Exec::new(toolexec_testkit::catalog()),
        limits,
        CancellationToken::new(),
    )
}

/// A server on one end of a socketpair (its result on the join handle)
/// and the other end.
fn serve(
    host: ToolHost,
) -> (
    ChannelServer,
    tokio::task::JoinHandle<Result<(), ProtocolError>>,
    UnixStream,
) {
    let (a, b) = UnixStream::pair().unwrap();
    let server = ChannelServer::new(host, ChannelConfig::default());
    let s = server.clone();
    let task = tokio::spawn(async move { s.serve(a).await });
    (server, task, b)
}

async fn frame(stream: &mut UnixStream, bytes: &[u8]) {
    stream
        .write_all(&(bytes.len() as u32).to_be_bytes())
        .await
        .unwrap();
    stream.write_all(bytes).await.unwrap();
}

async fn read_frame(stream: &mut UnixStream) -> Value {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await.unwrap();
    let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut buf).await.unwrap();
    serde_json::from_slice(&buf).unwrap()
}

async fn ends_with(task: tokio::task::JoinHandle<Result<(), ProtocolError>>) -> ProtocolError {
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the server ends")
        .unwrap()
        .expect_err("a protocol error")
}

#[tokio::test]
async fn hello_call_search_describe() {
    let limits = RuntimeLimits::default();
    let (_server, _task, end) = serve(host(&limits));
    let client = ChannelClient::new(end);
    let hello = client.hello().await.unwrap();
    assert_eq!(hello["protocol"], "toolexec-channel");
    assert_eq!(hello["version"], 1);
    let sum = client
        .call("math:add", json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert_eq!(sum, json!({"result": 5.0}));
    let hits = client.search("add two numbers", 3).await.unwrap();
    assert_eq!(hits[0]["id"], "math:add", "{hits}");
    let doc = client.describe("math:add", "schema").await.unwrap();
    assert_eq!(doc["id"], "math:add");
    let bad = client.describe("math:add", "everything").await.unwrap_err();
    assert!(bad.to_string().contains("detail"), "{bad}");
    let bad_args = client
        .call("math:add", json!({"a": "x"}))
        .await
        .unwrap_err();
    assert!(
        bad_args.to_string().starts_with("validation_input"),
        "{bad_args}"
    );
}

#[tokio::test]
async fn version_mismatch_ends_the_session() {
    let (_server, task, mut end) = serve(host(&RuntimeLimits::default()));
    frame(
        &mut end,
        br#"{"id": 1, "method": "hello", "protocol": "toolexec-channel", "version": 99}"#,
    )
    .await;
    assert!(matches!(
        ends_with(task).await,
        ProtocolError::UnsupportedVersion { version: 99, .. }
    ));
}

#[tokio::test]
async fn allowlist_and_budget() {
    let limits = RuntimeLimits {
        allowed_tools: vec!["math:*".into()],
        max_tool_calls: 2,
        ..RuntimeLimits::default()
    };
    let host = host(&limits);
    let (_server, _task, end) = serve(host.clone());
    let client = ChannelClient::new(end);
    let denied = client
        .call("text:case", json!({"text": "a", "to": "upper"}))
        .await;
    assert!(denied.unwrap_err().to_string().starts_with("not_allowed"));
    // Search only shows allowed tools; describe refuses the others.
    let hits = client.search("convert text case", 10).await.unwrap();
    assert!(
        hits.as_array()
            .unwrap()
            .iter()
            .all(|h| h["id"].as_str().unwrap().starts_with("math:"))
    );
    assert!(client.describe("text:case", "summary").await.is_err());

    let exceeded = host.clone();
    let watcher = tokio::spawn(async move { exceeded.budget_exceeded().await });
    // The refused call spent one of the two: one more fits.
    client
        .call("math:add", json!({"a": 1, "b": 1}))
        .await
        .unwrap();
    assert!(host.budget_exhausted());
    let over = client
        .call("math:add", json!({"a": 1, "b": 1}))
        .await
        .unwrap_err();
    assert!(over.to_string().starts_with("limit_exceeded"), "{over}");
    // The runtime's stop signal fires.
    tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .unwrap()
        .unwrap();
    let log = host.tool_calls();
    assert_eq!(log.len(), 3);
    assert_eq!(log.iter().filter(|c| c.ok).count(), 1);
    assert_eq!(log[0].error.as_ref().unwrap().code.as_str(), "not_allowed");
}

#[tokio::test]
async fn refused_calls_spend_the_budget_and_floods_keep_no_args() {
    let limits = RuntimeLimits {
        allowed_tools: vec!["math:*".into()],
        max_tool_calls: 3,
        ..RuntimeLimits::default()
    };
    let host = host(&limits);
    let (_server, _task, end) = serve(host.clone());
    let client = ChannelClient::new(end);
    let exceeded = host.clone();
    let watcher = tokio::spawn(async move { exceeded.budget_exceeded().await });
    let big = "x".repeat(64 * 1024);
    let mut codes = Vec::new();
    for _ in 0..10 {
        let err = client
            .call("text:case", json!({"text": big, "to": "upper"}))
            .await
            .unwrap_err();
        codes.push(err.to_string().split(':').next().unwrap().to_owned());
    }
    assert_eq!(&codes[..3], ["not_allowed"; 3]);
    assert!(
        codes[3..].iter().all(|c| c == "limit_exceeded"),
        "{codes:?}"
    );
    // A unit refused on every call is stopped like one over its budget.
    tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .unwrap()
        .unwrap();
    let log = host.tool_calls();
    assert_eq!(log.len(), 10);
    // Never the arguments: their size, digest and preview within the
    // budget and the call that spent it; past it, truncated records.
    let args = ValueSummary::of(&json!({"text": big, "to": "upper"}));
    assert!(log[..4].iter().all(|c| c.args == args && !c.truncated));
    assert!(args.preview.as_ref().unwrap().len() <= ValueSummary::PREVIEW_BYTES);
    assert!(
        log[4..]
            .iter()
            .all(|c| c.truncated && c.args.preview.is_none())
    );
    assert!(log.iter().all(|c| c.args.sha256 == args.sha256));
    let kept: usize = log.iter().map(|c| c.retained_bytes()).sum();
    assert_eq!(kept, host.tool_log_bytes());
    assert!(kept < 10 * 1024, "{kept} bytes for 10 calls");
}

/// 20 calls with a 4 MiB argument each: the host's log keeps bounded
/// records (size, digest, preview), a few kilobytes in all, not 80 MiB of
/// arguments; the log's byte budget truncates records past it.
#[tokio::test]
async fn the_host_log_is_bounded_in_bytes() {
    let limits = RuntimeLimits {
        max_tool_calls: 100,
        ..RuntimeLimits::default()
    };
    // Tools accept arguments of up to 8 MiB here (1 MiB by default).
    let exec = Exec::builder()
        .catalog(toolexec_testkit::catalog())
        .limits(toolexec::Limits {
            max_input_bytes: 8 << 20,
            ..toolexec::Limits::default()
        })
        .build();
    let host = ToolHost::new(exec, &limits, CancellationToken::new());
    let big = "a".repeat(4 << 20);
    for _ in 0..20 {
        let out = host
            .call("text:word_count", json!({"text": big}))
            .await
            .unwrap();
        assert_eq!(out["characters"], 4 << 20);
    }
    let log = host.tool_calls();
    assert_eq!(log.len(), 20);
    let records: Vec<Value> = log
        .iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    assert!(
        records
            .iter()
            .all(|r| r["ok"] == true && r["args"]["bytes"] == (4 << 20) + 11)
    );
    let retained: usize = records.iter().map(|r| r.to_string().len()).sum();
    assert!(retained < 16 << 10, "{retained} bytes of log");
    assert_eq!(retained, host.tool_log_bytes());

    // Many more small calls than the budget holds: past it, records lose
    // their previews, and the log grows by a small record per call only.
    let many = RuntimeLimits {
        max_tool_calls: 1000,
        ..RuntimeLimits::default()
    };
    let host = self::host(&many);
    let text = "word ".repeat(40);
    for _ in 0..1000 {
        host.call("text:word_count", json!({"text": text}))
            .await
            .unwrap();
    }
    let log = host.tool_calls();
    let full = log.iter().take_while(|c| !c.truncated).count();
    assert!(full > 50 && full < 1000, "{full} full records");
    assert!(
        log[full..]
            .iter()
            .all(|c| c.truncated && c.args.preview.is_none())
    );
    let per_truncated = log[full].retained_bytes();
    assert!(per_truncated < 400, "{per_truncated}");
    assert!(host.tool_log_bytes() <= ToolCallLog::BUDGET_BYTES + 1000 * per_truncated);
}

#[tokio::test]
async fn search_and_describe_have_a_budget() {
    let limits = RuntimeLimits {
        max_tool_calls: 1,
        ..RuntimeLimits::default()
    };
    let host = host(&limits);
    assert_eq!(host.max_lookups(), 10);
    let (_server, _task, end) = serve(host.clone());
    let client = ChannelClient::new(end);
    let exceeded = host.clone();
    let watcher = tokio::spawn(async move { exceeded.budget_exceeded().await });
    for i in 0..10 {
        if i % 2 == 0 {
            client.search("add numbers", 5).await.unwrap();
        } else {
            // Refused lookups count too.
            assert!(client.describe("nope:nothing", "summary").await.is_err());
        }
    }
    let over = client.search("add numbers", 5).await.unwrap_err();
    assert!(over.to_string().starts_with("limit_exceeded"), "{over}");
    let over = client.describe("math:add", "summary").await.unwrap_err();
    assert!(over.to_string().starts_with("limit_exceeded"), "{over}");
    tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .unwrap()
        .unwrap();
    // The direct API answers nothing past the budget.
    assert_eq!(host.search("add", 5).await, json!([]));
}

#[tokio::test]
async fn concurrent_calls_get_their_own_answers() {
    let (_server, _task, end) = serve(host(&RuntimeLimits::default()));
    let client = std::sync::Arc::new(ChannelClient::new(end));
    let calls = (0..20).map(|i| {
        let client = client.clone();
        async move { client.call("math:add", json!({"a": i, "b": 1000})).await }
    });
    let results = futures::future::join_all(calls).await;
    for (i, r) in results.into_iter().enumerate() {
        assert_eq!(r.unwrap(), json!({"result": (i + 1000) as f64}));
    }
}

#[tokio::test]
async fn oversized_frame_ends_the_session() {
    let (_server, task, mut end) = serve(host(&RuntimeLimits::default()));
    end.write_all(&(64u32 << 20).to_be_bytes()).await.unwrap();
    end.write_all(&[b'x'; 1024]).await.unwrap();
    assert!(matches!(
        ends_with(task).await,
        ProtocolError::FrameTooLarge { .. }
    ));
}

#[tokio::test]
async fn malformed_json_and_forged_messages_end_the_session() {
    for bad in [
        &b"{not json"[..],
        br#"{"id": 1, "result": 5}"#,
        br#"{"method": "call", "tool": "math:add", "args": {}}"#,
        br#"{"id": -1, "method": "call", "tool": "math:add"}"#,
        br#"{"id": 1, "method": "shell", "cmd": "rm -rf /"}"#,
        b"",
    ] {
        let (_server, task, mut end) = serve(host(&RuntimeLimits::default()));
        frame(&mut end, bad).await;
        assert!(
            matches!(ends_with(task).await, ProtocolError::Malformed { .. }),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    // A frame cut short by the sandbox closing.
    let (_server, task, mut end) = serve(host(&RuntimeLimits::default()));
    end.write_all(&100u32.to_be_bytes()).await.unwrap();
    end.write_all(b"{\"id\"").await.unwrap();
    drop(end);
    assert!(matches!(
        ends_with(task).await,
        ProtocolError::Malformed { .. }
    ));
}

#[tokio::test]
async fn result_once_and_ids_echoed() {
    let (server, task, mut end) = serve(host(&RuntimeLimits::default()));
    // Reused and huge ids are answered as sent; nothing else is trusted.
    for id in [7u64, 7, u64::MAX] {
        frame(
            &mut end,
            json!({"id": id, "method": "call", "tool": "math:add", "args": {"a": 1, "b": 2}})
                .to_string()
                .as_bytes(),
        )
        .await;
        let answer = read_frame(&mut end).await;
        assert_eq!(answer["id"], json!(id));
        assert_eq!(answer["result"], json!({"result": 3.0}));
    }
    frame(&mut end, br#"{"method": "result", "value": [1, 2]}"#).await;
    frame(&mut end, br#"{"method": "result", "value": "again"}"#).await;
    assert_eq!(ends_with(task).await, ProtocolError::DuplicateResult);
    assert_eq!(server.value(), Some(json!([1, 2])));
}
