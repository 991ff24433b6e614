//! What checking an OAuth access token costs the gateway per request
//! (issue 13's budget, with a policy decision: 20 µs): an ES256 JWT
//! through [`ResourceServer::authenticate`], remembered (a client's later
//! requests: a SHA-256 of the token and a map lookup) and verified in full
//! (`cache_tokens = 0`: the signature, claims and key lookup, as for a
//! token's first request). The key set comes from a loopback HTTP server,
//! fetched once before measuring.
//!
//! ```text
//! cargo bench -p toolexec-mcp --bench oauth
//! ```

use std::hint::black_box;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::http::HeaderValue;
use axum::routing::get;
use criterion::{Criterion, criterion_group, criterion_main};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::json;
use toolexec_mcp::gateway::{OAuthOptions, ResourceServer};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let der = toolexec_testkit::tls::p256_pkcs8_der();
    let key = EncodingKey::from_ec_der(&der);
    let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
    jwk.common.key_id = Some("k1".into());
    let set = serde_json::to_string(&JwkSet { keys: vec![jwk] }).unwrap();
    let issuer = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new().route("/jwks", get(move || std::future::ready(set.clone())));
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    });
    let audience = "https://toolexec.test/mcp";
    let server = |cache_tokens: usize| {
        let mut o = OAuthOptions::new(issuer.clone(), audience);
        o.jwks_uri = Some(format!("{issuer}/jwks"));
        o.scopes = vec!["tools".into()];
        o.cache_tokens = cache_tokens;
        rt.block_on(ResourceServer::new(o)).unwrap()
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("k1".into());
    let claims = json!({
        "iss": issuer, "aud": audience, "sub": "alice", "exp": now + 3600, "iat": now,
        "scope": "tools read", "groups": ["dev", "admin"], "email": "alice@example.com",
    });
    let token = encode(&header, &claims, &key).unwrap();
    let value = HeaderValue::from_str(&format!("Bearer {token}")).unwrap();

    let mut group = c.benchmark_group("oauth");
    group.measurement_time(Duration::from_secs(5));
    let remembered = server(10_000);
    group.bench_function("es256/remembered", |b| {
        b.iter(|| {
            let caller = rt.block_on(remembered.authenticate(Some(black_box(&value))));
            black_box(caller.unwrap())
        })
    });
    let full = server(0);
    group.bench_function("es256/verified", |b| {
        b.iter(|| {
            let caller = rt.block_on(full.authenticate(Some(black_box(&value))));
            black_box(caller.unwrap())
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
