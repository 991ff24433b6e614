//! `https://` upstreams: the Python fixture server (uvicorn with TLS) with
//! certificates made in the test by a CA made in the test
//! (`toolexec_testkit::tls`). A call works with `ca_file`; the wrong CA, an
//! expired certificate and the wrong host name each fail the connection
//! with a `backend_unavailable` naming the server and the reason, and are
//! not retried; a server that wants a client certificate gets one from
//! `client_cert`/`client_key` and refuses the connection clearly without.
//! Needs `TOOLEXEC_PYTHON` (see `upstream_python`).

use crate::support::upstream as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::{ChildGuard, assert_code, deps, eventually, free_port};
use toolexec::{Catalog, Error, Exec};
use toolexec_mcp::upstream::{
    TlsOptions, Upstream, UpstreamConfig, UpstreamStatus, UpstreamTransport,
};
use toolexec_testkit::TempDir;
use toolexec_testkit::tls::{TestCa, Usage};

const FIXTURE: &str = support::PY_FIXTURE;

fn python(test: &str) -> Option<String> {
    deps(test, &["TOOLEXEC_PYTHON"]).map(|mut v| v.remove(0))
}

/// The fixture over TLS with `cert` (and its key), requiring client
/// certificates signed by `client_ca` when given. Returns it and its port.
async fn start_https(
    python: &str,
    dir: &TempDir,
    tag: &str,
    cert: &toolexec_testkit::tls::Issued,
    client_ca: Option<&Path>,
) -> (ChildGuard, u16) {
    let cert_file = dir.write(&format!("{tag}.crt"), &cert.cert_pem);
    let key_file = dir.write_private(&format!("{tag}.key"), &cert.key_pem);
    let port = free_port();
    let mut cmd = Command::new(python);
    cmd.arg(FIXTURE)
        .args(["https", &port.to_string()])
        .arg(&cert_file)
        .arg(&key_file);
    if let Some(ca) = client_ca {
        cmd.arg(ca);
    }
    let guard = ChildGuard::spawn(&mut cmd);
    support::wait_listening(port, Duration::from_secs(20)).await;
    (guard, port)
}

/// `https://HOST:PORT/mcp` with `tls`.
fn https_config(name: &str, host: &str, port: u16, tls: TlsOptions) -> UpstreamConfig {
    let mut config = UpstreamConfig::new(
        name,
        UpstreamTransport::Http {
            url: format!("https://{host}:{port}/mcp"),
            headers: Default::default(),
            bearer_token: None,
            tls,
            oauth: None,
            token_exchange: None,
        },
    );
    config.call_timeout = Duration::from_secs(20);
    config
}

fn trusting(ca_file: &Path) -> TlsOptions {
    TlsOptions {
        ca_file: Some(ca_file.to_owned()),
        ..TlsOptions::default()
    }
}

/// The connection of `config` fails with `backend_unavailable` for its
/// server, the message holding every one of `reasons`.
async fn assert_refused(config: UpstreamConfig, reasons: &[&str]) -> String {
    let server = config.name.clone();
    let err = assert_code(
        Upstream::connect(config, Arc::new(Catalog::new())).await,
        "backend_unavailable",
    );
    let Error::BackendUnavailable { backend, message } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(backend, &server, "{err}");
    for reason in reasons {
        assert!(message.contains(reason), "{reason:?} not in: {err}");
    }
    assert!(message.contains("not retried"), "{err}");
    message.clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn https_with_ca_file_and_the_wrong_ca() {
    let Some(python) = python("https_with_ca_file_and_the_wrong_ca") else {
        return;
    };
    support::init_tracing();
    let dir = TempDir::new("tls-ca");
    let ca = TestCa::new("toolexec test CA");
    let ca_file = dir.write("ca.pem", &ca.cert_pem);
    let cert = ca.issue(&["localhost", "127.0.0.1"], Usage::Server);
    let (_server, port) = start_https(&python, &dir, "server", &cert, None).await;

    // Tools import and a call works, by IP address and by name.
    for host in ["127.0.0.1", "localhost"] {
        let catalog = Arc::new(Catalog::new());
        let config = https_config("secure", host, port, trusting(&ca_file));
        let upstream = Upstream::connect(config, catalog.clone()).await.unwrap();
        assert!(
            upstream.tool_ids().contains(&"secure:add".to_owned()),
            "{:?}",
            upstream.tool_ids()
        );
        let out = Exec::new(catalog)
            .run_tool("secure:add", json!({"a": 2, "b": 3}))
            .await
            .unwrap();
        assert_eq!(out.value, json!({"result": 5}));
        upstream.shutdown().await;
    }

    // Another CA's file: unknown issuer, naming the file trusted.
    let other_ca = dir.write("other-ca.pem", &TestCa::new("another CA").cert_pem);
    let message = assert_refused(
        https_config("wrong-ca", "127.0.0.1", port, trusting(&other_ca)),
        &["unknown issuer", "other-ca.pem"],
    )
    .await;
    assert!(message.starts_with("TLS handshake failed"), "{message}");
    // The system's roots do not know the test CA either.
    assert_refused(
        https_config("no-ca-file", "127.0.0.1", port, TlsOptions::default()),
        &["unknown issuer", "the system's roots"],
    )
    .await;

    // Lazy: the failure is permanent, so the upstream gives up instead of
    // retrying with backoff.
    let mut config = https_config("lazy-wrong-ca", "127.0.0.1", port, trusting(&other_ca));
    config.lazy = true;
    let upstream = Upstream::connect(config, Arc::new(Catalog::new()))
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the upstream to give up", || {
        matches!(upstream.status(), UpstreamStatus::Failed { .. })
    })
    .await;
    let UpstreamStatus::Failed { reason } = upstream.status() else {
        unreachable!()
    };
    assert!(reason.contains("unknown issuer"), "{reason}");
    upstream.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_and_wrong_host_certificates_are_refused() {
    let Some(python) = python("expired_and_wrong_host_certificates_are_refused") else {
        return;
    };
    support::init_tracing();
    let dir = TempDir::new("tls-bad");
    let ca = TestCa::new("toolexec test CA");
    let ca_file = dir.write("ca.pem", &ca.cert_pem);
    let expired = ca.issue(&["localhost", "127.0.0.1"], Usage::ExpiredServer);
    let elsewhere = ca.issue(&["elsewhere.example"], Usage::Server);
    let ((_expired, expired_port), (_elsewhere, elsewhere_port)) = tokio::join!(
        start_https(&python, &dir, "expired", &expired, None),
        start_https(&python, &dir, "elsewhere", &elsewhere, None),
    );
    assert_refused(
        https_config("expired", "127.0.0.1", expired_port, trusting(&ca_file)),
        &["certificate has expired"],
    )
    .await;
    assert_refused(
        https_config(
            "wrong-host",
            "127.0.0.1",
            elsewhere_port,
            trusting(&ca_file),
        ),
        &["wrong host name", "127.0.0.1", "elsewhere.example"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn client_certificates_are_presented_when_configured() {
    let Some(python) = python("client_certificates_are_presented_when_configured") else {
        return;
    };
    support::init_tracing();
    let dir = TempDir::new("tls-client");
    let ca = TestCa::new("toolexec test CA");
    let ca_file = dir.write("ca.pem", &ca.cert_pem);
    let server_cert = ca.issue(&["127.0.0.1"], Usage::Server);
    let client = ca.issue(&["toolexec-client"], Usage::Client);
    let client_cert = dir.write("client.crt", &client.cert_pem);
    let client_key = dir.write_private("client.key", &client.key_pem);
    let (_server, port) = start_https(&python, &dir, "server", &server_cert, Some(&ca_file)).await;

    let with_identity = |cert: PathBuf, key: PathBuf| TlsOptions {
        ca_file: Some(ca_file.clone()),
        client_cert: Some(cert),
        client_key: Some(key),
    };
    let catalog = Arc::new(Catalog::new());
    let config = https_config(
        "mtls",
        "127.0.0.1",
        port,
        with_identity(client_cert.clone(), client_key.clone()),
    );
    let upstream = Upstream::connect(config, catalog.clone()).await.unwrap();
    let out = Exec::new(catalog)
        .run_tool("mtls:add", json!({"a": 20, "b": 22}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"result": 42}));
    upstream.shutdown().await;

    // Without a client certificate the server refuses the connection.
    assert_refused(
        https_config("no-client-cert", "127.0.0.1", port, trusting(&ca_file)),
        &["client certificate", "client_cert"],
    )
    .await;

    // A key file its group or others may read is refused up front, as
    // secret files are; so is a key that does not fit the certificate.
    let open_key = dir.write("open.key", &client.key_pem);
    let config = https_config(
        "open-key",
        "127.0.0.1",
        port,
        with_identity(client_cert.clone(), open_key.clone()),
    );
    let err = assert_code(
        Upstream::connect(config, Arc::new(Catalog::new())).await,
        "invalid_request",
    );
    assert_eq!(err.field(), Some("tls.client_key"), "{err}");
    assert!(err.to_string().contains("chmod 600"), "{err}");
    let other_key = dir.write_private("other.key", &ca.issue(&["x"], Usage::Client).key_pem);
    let config = https_config(
        "wrong-key",
        "127.0.0.1",
        port,
        with_identity(client_cert, other_key),
    );
    let err = assert_code(
        Upstream::connect(config, Arc::new(Catalog::new())).await,
        "invalid_request",
    );
    assert!(err.to_string().contains("does not fit"), "{err}");
}
