//! The server's connections: a cap on how many are open (beyond it, a
//! `503 busy` and close), a header-read timeout, an idle timeout, one
//! request per connection, a small read buffer, and a gauge of the bytes
//! read from connections whose request is not authenticated yet.

use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower_service::Service;

use crate::error::{ApiError, ApiErrorCode, ApiErrorEnvelope};
use crate::server::{LocalAddr, ServerState};

/// Largest read buffer of a connection (hyper's minimum is 8 KiB). It
/// bounds a request head, and so what a connection without the key can
/// make the server hold: at most this many bytes are read before the
/// signature in the head is checked.
pub const READ_BUFFER_BYTES: usize = 16 << 10;

/// One connection's share of the server's gauges: activity for the idle
/// timeout, and bytes read before its request was authenticated. Handed to
/// the handlers as a request extension.
#[derive(Clone)]
pub(crate) struct ConnMeter(Arc<MeterInner>);

struct MeterInner {
    state: Arc<ServerState>,
    start: Instant,
    /// Milliseconds since `start` of the last read or write.
    last_activity_ms: AtomicU64,
    /// `Some(bytes read)` until the request is authenticated.
    unauthenticated: Mutex<Option<u64>>,
}

impl ConnMeter {
    fn new(state: Arc<ServerState>) -> Self {
        ConnMeter(Arc::new(MeterInner {
            state,
            start: Instant::now(),
            last_activity_ms: AtomicU64::new(0),
            unauthenticated: Mutex::new(Some(0)),
        }))
    }

    fn touch(&self) {
        let ms = self.0.start.elapsed().as_millis() as u64;
        self.0.last_activity_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn on_read(&self, n: usize) {
        self.touch();
        let mut unauthenticated = self.0.unauthenticated.lock();
        if let Some(read) = unauthenticated.as_mut() {
            *read += n as u64;
            let counters = &self.0.state.counters;
            let now = counters
                .unauthenticated_bytes
                .fetch_add(n as u64, Ordering::Relaxed)
                + n as u64;
            counters
                .unauthenticated_bytes_peak
                .fetch_max(now, Ordering::Relaxed);
        }
    }

    /// The request on this connection is authenticated: its bytes leave the
    /// unauthenticated gauge, and later reads are not counted there.
    pub(crate) fn authenticated(&self) {
        if let Some(read) = self.0.unauthenticated.lock().take() {
            self.0
                .state
                .counters
                .unauthenticated_bytes
                .fetch_sub(read, Ordering::Relaxed);
        }
    }

    fn last_activity(&self) -> Instant {
        self.0.start + Duration::from_millis(self.0.last_activity_ms.load(Ordering::Relaxed))
    }
}

impl Drop for MeterInner {
    fn drop(&mut self) {
        if let Some(read) = self.unauthenticated.get_mut().take() {
            self.state
                .counters
                .unauthenticated_bytes
                .fetch_sub(read, Ordering::Relaxed);
        }
    }
}

/// A socket whose reads and writes feed a [`ConnMeter`].
struct MeteredIo {
    inner: TcpStream,
    meter: ConnMeter,
}

impl MeteredIo {
    fn tcp(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(&mut self.inner)
    }
}

impl AsyncRead for MeteredIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.tcp().poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.meter.on_read(read);
        }
        polled
    }
}

impl AsyncWrite for MeteredIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = self.tcp().poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.meter.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = self.tcp().poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.meter.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tcp().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tcp().poll_shutdown(cx)
    }
}

/// Counts a connection as open while it lives.
struct OpenGuard(Arc<ServerState>);

impl OpenGuard {
    fn new(state: Arc<ServerState>) -> Self {
        state
            .counters
            .connections_open
            .fetch_add(1, Ordering::Relaxed);
        OpenGuard(state)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0
            .counters
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts connections on `listener` until `shutdown` resolves, then lets
/// the connections not yet upgraded finish their request (at most
/// [`crate::ServerConfig::cleanup_grace`]).
pub(crate) async fn serve(
    state: Arc<ServerState>,
    router: Router,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let capacity = state.config.max_connections.clamp(1, u32::MAX as usize);
    let slots = Arc::new(Semaphore::new(capacity));
    let (stop, stopped) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _peer)) => tcp,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                tokio::spawn(connection(
                    state.clone(),
                    router.clone(),
                    tcp,
                    slot,
                    stopped.clone(),
                ));
            }
            Err(_) => refuse(&state, tcp),
        }
    }
    drop(listener);
    let _ = stop.send(());
    let _ = tokio::time::timeout(
        state.config.cleanup_grace,
        slots.acquire_many(capacity as u32),
    )
    .await;
    Ok(())
}

/// An accept error: per-connection ones are skipped; others (out of file
/// descriptors) pause the loop briefly instead of spinning.
async fn accept_failed(e: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::warn!(error = %e, "runtime server: accept failed");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Serves one request on `tcp` under the header-read and idle timeouts.
/// An upgraded run leaves this function (and frees its slot) with its
/// connection; runs are bounded by `max_concurrent_runs`.
async fn connection(
    state: Arc<ServerState>,
    router: Router,
    tcp: TcpStream,
    _slot: OwnedSemaphorePermit,
    mut stopped: watch::Receiver<()>,
) {
    let _open = OpenGuard::new(state.clone());
    let _ = tcp.set_nodelay(true);
    let local = tcp.local_addr().ok();
    let meter = ConnMeter::new(state.clone());
    let io = TokioIo::new(MeteredIo {
        inner: tcp,
        meter: meter.clone(),
    });
    let for_requests = meter.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(for_requests.clone());
        if let Some(local) = local {
            request
                .extensions_mut()
                .insert(ConnectInfo(LocalAddr(local)));
        }
        let mut router = router.clone();
        async move { router.call(request.map(Body::new)).await }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(state.config.header_timeout)
        .keep_alive(false)
        .max_buf_size(READ_BUFFER_BYTES);
    let mut conn = pin!(builder.serve_connection(io, service).with_upgrades());
    let idle = state.config.idle_timeout;
    let mut stopping = false;
    loop {
        let wake = tokio::time::Instant::from_std(meter.last_activity() + idle);
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    if e.is_timeout() {
                        state.counters.connections_timed_out.fetch_add(1, Ordering::Relaxed);
                    }
                    tracing::debug!(error = %e, "runtime server: connection ended");
                }
                return;
            }
            () = tokio::time::sleep_until(wake) => {
                if meter.last_activity().elapsed() >= idle {
                    state.counters.connections_timed_out.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(idle_ms = idle.as_millis() as u64, "runtime server: idle connection closed");
                    return;
                }
            }
            _ = stopped.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Answers a connection beyond the cap with `503 busy` and closes it. The
/// answer is tiny and the socket's send buffer empty, so one non-blocking
/// write sends it whole; nothing of the request is read.
fn refuse(state: &ServerState, tcp: TcpStream) {
    state
        .counters
        .connections_refused
        .fetch_add(1, Ordering::Relaxed);
    state.counters.rejected.fetch_add(1, Ordering::Relaxed);
    let error = ApiError::new(
        ApiErrorCode::Busy,
        None,
        format!(
            "busy: {} connections are open; retry later",
            state.config.max_connections
        ),
    );
    tracing::warn!(code = error.code.as_str(), message = %error.message, "remote connection refused");
    let body = serde_json::to_string(&ApiErrorEnvelope { error }).unwrap_or_default();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tcp.try_write(answer.as_bytes());
}
