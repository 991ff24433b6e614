//! The gateway's bounds, tried as a hostile client would: raw TCP sockets
//! that stall in the headers, drip a body, hold connections or open
//! sessions, and real MCP clients that run more tools than allowed.
//! Every bound is checked by what the client sees (closed sockets, status
//! codes, error results), with short configured limits and generous waits.

use crate::support::gateway as support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use toolexec::{LocalTool, Secret, ToolContext, ToolError, ToolOutput, raw_handler};
use toolexec_mcp::gateway::{
    self, Expose, Gateway, GatewayOptions, HttpAuth, HttpLimits, HttpOptions, RunLimits,
};

const TOKEN: &str = "limits-token";
/// Longest wait for anything the server should do; far above the limits
/// configured here, so a loaded machine does not fail the tests.
const WAIT: Duration = Duration::from_secs(20);

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

async fn start(gateway: Gateway, limits: HttpLimits) -> (SocketAddr, CancellationToken) {
    let shutdown = CancellationToken::new();
    let mut options = HttpOptions::new(
        "127.0.0.1:0".parse().unwrap(),
        HttpAuth::Bearer(Secret::new(TOKEN)),
    );
    options.limits = limits;
    let (addr, server) = gateway::bind_http(gateway, options, shutdown.clone())
        .await
        .expect("bind the HTTP gateway");
    tokio::spawn(server);
    (addr, shutdown)
}

/// Limits so loose nothing but the one under test can trip.
fn loose() -> HttpLimits {
    let mut l = HttpLimits::default();
    l.header_timeout = Duration::from_secs(60);
    l.body_timeout = Duration::from_secs(60);
    l.session_idle_timeout = Duration::from_secs(600);
    l
}

/// Reads until the server closes the connection (or `WAIT` passes);
/// returns what arrived and whether it was closed.
async fn read_until_closed(stream: &mut (impl AsyncRead + Unpin)) -> (String, bool) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut chunk)).await {
            Err(_) => return (String::from_utf8_lossy(&buf).into_owned(), false),
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&buf).into_owned(), true),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A POST of `body` to `/mcp` with the token, `extra` headers and
/// `Connection: close`; returns the status and the whole response.
async fn post(addr: SocketAddr, extra: &[&str], body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for h in extra {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes()).await.unwrap();
    let (text, closed) = read_until_closed(&mut stream).await;
    assert!(closed, "the response never ended: {text:?}");
    (status_of(&text), text)
}

fn status_of(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"))
}

fn session_id(response: &str) -> String {
    response
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id in {response:?}"))
}

/// An `initialize` as a new client; returns the status and the response.
async fn initialize(addr: SocketAddr) -> (u16, String) {
    post(addr, &[], INITIALIZE).await
}

#[tokio::test(flavor = "multi_thread")]
async fn stalled_headers_and_idle_connections_are_closed() {
    let mut limits = loose();
    limits.header_timeout = Duration::from_secs(1);
    let (addr, shutdown) = start(support::demo_gateway(Expose::Meta), limits).await;

    // Half the headers, then nothing: closed after the header timeout.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Ty").as_bytes())
        .await
        .unwrap();
    let (text, closed) = read_until_closed(&mut stalled).await;
    assert!(
        closed,
        "a stalled request was kept open for {WAIT:?}: {text:?}"
    );

    // Connected but silent: closed too.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(
        read_until_closed(&mut silent).await.1,
        "a silent connection was kept open"
    );

    // One complete request on a keep-alive connection, then idle: closed.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(format!("GET /mcp HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (text, closed) = read_until_closed(&mut idle).await;
    assert!(text.starts_with("HTTP/1.1 401"), "{text:?}");
    assert!(
        closed,
        "an idle keep-alive connection was kept open: {text:?}"
    );
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dripped_body_gets_408() {
    let mut limits = loose();
    limits.body_timeout = Duration::from_secs(1);
    let (addr, shutdown) = start(support::demo_gateway(Expose::Meta), limits).await;
    let (mut reader, mut writer) = TcpStream::connect(addr).await.unwrap().into_split();
    writer
        .write_all(
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
                 Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
                 Content-Length: {}\r\n\r\n{}",
                INITIALIZE.len(),
                &INITIALIZE[..10]
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // A byte now and then, while the answer is awaited: no per-read timer
    // would fire, the body's own deadline does.
    let drip = tokio::spawn(async move {
        for b in INITIALIZE[10..40].bytes() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if writer.write_all(&[b]).await.is_err() {
                break;
            }
        }
        writer
    });
    let (text, closed) = read_until_closed(&mut reader).await;
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?}");
    assert!(text.contains("gateway.body_timeout"), "{text:?}");
    assert!(closed, "{text:?}");
    drip.abort();
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_body_gets_413() {
    let (addr, shutdown) = start(support::demo_gateway(Expose::Meta), loose()).await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","pad":"{}"}}"#,
        "x".repeat(5 << 20)
    );
    let (status, text) = post(addr, &[], &big).await;
    assert_eq!(status, 413, "{}", &text[..text.len().min(300)]);
    // The server goes on serving.
    assert_eq!(initialize(addr).await.0, 200);
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_over_the_cap_get_503() {
    let mut limits = loose();
    limits.max_connections = 2;
    let (addr, shutdown) = start(support::demo_gateway(Expose::Meta), limits).await;
    // Two connections hold every slot (sending nothing).
    let holders = [
        TcpStream::connect(addr).await.unwrap(),
        TcpStream::connect(addr).await.unwrap(),
    ];
    // A third client, even with a valid request, is turned away.
    let (status, text) = initialize(addr).await;
    assert_eq!(status, 503, "{text}");
    assert!(
        text.to_ascii_lowercase().contains("retry-after: 1"),
        "{text}"
    );
    assert!(text.contains("gateway.max_connections"), "{text}");
    // Once a holder leaves, a slot frees.
    drop(holders);
    let start = Instant::now();
    loop {
        let (status, text) = initialize(addr).await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "{text}");
        assert!(
            start.elapsed() < WAIT,
            "no slot freed after the holders left"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread")]
async fn initialize_over_the_session_cap_gets_503_until_one_closes() {
    let mut limits = loose();
    limits.max_sessions = 2;
    let (addr, shutdown) = start(support::demo_gateway(Expose::Meta), limits).await;
    let (status, first) = initialize(addr).await;
    assert_eq!(status, 200, "{first}");
    let (status, second) = initialize(addr).await;
    assert_eq!(status, 200, "{second}");
    let (status, text) = initialize(addr).await;
    assert_eq!(status, 503, "{text}");
    let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("backend_unavailable: mcp-gateway: at capacity: 2 MCP sessions"),
        "{message}"
    );
    assert_eq!(body["error"]["data"]["max_sessions"], 2);

    // A client that ends its session (DELETE) makes room for another.
    let id = session_id(&first);
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!(
                "DELETE /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
                 Mcp-Session-Id: {id}\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let (text, _) = read_until_closed(&mut stream).await;
    assert!(text.starts_with("HTTP/1.1 2"), "{text}");
    let (status, text) = initialize(addr).await;
    assert_eq!(status, 200, "{text}");
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_sessions_expire_and_free_their_place() {
    let mut limits = loose();
    limits.max_sessions = 1;
    limits.session_idle_timeout = Duration::from_secs(1);
    let (addr, shutdown) = start(support::demo_gateway(Expose::Meta), limits).await;
    let (status, first) = initialize(addr).await;
    assert_eq!(status, 200, "{first}");
    let id = session_id(&first);
    // The session left idle expires: a request on it gets 404 (the spec's
    // "initialize again"), and a new client gets its place.
    let start = Instant::now();
    loop {
        let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
        let (status, text) = post(
            addr,
            &[
                &format!("Mcp-Session-Id: {id}"),
                "MCP-Protocol-Version: 2025-11-25",
            ],
            ping,
        )
        .await;
        if status == 404 {
            break;
        }
        assert_eq!(status, 200, "{text}");
        assert!(start.elapsed() < WAIT, "the idle session never expired");
        // Each ping is activity: wait past the idle timeout before the next.
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let (status, text) = initialize(addr).await;
    assert_eq!(status, 200, "{text}");
    shutdown.cancel();
}

type Client = RunningService<RoleClient, ()>;

async fn client(addr: SocketAddr) -> Client {
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
        .auth_header(TOKEN);
    ().serve(support::rmcp_http_transport(config))
        .await
        .expect("initialize over HTTP")
}

async fn call(client: &Client, name: &str, args: Value) -> CallToolResult {
    let args: JsonObject = args.as_object().cloned().unwrap();
    client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A gateway over the demo catalog plus `test:hold`, which tells `entered`
/// it started and returns once `release` has a permit for it.
fn holding_gateway(
    runs: RunLimits,
    entered: mpsc::UnboundedSender<()>,
    release: Arc<Semaphore>,
) -> Gateway {
    let exec = support::demo_exec();
    LocalTool::new(
        "test:hold",
        raw_handler(move |_: Value, _: ToolContext| {
            let entered = entered.clone();
            let release = release.clone();
            async move {
                let _ = entered.send(());
                release.acquire().await.unwrap().forget();
                Ok::<_, ToolError>(ToolOutput::structured(json!({"held": true})))
            }
        }),
    )
    .description("Holds its run slot until released. For tests.")
    .register(exec.catalog())
    .unwrap();
    Gateway::new(
        exec,
        GatewayOptions {
            expose: Expose::Both,
            runs,
            ..GatewayOptions::default()
        },
    )
}

fn is_at_capacity(r: &CallToolResult) -> bool {
    r.is_error == Some(true)
        && r.structured_content.as_ref().is_some_and(|s| {
            s["error"]["code"] == "backend_unavailable"
                && s["error"]["details"]["reason"] == "at_capacity"
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_runs_beyond_the_bound_get_backend_unavailable() {
    let (entered_tx, mut entered) = mpsc::unbounded_channel();
    let release = Arc::new(Semaphore::new(0));
    let gateway = holding_gateway(RunLimits::new(1, 1), entered_tx, release.clone());
    let (addr, shutdown) = start(gateway, loose()).await;
    let (a, b, c) = (client(addr).await, client(addr).await, client(addr).await);

    // One run holds the only slot...
    let first = tokio::spawn(async move {
        call(&a, "run_tool", json!({"tool_id": "test:hold", "args": {}})).await
    });
    tokio::time::timeout(WAIT, entered.recv()).await.unwrap();
    // ...one more may wait in line, one beyond that is refused at once: a
    // direct tool and a chain count the same as run_tool.
    let second = tokio::spawn(async move { call(&b, "test__hold", json!({})).await });
    let third = tokio::spawn(async move {
        call(
            &c,
            "run_chain",
            json!({"steps": [{"tool_id": "test:hold", "args": {}}]}),
        )
        .await
    });
    // Whichever of the two came second is refused without waiting.
    let start = Instant::now();
    loop {
        if second.is_finished() || third.is_finished() {
            break;
        }
        assert!(start.elapsed() < WAIT, "neither extra run was refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (refused, waiting) = if third.is_finished() {
        (third.await.unwrap(), second)
    } else {
        (second.await.unwrap(), third)
    };
    assert!(is_at_capacity(&refused), "{refused:?}");
    let text = refused.content[0].as_text().unwrap().text.clone();
    assert!(
        text.starts_with("backend_unavailable: mcp-gateway: at capacity: 1 tool runs"),
        "{text}"
    );
    // The one in flight and the one in line both finish once released.
    release.add_permits(2);
    let first = tokio::time::timeout(WAIT, first).await.unwrap().unwrap();
    assert_eq!(first.is_error, Some(false), "{first:?}");
    let waited = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
    assert!(!is_at_capacity(&waited), "{waited:?}");
    assert_ne!(waited.is_error, Some(true), "{waited:?}");
    shutdown.cancel();
}
