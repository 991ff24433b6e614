//! A listener serving only `/metrics` (`--metrics ADDR`), for processes
//! without an HTTP gateway to mount it on (stdio serving, workers).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::routing::get;

use crate::Metrics;

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics` answering a scrape of `metrics`: what [`serve_metrics`]
/// serves, and what an HTTP gateway mounts behind its authentication.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.render()) }
        }),
    )
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
    let app = metrics_router(metrics);
    let serve = async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
    };
    Ok((bound, serve))
}
