//! The runtime server under attack from raw TCP clients: a captured request
//! replayed with its body dripped past the skew window, many connections
//! with fake signatures announcing large bodies, and slow clients that
//! send half a request and stall. Requests are captured from the real
//! client runtime (through a recording proxy), so the attacks do not
//! depend on how signing is spelled on the wire.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use toolexec::{Availability, Exec, Secret};
use toolexec_remote::{RemoteRuntime, ServerConfig};
use toolexec_runtime::{RunStatus, Unit};

use support::*;

/// Far more than any step below needs, even on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// A TCP proxy to `upstream` that records every byte its first client
/// sends (the request head, body and anything after the upgrade).
async fn recording_proxy(upstream: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let tape = recorded.clone();
    tokio::spawn(async move {
        let (client, _) = listener.accept().await.unwrap();
        let server = TcpStream::connect(upstream).await.unwrap();
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        let up = async move {
            let mut buf = [0u8; 8192];
            loop {
                let n = match client_read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                tape.lock().extend_from_slice(&buf[..n]);
                if server_write.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = server_write.shutdown().await;
        };
        let down = async move {
            let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
            let _ = client_write.shutdown().await;
        };
        tokio::join!(up, down);
    });
    (addr, recorded)
}

/// A recorded request: its head (through the blank line) and its body.
struct Captured {
    head: String,
    body: Vec<u8>,
}

impl Captured {
    fn parse(bytes: &[u8]) -> Self {
        let end = bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a request head")
            + 4;
        let head = String::from_utf8(bytes[..end].to_vec()).unwrap();
        let length: usize = header(&head, "content-length")
            .map(|v| v.parse().unwrap())
            .unwrap_or(0);
        Captured {
            body: bytes[end..end + length].to_vec(),
            head,
        }
    }

    /// The head with `content-length` replaced by `length`.
    fn head_announcing(&self, length: usize) -> String {
        self.head
            .split("\r\n")
            .map(|line| {
                if line.to_ascii_lowercase().starts_with("content-length:") {
                    format!("content-length: {length}")
                } else {
                    line.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\r\n")
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Reads an answer until the server closes the connection (or, for a
/// `101`, until its head is complete): the status and the JSON body.
async fn answer(read: &mut (impl AsyncReadExt + Unpin)) -> (u16, Value) {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = match tokio::time::timeout(PATIENCE, read.read(&mut buf))
            .await
            .expect("no answer, and the connection is still open")
        {
            Ok(n) => n,
            // A reset after the answer was read.
            Err(_) if !bytes.is_empty() => 0,
            Err(e) => panic!("connection failed before any answer: {e}"),
        };
        bytes.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&bytes);
        if n == 0 || (text.starts_with("HTTP/1.1 101") && text.contains("\r\n\r\n")) {
            break;
        }
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("?")
}

/// Waits (at most [`PATIENCE`]) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn marker_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("toolexec-hostile-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Defect: the timestamp was checked before the body and the nonce
/// recorded after it, and forgotten when the timestamp left the window. A
/// captured request replayed with its body dripped out until the window
/// had passed ran again, and the replayer got the live session. Now the
/// nonce is recorded with the signature, before the body: the replay is
/// refused and never reaches a run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_with_a_dripped_body_is_refused_and_never_runs() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server_addr = listener.local_addr().unwrap();
    let (proxy, recorded) = recording_proxy(server_addr).await;
    let mut config = ServerConfig::new(key());
    // Generous: the head must reach the server within this of signing.
    let skew = 10;
    config.max_clock_skew = Duration::from_secs(skew);
    // The client addresses the proxy (a port mapping, as far as the
    // server knows).
    config.hosts = vec![proxy.to_string()];
    let server = serve_on(listener, host_runtimes(), config);

    let dir = marker_dir("replay");
    let marker = dir.join("runs");
    let script = format!("echo ran >> {}", marker.display());
    let remote = client(&format!("http://{proxy}"));
    let out = run_direct(
        &remote,
        dev(Unit::command(["sh", "-c", &script])),
        &Exec::new(toolexec_testkit::catalog()),
    )
    .await;
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(server.server.stats().runs_started, 1);
    let captured = Captured::parse(&recorded.lock());
    assert!(!captured.body.is_empty());
    let timestamp: u64 = header(&captured.head, "x-toolexec-timestamp")
        .unwrap()
        .parse()
        .unwrap();

    // The replay: the head at once (its timestamp is still fresh), then
    // the body a byte at a time until the window has surely passed.
    let tcp = TcpStream::connect(server_addr).await.unwrap();
    let (mut read, mut write) = tcp.into_split();
    let body = captured.body.clone();
    let head = captured.head.clone();
    let past_the_window = move || toolexec_remote::auth::unix_now() > timestamp + skew + 1;
    let dripper = tokio::spawn(async move {
        write.write_all(head.as_bytes()).await?;
        let mut sent = 0;
        while sent + 1 < body.len() && !past_the_window() {
            write.write_all(&body[sent..sent + 1]).await?;
            sent += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        while !past_the_window() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        write.write_all(&body[sent..]).await?;
        std::io::Result::Ok(write)
    });
    let (status, error) = answer(&mut read).await;
    assert_eq!(
        (status, code(&error)),
        (401, "replayed_nonce"),
        "the replay was answered {status} {error}"
    );
    dripper.abort();
    // Nothing ran a second time.
    assert_eq!(server.server.stats().runs_started, 1);
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran\n");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Captures the head of a request the real client sends through `proxy`
/// with a wrong key (a well-formed, current, but fake signature).
async fn fake_signed_head(proxy: SocketAddr, recorded: Arc<Mutex<Vec<u8>>>) -> Captured {
    let mut config = client_config(&format!("http://{proxy}"));
    config.key = Some(Secret::new("not-the-servers-key-0123456789"));
    config.retry.max_attempts = 1;
    let wrong = RemoteRuntime::new(config).unwrap();
    let out = run_direct(
        &wrong,
        dev(Unit::command(["true"])),
        &Exec::new(toolexec_testkit::catalog()),
    )
    .await;
    let RunStatus::Error { error } = &out.status else {
        panic!("{out:?}")
    };
    assert_eq!(error.details.as_ref().unwrap()["http_status"], 401);
    let bytes = recorded.lock().clone();
    Captured::parse(&bytes)
}

/// Defect: bodies up to 4 MiB were read before the signature was checked,
/// with no cap on concurrent reads (60 connections with a fake signature
/// took the server from 16 to 259 MiB). Now the signature is checked from
/// the head: each connection is refused with `401` while its announced
/// body is still unsent, and what the server read from them all stays
/// within one small read buffer per connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_signatures_with_large_bodies_are_refused_before_any_body_is_read() {
    const CONNECTIONS: usize = 60;
    const ANNOUNCED: usize = 4 << 20;
    const SENT: usize = 256 << 10;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (proxy, recorded) = recording_proxy(addr).await;
    let mut config = ServerConfig::new(key());
    // Requests addressed to the proxy are addressed to this server.
    config.hosts = vec![proxy.to_string()];
    // Long enough that a server waiting for the bodies would not answer.
    config.body_timeout = Duration::from_secs(300);
    let server = serve_on(listener, host_runtimes(), config);
    let captured = fake_signed_head(proxy, recorded).await;
    let head = captured.head_announcing(ANNOUNCED);

    let mut connections = Vec::new();
    for _ in 0..CONNECTIONS {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (read, mut write) = tcp.into_split();
        let head = head.clone();
        // Headers, then part of the announced body, in the background
        // (a server that does not read it makes these writes wait).
        let writer = tokio::spawn(async move {
            write.write_all(head.as_bytes()).await?;
            write.write_all(&vec![b'x'; SENT]).await?;
            std::io::Result::Ok(write)
        });
        connections.push((read, writer));
    }
    for (mut read, writer) in connections {
        let (status, error) = answer(&mut read).await;
        assert_eq!((status, code(&error)), (401, "bad_signature"), "{error}");
        writer.abort();
    }
    let stats = server.server.stats();
    assert_eq!(stats.runs_started, 0);
    assert!(
        stats.unauthenticated_bytes_peak
            <= (CONNECTIONS * toolexec_remote::server::READ_BUFFER_BYTES) as u64,
        "{} bytes read from unauthenticated connections",
        stats.unauthenticated_bytes_peak
    );
    let server_ref = &server.server;
    until("every connection closed and uncounted", || {
        let s = server_ref.stats();
        s.connections_open == 0 && s.unauthenticated_bytes == 0
    })
    .await;
}

/// Half a request head: the request line and one header, no blank line.
fn half_request(addr: SocketAddr) -> String {
    format!("GET /v1/health HTTP/1.1\r\nhost: {addr}\r\n")
}

/// Whether the server closed `tcp` (EOF or reset) within [`PATIENCE`].
async fn closed_by_server(tcp: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(PATIENCE, tcp.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // Whatever the server says before closing.
            Ok(Ok(_)) => {}
        }
    }
}

/// Defect: half-open connections lived forever (no header-read timeout,
/// no idle timeout, no cap). Now: slow clients that stall mid-head are
/// closed after the header timeout, a connection beyond the cap gets a
/// clear `503 busy`, and once the slow ones are gone the server serves
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_the_cap_answers_503() {
    const CAP: usize = 4;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = ServerConfig::new(key());
    config.max_connections = CAP;
    config.header_timeout = Duration::from_secs(2);
    config.idle_timeout = Duration::from_secs(600);
    let server = serve_on(listener, host_runtimes(), config);

    let mut stalled = Vec::new();
    for _ in 0..CAP {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(half_request(addr).as_bytes()).await.unwrap();
        stalled.push(tcp);
    }
    // One more (accepted after them, the accept queue is in order):
    // refused with a clear 503, whatever it sends.
    let mut extra = TcpStream::connect(addr).await.unwrap();
    extra
        .write_all(format!("GET /v1/health HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (status, error) = answer(&mut extra).await;
    assert_eq!((status, code(&error)), (503, "busy"), "{error}");
    assert_eq!(server.server.stats().connections_refused, 1);
    let server_ref = &server.server;
    until("the stalled connections are counted open", || {
        server_ref.stats().connections_open == CAP as u64
    })
    .await;

    // A client dripping its head a byte at a time stays active, but the
    // header timeout counts from the start: it is cut off too. (It gets
    // its slot once the stalled ones are gone.)
    for mut tcp in stalled {
        assert!(
            closed_by_server(&mut tcp).await,
            "a stalled client lives on"
        );
    }
    until("the stalled connections are closed", || {
        server_ref.stats().connections_open == 0
    })
    .await;
    let mut dripping = TcpStream::connect(addr).await.unwrap();
    dripping
        .write_all(half_request(addr).as_bytes())
        .await
        .unwrap();
    let drip = tokio::spawn({
        // Header lines, a byte at a time: a valid head that never ends.
        let lines = "x-pad: aaaaaaaa\r\n";
        async move {
            for byte in lines.bytes().cycle() {
                if dripping.write_all(&[byte]).await.is_err() {
                    return dripping;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            dripping
        }
    });
    let mut dripping = tokio::time::timeout(PATIENCE, drip)
        .await
        .expect("a dripping client lives on past the header timeout")
        .unwrap();
    assert!(closed_by_server(&mut dripping).await);
    assert!(server.server.stats().connections_timed_out > CAP as u64);

    // The server serves again.
    let remote = client(&server.url());
    assert!(
        matches!(remote.probe().await, Availability::Available),
        "{:?}",
        remote.probe().await
    );
}

/// A connection that sends nothing at all is closed after the idle
/// timeout, even when the header timeout is longer.
#[tokio::test]
async fn idle_connections_are_closed() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = ServerConfig::new(key());
    config.header_timeout = Duration::from_secs(600);
    config.idle_timeout = Duration::from_secs(1);
    let server = serve_on(listener, host_runtimes(), config);
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(half_request(addr).as_bytes()).await.unwrap();
    assert!(
        closed_by_server(&mut silent).await,
        "a silent client lives on"
    );
    assert!(closed_by_server(&mut half).await, "an idle client lives on");
    assert_eq!(server.server.stats().connections_timed_out, 2);
}
