//! The accept loop of the HTTP gateway: HTTP/1.1 connections served by
//! hyper with a header-read timeout (which also closes idle keep-alive
//! connections), at most [`HttpLimits::max_connections`] at once; a
//! connection over the limit is answered `503` and closed.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Response, StatusCode, header};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::limits::HttpLimits;

/// Connections over the limit answered `503` at once; beyond these they
/// are closed without an answer.
const OVERFLOW_CONNECTIONS: usize = 64;
/// How long an over-the-limit connection has to send its request headers
/// before it is closed without an answer.
const OVERFLOW_HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long connections get to finish after shutdown, before the server
/// returns anyway (dropping them).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Pause after a failed `accept` (such as `EMFILE`), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `router` on `listener` until `shutdown` is cancelled, then waits
/// (up to [`SHUTDOWN_GRACE`]) for open connections to finish.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let overflow = Arc::new(Semaphore::new(OVERFLOW_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let mut busy = http1::Builder::new();
    busy.timer(TokioTimer::new())
        .header_read_timeout(OVERFLOW_HEADER_TIMEOUT)
        .keep_alive(false);
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        if let Ok(permit) = slots.clone().try_acquire_owned() {
            let service = TowerToHyperService::new(router.clone());
            let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
                }
                drop(permit);
            });
        } else if let Ok(permit) = overflow.clone().try_acquire_owned() {
            let conn = busy.serve_connection(
                TokioIo::new(stream),
                hyper::service::service_fn(|_| async { Ok::<_, Infallible>(at_capacity()) }),
            );
            tokio::spawn(async move {
                let _ = conn.await;
                drop(permit);
            });
        } else {
            // Past even the overflow answers: closed unanswered.
            drop(stream);
        }
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("HTTP connections still open after the shutdown grace period; dropped");
    }
}

/// The answer to a connection over [`HttpLimits::max_connections`].
fn at_capacity() -> Response<Body> {
    let mut response = Response::new(Body::from(
        "Service Unavailable: too many connections (gateway.max_connections); retry later\n",
    ));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
