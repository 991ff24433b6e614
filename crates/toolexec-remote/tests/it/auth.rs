//! Signed requests: every refusal has its status and typed error, and the
//! client runtime never retries one.

use crate::support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use toolexec::{ErrorCode, Exec, Secret};
use toolexec_remote::auth::{
    self, CONTENT_SHA256_HEADER, NONCE_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER,
};
use toolexec_remote::{RemoteRuntime, ServerConfig};
use toolexec_runtime::{CommandUnit, RunStatus, RuntimeLimits, Unit};

use support::*;

/// What a raw request puts in the signing headers.
struct Signing {
    key: Secret,
    timestamp: u64,
    nonce: String,
    omit: Option<&'static str>,
}

impl Signing {
    fn good() -> Self {
        Signing {
            key: key(),
            timestamp: auth::unix_now(),
            nonce: auth::random_nonce(),
            omit: None,
        }
    }
}

/// Sends one raw request; returns the status and the JSON body (`Null`
/// for a `101`, whose connection is then dropped).
async fn raw(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    s: &Signing,
) -> (u16, Value) {
    let host = addr.to_string();
    raw_to(addr, method, path, body, s, &host, &host).await
}

/// [`raw`], signed for authority `signed_for` and sent with `Host: host`.
async fn raw_to(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    s: &Signing,
    signed_for: &str,
    host: &str,
) -> (u16, Value) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let target = auth::Target {
        method,
        authority: signed_for,
        path_and_query: path,
    };
    let sig = auth::sign_at(&s.key, target, body, s.timestamp, &s.nonce);
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", host)
        .header("connection", "upgrade")
        .header("upgrade", "toolexec-run.v1");
    for (name, value) in [
        (SIGNATURE_HEADER, sig.signature.clone()),
        (TIMESTAMP_HEADER, sig.timestamp.to_string()),
        (NONCE_HEADER, sig.nonce.clone()),
        (CONTENT_SHA256_HEADER, sig.content_sha256.clone()),
    ] {
        if s.omit != Some(name) {
            builder = builder.header(name, value);
        }
    }
    let response = sender
        .send_request(
            builder
                .body(Full::new(Bytes::copy_from_slice(body)))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status().as_u16();
    if status == 101 {
        return (status, Value::Null);
    }
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn code(body: &Value) -> (&str, &str) {
    (
        body["error"]["code"].as_str().unwrap_or("?"),
        body["error"]["details"]["field"].as_str().unwrap_or("-"),
    )
}

const GOOD: &[u8] = br#"{"unit": {"kind": "command", "argv": ["true"]}, "profile": "dev"}"#;

#[tokio::test]
async fn refusals_have_their_status_code_and_field() {
    let mut config = ServerConfig::new(key());
    config.max_body_bytes = 4096;
    let server = start(config).await;
    let addr = server.addr;

    let (status, _) = raw(addr, "POST", "/v1/runs", GOOD, &Signing::good()).await;
    assert_eq!(status, 101, "a good request is accepted");

    for header in [
        SIGNATURE_HEADER,
        TIMESTAMP_HEADER,
        NONCE_HEADER,
        CONTENT_SHA256_HEADER,
    ] {
        let s = Signing {
            omit: Some(header),
            ..Signing::good()
        };
        let (status, body) = raw(addr, "POST", "/v1/runs", GOOD, &s).await;
        assert_eq!(
            (status, code(&body)),
            (401, ("missing_signature", header)),
            "{body}"
        );
    }

    let s = Signing {
        key: Secret::new("not-the-key-0123456789abcdef"),
        ..Signing::good()
    };
    let (status, body) = raw(addr, "POST", "/v1/runs", GOOD, &s).await;
    assert_eq!(
        (status, code(&body)),
        (401, ("bad_signature", SIGNATURE_HEADER)),
        "{body}"
    );
    assert!(!body.to_string().contains(KEY));

    // A body swapped after signing: the server hashes what it got and
    // compares it with the signed digest.
    let tampered = br#"{"unit": {"kind": "command", "argv": ["false"]}, "profile": "dev"}"#;
    let (status, body) = raw_mismatch(addr, tampered, None, &Signing::good()).await;
    assert_eq!(
        (status, code(&body)),
        (401, ("bad_signature", CONTENT_SHA256_HEADER)),
        "{body}"
    );
    // The digest header swapped too: the signature no longer matches.
    let digest = auth::body_sha256(tampered);
    let (status, body) = raw_mismatch(addr, tampered, Some(&digest), &Signing::good()).await;
    assert_eq!(
        (status, code(&body)),
        (401, ("bad_signature", SIGNATURE_HEADER)),
        "{body}"
    );
    // A digest that is not 64 lowercase hex digits.
    let upper = auth::body_sha256(GOOD).to_uppercase();
    let (status, body) = raw_mismatch(addr, GOOD, Some(&upper), &Signing::good()).await;
    assert_eq!(
        (status, code(&body)),
        (401, ("bad_signature", CONTENT_SHA256_HEADER)),
        "{body}"
    );

    for skew in [-120i64, 120] {
        let s = Signing {
            timestamp: (auth::unix_now() as i64 + skew) as u64,
            ..Signing::good()
        };
        let (status, body) = raw(addr, "POST", "/v1/runs", GOOD, &s).await;
        assert_eq!(
            (status, code(&body)),
            (401, ("expired_timestamp", TIMESTAMP_HEADER)),
            "{body}"
        );
    }

    let s = Signing::good();
    let (first, _) = raw(addr, "POST", "/v1/runs", GOOD, &s).await;
    assert_eq!(first, 101);
    let (status, body) = raw(addr, "POST", "/v1/runs", GOOD, &s).await;
    assert_eq!(
        (status, code(&body)),
        (401, ("replayed_nonce", NONCE_HEADER)),
        "{body}"
    );
    let s = Signing {
        nonce: "short".into(),
        ..Signing::good()
    };
    let (status, body) = raw(addr, "POST", "/v1/runs", GOOD, &s).await;
    assert_eq!(
        (status, code(&body)),
        (401, ("replayed_nonce", NONCE_HEADER)),
        "{body}"
    );

    let big = format!(
        r#"{{"unit": {{"kind": "command", "argv": ["true"], "stdin": "{}"}}, "profile": "dev"}}"#,
        "x".repeat(8192)
    );
    let (status, body) = raw(addr, "POST", "/v1/runs", big.as_bytes(), &Signing::good()).await;
    assert_eq!(
        (status, code(&body)),
        (413, ("body_too_large", "body")),
        "{body}"
    );

    for (bad, field) in [
        (&b"{not json"[..], "body"),
        (br#"{"unit": {"kind": "command", "argv": "ls"}, "profile": "dev"}"#, "unit.argv"),
        (br#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "root"}"#, "profile"),
        (br#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "dev", "limits": {"wall_time": -1}}"#, "limits.wall_time"),
        (br#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "dev", "limits": {"max_output_bytes": 0}}"#, "limits.max_output_bytes"),
        // Above the server's ceilings, or unbounded where it has one.
        (br#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "dev", "limits": {"memory_bytes": null}}"#, "limits.memory_bytes"),
        (br#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "dev", "limits": {"max_processes": null}}"#, "limits.max_processes"),
        (br#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "dev", "limits": {"cpu_time": null}}"#, "limits.cpu_time"),
        (br#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "dev", "limits": {"wall_time": 18446744073709551615}}"#, "limits.wall_time"),
        (br#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "dev", "limits": {"max_output_bytes": 1073741824}}"#, "limits.max_output_bytes"),
        (br#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "dev", "limits": {"disk_bytes": 1099511627776}}"#, "limits.disk_bytes"),
        (br#"{"unit": {"kind": "command", "argv": ["ls"]}, "profile": "dev", "limits": {"max_tool_calls": 1000000}}"#, "limits.max_tool_calls"),
    ] {
        let (status, body) = raw(addr, "POST", "/v1/runs", bad, &Signing::good()).await;
        assert_eq!((status, code(&body)), (400, ("invalid_request", field)), "{body}");
    }

    // Signed for another server sharing the key, and replayed here as is.
    let (status, body) = raw_to(
        addr,
        "POST",
        "/v1/runs",
        GOOD,
        &Signing::good(),
        "10.9.9.9:7878",
        "10.9.9.9:7878",
    )
    .await;
    assert_eq!(
        (status, code(&body)),
        (401, ("bad_signature", "host")),
        "{body}"
    );
    // Signed for another server, sent with this one's Host.
    let host = addr.to_string();
    let (status, body) = raw_to(
        addr,
        "POST",
        "/v1/runs",
        GOOD,
        &Signing::good(),
        "10.9.9.9:7878",
        &host,
    )
    .await;
    assert_eq!(
        (status, code(&body)),
        (401, ("bad_signature", SIGNATURE_HEADER)),
        "{body}"
    );

    let (status, body) = raw(addr, "GET", "/v1/other", b"", &Signing::good()).await;
    assert_eq!((status, code(&body).0), (404, "not_found"), "{body}");
    // Two accepted runs; nothing else started one.
    assert_eq!(server.server.stats().runs_started, 2);
}

/// A request whose signature covers `GOOD`, sent with `body` and with the
/// digest header `digest` (else `GOOD`'s, as signed).
async fn raw_mismatch(
    addr: std::net::SocketAddr,
    body: &[u8],
    digest: Option<&str>,
    s: &Signing,
) -> (u16, Value) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let host = addr.to_string();
    let target = auth::Target {
        method: "POST",
        authority: &host,
        path_and_query: "/v1/runs",
    };
    let sig = auth::sign_at(&s.key, target, GOOD, s.timestamp, &s.nonce);
    let request = hyper::Request::builder()
        .method("POST")
        .uri("/v1/runs")
        .header("host", addr.to_string())
        .header(SIGNATURE_HEADER, sig.signature)
        .header(TIMESTAMP_HEADER, sig.timestamp.to_string())
        .header(NONCE_HEADER, sig.nonce)
        .header(CONTENT_SHA256_HEADER, digest.unwrap_or(&sig.content_sha256))
        .header("connection", "upgrade")
        .header("upgrade", "toolexec-run.v1")
        .body(Full::new(Bytes::copy_from_slice(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The client runtime gets each 4xx once, as a typed error, and does not
/// retry it: counted on the client and on the server.
#[tokio::test]
async fn the_client_never_retries_a_4xx() {
    let mut config = ServerConfig::new(key());
    config.max_body_bytes = 4096;
    let server = start(config).await;
    let exec = Exec::new(toolexec_testkit::catalog());

    let mut wrong = client_config(&server.url());
    wrong.key = Some(Secret::new("not-the-key-0123456789abcdef"));
    let wrong = RemoteRuntime::new(wrong).unwrap();
    let big = Unit::Command(CommandUnit {
        argv: vec!["cat".into()],
        stdin: Some("x".repeat(10_000)),
        ..CommandUnit::default()
    });
    let right = client(&server.url());
    let bad_limits = RuntimeLimits {
        max_output_bytes: 0,
        ..RuntimeLimits::default()
    };
    let unbounded = RuntimeLimits {
        memory_bytes: None,
        ..RuntimeLimits::default()
    };
    let cases = [
        (&wrong, dev(Unit::command(["true"])), 401, "bad_signature"),
        (&*right, dev(big), 413, "body_too_large"),
        (
            &*right,
            dev(Unit::command(["true"])).with_limits(bad_limits),
            400,
            "invalid_request",
        ),
        (
            &*right,
            dev(Unit::command(["true"])).with_limits(unbounded),
            400,
            "invalid_request",
        ),
    ];
    for (remote, request, status, remote_code) in cases {
        let requests = server.server.stats().requests;
        let attempts = remote.attempts();
        let out = run_direct(remote, request, &exec).await;
        let RunStatus::Error { error } = &out.status else {
            panic!("{out:?}")
        };
        assert_eq!(error.code, ErrorCode::InvalidRequest, "{out:?}");
        let details = error.details.as_ref().unwrap();
        assert_eq!(details["http_status"], status, "{out:?}");
        assert_eq!(details["remote_code"], remote_code, "{out:?}");
        assert_eq!(remote.attempts() - attempts, 1, "{remote_code}: retried");
        assert_eq!(
            server.server.stats().requests - requests,
            1,
            "{remote_code}: retried"
        );
    }
    assert_eq!(server.server.stats().runs_started, 0);
}

/// Writes `head` (and no body) on a fresh connection and reads the answer's
/// status and JSON body.
async fn head_only(addr: std::net::SocketAddr, head: String) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // The server answers and closes (or keeps the connection; the answer
    // is complete once the JSON body is).
    loop {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), tcp.read(&mut buf))
            .await
            .expect("no answer within 10 s")
            .unwrap();
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if n == 0 || text.trim_end().ends_with('}') {
            break;
        }
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
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

/// The signing headers are checked before the body is read: a request
/// without them is refused at once, whatever body it announces, and a
/// signed request whose body never comes is cut off.
#[tokio::test]
async fn headers_are_checked_before_the_body_is_read() {
    let mut config = ServerConfig::new(key());
    config.max_body_bytes = 4096;
    config.body_timeout = std::time::Duration::from_millis(300);
    let server = start(config).await;
    let addr = server.addr;

    // 1 GiB announced, nothing sent, no signature: 401, not 413 (the
    // body-size check would come first if the body were read first) and
    // not a wait for the body.
    let (status, body) = head_only(
        addr,
        format!("POST /v1/runs HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 1073741824\r\n\r\n"),
    )
    .await;
    assert_eq!(
        (status, code(&body)),
        (401, ("missing_signature", SIGNATURE_HEADER)),
        "{body}"
    );

    // Signed headers, a body announced within the limit that never
    // arrives: 408 after the body timeout.
    let host = addr.to_string();
    let target = auth::Target {
        method: "POST",
        authority: &host,
        path_and_query: "/v1/runs",
    };
    let sig = auth::sign(&key(), target, GOOD);
    let (status, body) = head_only(
        addr,
        format!(
            "POST /v1/runs HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\n\
             {SIGNATURE_HEADER}: {}\r\n{TIMESTAMP_HEADER}: {}\r\n{NONCE_HEADER}: {}\r\n\
             {CONTENT_SHA256_HEADER}: {}\r\nconnection: upgrade\r\nupgrade: toolexec-run.v1\r\n\r\n",
            GOOD.len(),
            sig.signature,
            sig.timestamp,
            sig.nonce,
            sig.content_sha256
        ),
    )
    .await;
    assert_eq!(
        (status, code(&body)),
        (408, ("request_timeout", "body")),
        "{body}"
    );
    // A malformed signature is refused before the body too.
    let (status, body) = head_only(
        addr,
        format!(
            "POST /v1/runs HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 1073741824\r\n\
             {SIGNATURE_HEADER}: v2=zz\r\n{TIMESTAMP_HEADER}: {}\r\n{NONCE_HEADER}: {}\r\n\
             {CONTENT_SHA256_HEADER}: {}\r\n\r\n",
            sig.timestamp,
            auth::random_nonce(),
            sig.content_sha256
        ),
    )
    .await;
    assert_eq!(
        (status, code(&body)),
        (401, ("bad_signature", SIGNATURE_HEADER)),
        "{body}"
    );
    assert_eq!(server.server.stats().runs_started, 0);
}
