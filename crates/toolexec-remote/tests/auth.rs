//! Signed requests: every refusal has its status and typed error, and the
//! client runtime never retries one.

mod support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use toolexec::{ErrorCode, Exec, Secret};
use toolexec_remote::auth::{self, NONCE_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER};
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
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let sig = auth::sign_at(&s.key, method, path, body, s.timestamp, &s.nonce);
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .header("connection", "upgrade")
        .header("upgrade", "toolexec-run.v1");
    for (name, value) in [
        (SIGNATURE_HEADER, sig.signature.clone()),
        (TIMESTAMP_HEADER, sig.timestamp.to_string()),
        (NONCE_HEADER, sig.nonce.clone()),
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

    for header in [SIGNATURE_HEADER, TIMESTAMP_HEADER, NONCE_HEADER] {
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

    // A body swapped after signing: the server hashes what it got.
    let tampered = br#"{"unit": {"kind": "command", "argv": ["false"]}, "profile": "dev"}"#;
    let (status, body) = raw_mismatch(addr, tampered, &Signing::good()).await;
    assert_eq!(
        (status, code(&body)),
        (401, ("bad_signature", SIGNATURE_HEADER)),
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
    ] {
        let (status, body) = raw(addr, "POST", "/v1/runs", bad, &Signing::good()).await;
        assert_eq!((status, code(&body)), (400, ("invalid_request", field)), "{body}");
    }

    let (status, body) = raw(addr, "GET", "/v1/other", b"", &Signing::good()).await;
    assert_eq!((status, code(&body).0), (404, "not_found"), "{body}");
    // Two accepted runs; nothing else started one.
    assert_eq!(server.server.stats().runs_started, 2);
}

/// A request whose signature covers `GOOD`, sent with `body`.
async fn raw_mismatch(addr: std::net::SocketAddr, body: &[u8], s: &Signing) -> (u16, Value) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let sig = auth::sign_at(&s.key, "POST", "/v1/runs", GOOD, s.timestamp, &s.nonce);
    let request = hyper::Request::builder()
        .method("POST")
        .uri("/v1/runs")
        .header("host", addr.to_string())
        .header(SIGNATURE_HEADER, sig.signature)
        .header(TIMESTAMP_HEADER, sig.timestamp.to_string())
        .header(NONCE_HEADER, sig.nonce)
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
    let exec = Exec::new(toolexec_builtins::catalog());

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
    let cases = [
        (&wrong, dev(Unit::command(["true"])), 401, "bad_signature"),
        (&*right, dev(big), 413, "body_too_large"),
        (
            &*right,
            dev(Unit::command(["true"])).with_limits(bad_limits),
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
