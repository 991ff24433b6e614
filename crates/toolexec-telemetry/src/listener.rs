//! A listener serving only `/metrics` (`--metrics ADDR`), for processes
//! without an HTTP gateway to mount it on (stdio serving, workers).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::Metrics;

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics` answering a scrape of `metrics`: what [`serve_metrics`]
/// serves, and what an HTTP gateway mounts behind its authentication.
/// With `loopback_hosts` (a listener on a loopback address) a request
/// whose `Host` is not `localhost`, `127.0.0.1` or `[::1]` gets `403`, so
/// a web page cannot read the metrics through DNS rebinding.
pub fn metrics_router(metrics: Arc<Metrics>, loopback_hosts: bool) -> Router {
    Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| {
            let metrics = metrics.clone();
            async move {
                if loopback_hosts && !loopback_host(&headers) {
                    return (
                        StatusCode::FORBIDDEN,
                        "Forbidden: Host is not a loopback name\n",
                    )
                        .into_response();
                }
                ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.render()).into_response()
            }
        }),
    )
}

fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(name, "localhost" | "127.0.0.1" | "[::1]")
}

/// Binds `addr` and serves `GET /metrics` until `shutdown` resolves;
/// returns the bound address and the serving future.
pub async fn serve_metrics(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(
    SocketAddr,
    impl std::future::Future<Output = std::io::Result<()>> + Send,
)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = metrics_router(metrics, bound.ip().is_loopback());
    let serve = async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
    };
    Ok((bound, serve))
}
