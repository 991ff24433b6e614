//! The HTTP gateway as an OAuth resource server, against a test issuer:
//! an axum server in this test serving RFC 8414 metadata and a key set
//! whose ES256 keys are made here. Tokens that are expired, for another
//! audience or issuer, badly signed, unsigned (`alg: none`), HMAC-signed
//! with the public key, or without the needed scope are refused with the
//! right status and `WWW-Authenticate`; a key rotation is picked up
//! without a restart; a valid token's subject and claims are the caller
//! the policy decides for.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use parking_lot::Mutex;
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolexec::Exec;
use toolexec::policy::{Policy, PolicyConfig};
use toolexec_mcp::gateway::{
    self, Expose, Gateway, GatewayOptions, HttpAuth, HttpOptions, OAuthOptions,
};

use crate::support::gateway as support;

const AUDIENCE: &str = "https://toolexec.test/mcp";

/// A signing key and its public JWK (with `kid`).
struct Key {
    encoding: EncodingKey,
    jwk: Jwk,
    kid: String,
}

impl Key {
    fn new(kid: &str) -> Key {
        let der = toolexec_testkit::tls::p256_pkcs8_der();
        let encoding = EncodingKey::from_ec_der(&der);
        let mut jwk = Jwk::from_encoding_key(&encoding, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some(kid.to_owned());
        Key {
            encoding,
            jwk,
            kid: kid.to_owned(),
        }
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        encode(&header, claims, &self.encoding).unwrap()
    }
}

/// The test issuer: its metadata and its current key set.
struct Issuer {
    url: String,
    keys: Mutex<Vec<Jwk>>,
    fetches: AtomicUsize,
}

async fn start_issuer(keys: Vec<Jwk>) -> (Arc<Issuer>, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let issuer = Arc::new(Issuer {
        url: format!("http://{addr}"),
        keys: Mutex::new(keys),
        fetches: AtomicUsize::new(0),
    });
    let app = Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(|State(i): State<Arc<Issuer>>| async move {
                json_response(json!({
                    "issuer": i.url,
                    "jwks_uri": format!("{}/jwks", i.url),
                    "response_types_supported": ["code"],
                }))
            }),
        )
        .route(
            "/jwks",
            get(|State(i): State<Arc<Issuer>>| async move {
                i.fetches.fetch_add(1, Ordering::SeqCst);
                let set = JwkSet {
                    keys: i.keys.lock().clone(),
                };
                json_response(serde_json::to_value(set).unwrap())
            }),
        )
        .with_state(issuer.clone());
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(stopped.cancelled_owned())
            .await
            .unwrap();
    });
    (issuer, stop)
}

/// `gateway` over HTTP on a free loopback port, taking OAuth access
/// tokens as `oauth` says, until the returned token is cancelled.
async fn serve(gateway: Gateway, oauth: OAuthOptions) -> (SocketAddr, CancellationToken) {
    let shutdown = CancellationToken::new();
    let (addr, server) = gateway::bind_http(
        gateway,
        HttpOptions::new("127.0.0.1:0".parse().unwrap(), HttpAuth::OAuth(oauth)),
        shutdown.clone(),
    )
    .await
    .unwrap();
    tokio::spawn(server);
    (addr, shutdown)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims of a good token for `sub`, with `extra` merged in.
fn claims(issuer: &Issuer, sub: &str, extra: Value) -> Value {
    let mut c = json!({
        "iss": issuer.url,
        "aud": AUDIENCE,
        "sub": sub,
        "exp": now() + 300,
        "iat": now(),
        "scope": "tools",
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// A plain HTTP client (reqwest here is built without a default TLS
/// provider).
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .tls_backend_preconfigured(toolexec_http::tls::Tls::unused().config)
        .build()
        .unwrap()
}

/// POSTs an `initialize` with `token`: the status and the
/// `WWW-Authenticate` header.
async fn post(addr: SocketAddr, token: Option<&str>) -> (u16, String) {
    let mut req = http()
        .post(format!("http://{addr}/mcp"))
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}
        }));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    let challenge = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (r.status().as_u16(), challenge)
}

/// Unpadded base64url of `v`'s JSON (RFC 4648, section 5).
fn b64(v: &Value) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = v.to_string().into_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn json_response(v: Value) -> impl axum::response::IntoResponse {
    ([("content-type", "application/json")], v.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn access_tokens_are_checked_against_the_issuers_keys() {
    let first = Key::new("k1");
    let (issuer, stop_issuer) = start_issuer(vec![first.jwk.clone()]).await;
    let policy: PolicyConfig = serde_json::from_value(json!({"rules": [
        {"name": "alice", "effect": "allow", "subjects": ["alice"], "tools": ["math:*"]},
        {"name": "admins", "effect": "allow", "claims": {"groups": "admin"}},
    ]}))
    .unwrap();
    let exec = Exec::builder()
        .catalog(toolexec_builtins::catalog())
        .policy(Policy::new(&policy).unwrap())
        .build();
    let gateway = Gateway::new(
        exec,
        GatewayOptions {
            expose: Expose::All,
            ..GatewayOptions::default()
        },
    );
    let mut oauth = OAuthOptions::new(issuer.url.clone(), AUDIENCE);
    oauth.scopes = vec!["tools".into()];
    oauth.jwks_min_interval = Duration::from_millis(50);
    oauth.jwks_max_age = Duration::from_secs(2);
    let (addr, shutdown) = serve(gateway, oauth).await;
    assert_eq!(
        issuer.fetches.load(Ordering::SeqCst),
        1,
        "keys fetched at start"
    );

    // Metadata, public.
    let meta: Value = http()
        .get(format!(
            "http://{addr}/.well-known/oauth-protected-resource/mcp"
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(meta["resource"], AUDIENCE);
    assert_eq!(meta["authorization_servers"], json!([issuer.url]));
    assert_eq!(meta["scopes_supported"], json!(["tools"]));

    // No token: 401 naming the metadata and the scope.
    let (status, challenge) = post(addr, None).await;
    assert_eq!(status, 401);
    assert_eq!(
        challenge,
        "Bearer resource_metadata=\"https://toolexec.test/.well-known/oauth-protected-resource/mcp\", scope=\"tools\""
    );

    // Bad tokens: 401 invalid_token.
    let other = Key {
        kid: "k1".into(),
        ..Key::new("k1")
    };
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&claims(&issuer, "alice", json!({})))
    );
    let hmac = {
        // The public key's coordinates as an HMAC secret (alg confusion).
        let secret = serde_json::to_vec(&first.jwk).unwrap();
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("k1".into());
        encode(
            &header,
            &claims(&issuer, "alice", json!({})),
            &EncodingKey::from_secret(&secret),
        )
        .unwrap()
    };
    let bad = [
        (
            "expired",
            first.sign(&claims(&issuer, "alice", json!({"exp": now() - 3600}))),
        ),
        (
            "not yet valid",
            first.sign(&claims(&issuer, "alice", json!({"nbf": now() + 3600}))),
        ),
        (
            "wrong audience",
            first.sign(&claims(
                &issuer,
                "alice",
                json!({"aud": "https://elsewhere/mcp"}),
            )),
        ),
        (
            "wrong issuer",
            first.sign(&claims(
                &issuer,
                "alice",
                json!({"iss": "https://evil.example.com"}),
            )),
        ),
        (
            "no subject",
            first.sign(
                &json!({"iss": issuer.url, "aud": AUDIENCE, "exp": now() + 300, "scope": "tools"}),
            ),
        ),
        (
            "bad signature",
            other.sign(&claims(&issuer, "alice", json!({}))),
        ),
        (
            "unknown key",
            Key::new("k9").sign(&claims(&issuer, "alice", json!({}))),
        ),
        ("alg none", none),
        ("hmac with the public key", hmac),
        ("garbage", "not.a.token".into()),
    ];
    for (what, token) in &bad {
        let (status, challenge) = post(addr, Some(token)).await;
        assert_eq!(status, 401, "{what}");
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\", error_description=\""),
            "{what}: {challenge}"
        );
        assert!(
            challenge.contains("resource_metadata="),
            "{what}: {challenge}"
        );
        let why = match *what {
            "expired" => "ExpiredSignature",
            "not yet valid" => "ImmatureSignature",
            "wrong audience" => "InvalidAudience",
            "wrong issuer" => "InvalidIssuer",
            "no subject" => "Missing required claim: sub",
            "bad signature" => "InvalidSignature",
            "unknown key" => "no key k9",
            "alg none" => "unknown variant `none`",
            "hmac with the public key" => "algorithm HS256 is not accepted",
            _ => "malformed",
        };
        assert!(challenge.contains(why), "{what}: {challenge}");
    }
    // Unknown key ids fetch the set again, at most once per interval.
    assert!(
        issuer.fetches.load(Ordering::SeqCst) <= 3,
        "{}",
        issuer.fetches.load(Ordering::SeqCst)
    );

    // A valid token without the scope: 403 insufficient_scope.
    let (status, challenge) = post(
        addr,
        Some(&first.sign(&claims(&issuer, "alice", json!({"scope": "other"})))),
    )
    .await;
    assert_eq!(status, 403);
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"tools\""),
        "{challenge}"
    );

    // Valid tokens: the subject and claims are the caller the policy sees.
    let connect = |token: String| async move {
        let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
            .auth_header(token);
        ().serve(support::rmcp_http_transport(config))
            .await
            .unwrap()
    };
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.into_iter().map(|t| t.name.to_string()).collect()
    };
    let alice = connect(first.sign(&claims(&issuer, "alice", json!({})))).await;
    let alice_tools = names(alice.list_all_tools().await.unwrap());
    assert!(
        alice_tools.iter().all(|n| n.starts_with("math__")),
        "{alice_tools:?}"
    );
    assert!(!alice_tools.is_empty());
    let admin =
        connect(first.sign(&claims(&issuer, "bob", json!({"groups": ["dev", "admin"]})))).await;
    let admin_tools = names(admin.list_all_tools().await.unwrap());
    assert!(admin_tools.len() > alice_tools.len(), "{admin_tools:?}");
    let carol = connect(first.sign(&claims(&issuer, "carol", json!({})))).await;
    assert!(carol.list_all_tools().await.unwrap().is_empty());

    // Rotation: a new key is found without a restart...
    let second = Key::new("k2");
    issuer.keys.lock().push(second.jwk.clone());
    let (status, _) = post(
        addr,
        Some(&second.sign(&claims(&issuer, "alice", json!({})))),
    )
    .await;
    assert_eq!(status, 200);
    // ...and a retired one stops working once the set is refreshed.
    issuer
        .keys
        .lock()
        .retain(|k| k.common.key_id.as_deref() == Some("k2"));
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (status, challenge) = post(
        addr,
        Some(&first.sign(&claims(&issuer, "alice", json!({})))),
    )
    .await;
    assert_eq!(status, 401, "{challenge}");
    let (status, _) = post(
        addr,
        Some(&second.sign(&claims(&issuer, "alice", json!({})))),
    )
    .await;
    assert_eq!(status, 200);

    for client in [alice, admin, carol] {
        client.cancel().await.unwrap();
    }
    shutdown.cancel();
    stop_issuer.cancel();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_issuer_is_a_503_not_an_open_door() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mut oauth = OAuthOptions::new(dead.clone(), AUDIENCE);
    oauth.jwks_min_interval = Duration::from_millis(10);
    let (addr, shutdown) = serve(support::demo_gateway(Expose::Meta), oauth).await;
    let key = Key::new("k1");
    let token = key.sign(&json!({"iss": dead, "aud": AUDIENCE, "sub": "a", "exp": now() + 60}));
    let (status, _) = post(addr, Some(&token)).await;
    assert_eq!(status, 503);
    let (status, _) = post(addr, None).await;
    assert_eq!(status, 401);
    shutdown.cancel();
}

/// A verified token is remembered (later requests skip the signature
/// check), but never past its `exp`.
#[tokio::test(flavor = "multi_thread")]
async fn a_remembered_token_still_expires() {
    let key = Key::new("k1");
    let (issuer, stop_issuer) = start_issuer(vec![key.jwk.clone()]).await;
    let mut oauth = OAuthOptions::new(issuer.url.clone(), AUDIENCE);
    oauth.leeway = Duration::ZERO;
    let (addr, shutdown) = serve(support::demo_gateway(Expose::Meta), oauth).await;
    let token = key.sign(&claims(&issuer, "alice", json!({"exp": now() + 2})));
    assert_eq!(post(addr, Some(&token)).await.0, 200);
    assert_eq!(post(addr, Some(&token)).await.0, 200);
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let (status, challenge) = post(addr, Some(&token)).await;
    assert_eq!(status, 401, "{challenge}");
    assert!(challenge.contains("ExpiredSignature"), "{challenge}");
    shutdown.cancel();
    stop_issuer.cancel();
}
