//! The connection loop of one upstream: connect, import tools, follow
//! `list_changed`, notice the session ending, restart with backoff.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use rmcp::service::QuitReason;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use toolexec::Error;

use super::UpstreamStatus;
use super::session::{self, ConnectError, Handler, Running};
use super::shared::Shared;

/// How long one connection attempt (spawn or HTTP session, MCP handshake and
/// the first `tools/list`) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// First restart delay; it doubles after each failed attempt.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Longest restart delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A session that stayed up this long resets the backoff.
pub const HEALTHY_AFTER: Duration = Duration::from_secs(10);

/// How long closing a session (and stopping its child) may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a connected session ended.
enum SessionEnd {
    /// Shut down by the handle.
    Shutdown,
    /// A call found the (HTTP) session lost: reconnect at once.
    Lost(String),
    /// The server exited or closed the connection.
    Closed(String),
}

/// The delay before restart attempt `attempt` (1-based).
pub(crate) fn backoff(attempt: u32) -> Duration {
    let factor = 1u32 << attempt.saturating_sub(1).min(16);
    INITIAL_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF)
}

/// Runs until shutdown. With `first` set (not lazy), a failed first attempt
/// is reported there and ends the loop.
pub(crate) async fn supervise(
    shared: Arc<Shared>,
    mut reinit: mpsc::UnboundedReceiver<u64>,
    mut first: Option<oneshot::Sender<Result<(), Error>>>,
) {
    let mut attempt: u32 = 0;
    loop {
        let opened = tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => break,
            r = tokio::time::timeout(CONNECT_TIMEOUT, open_and_list(&shared)) => r.unwrap_or_else(|_| {
                Err(ConnectError::transient(format!(
                    "no MCP session within {}s",
                    CONNECT_TIMEOUT.as_secs()
                )))
            }),
        };
        let mut reinitializing = false;
        let (delay, last_error) = match opened {
            Ok((running, pid, listed)) => {
                let peer = running.peer().clone();
                let mut generation = 0;
                let mut tools = 0;
                // Registering inside the update makes the tools and the
                // connected status appear at once to callers.
                shared.conn.send_modify(|c| {
                    tools = shared.sync_tools(listed);
                    c.generation += 1;
                    generation = c.generation;
                    c.status = UpstreamStatus::Connected { tools };
                    c.peer = Some(peer);
                    c.pid = pid;
                    c.reinitializing = false;
                });
                tracing::info!(server = %shared.name, tools, "connected to MCP server");
                if let Some(tx) = first.take() {
                    let _ = tx.send(Ok(()));
                }
                let since = Instant::now();
                match serve(&shared, running, generation, &mut reinit).await {
                    SessionEnd::Shutdown => break,
                    SessionEnd::Lost(reason) => {
                        attempt = 1;
                        reinitializing = true;
                        (Duration::ZERO, reason)
                    }
                    SessionEnd::Closed(reason) => {
                        if since.elapsed() >= HEALTHY_AFTER {
                            attempt = 0;
                        }
                        attempt += 1;
                        (backoff(attempt), reason)
                    }
                }
            }
            Err(e) => {
                if let Some(tx) = first.take() {
                    let _ = tx.send(Err(Error::backend_unavailable(
                        shared.name.to_string(),
                        e.message,
                    )));
                    return;
                }
                if e.permanent {
                    tracing::error!(server = %shared.name, error = %e.message, "giving up on MCP server");
                    shared.conn.send_modify(|c| {
                        c.status = UpstreamStatus::Failed { reason: e.message };
                        c.reinitializing = false;
                    });
                    shared.shutdown.cancelled().await;
                    break;
                }
                attempt += 1;
                (backoff(attempt), e.message)
            }
        };
        tracing::warn!(
            server = %shared.name,
            attempt,
            delay_ms = delay.as_millis() as u64,
            error = %last_error,
            "MCP server disconnected; reconnecting"
        );
        shared.conn.send_modify(|c| {
            c.status = UpstreamStatus::Restarting {
                attempt,
                last_error,
            };
            c.peer = None;
            c.pid = None;
            c.reinitializing = reinitializing;
        });
        tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => break,
            _ = tokio::time::sleep(delay) => {}
        }
    }
    shared.stop();
    shared.conn.send_modify(|c| {
        c.status = UpstreamStatus::Failed {
            reason: "shut down".to_owned(),
        };
        c.peer = None;
        c.pid = None;
        c.reinitializing = false;
    });
}

/// Opens a session and lists the server's tools.
async fn open_and_list(
    shared: &Arc<Shared>,
) -> Result<(Running, Option<u32>, Vec<Map<String, Value>>), ConnectError> {
    let handler = Handler {
        server: shared.name.clone(),
        router: shared.router.clone(),
        relay: shared.relay,
        relay_timeout: shared.call_timeout,
    };
    let (mut running, pid) = session::open(
        &shared.endpoint,
        handler,
        shared.max_concurrency,
        &shared.era,
    )
    .await?;
    match session::list_all_tools(running.peer()).await {
        Ok(listed) => Ok((running, pid, listed)),
        Err(message) => {
            let _ = running.close_with_timeout(CLOSE_TIMEOUT).await;
            Err(ConnectError::transient(message))
        }
    }
}

/// Serves one connected session until it ends.
async fn serve(
    shared: &Arc<Shared>,
    running: Running,
    generation: u64,
    reinit: &mut mpsc::UnboundedReceiver<u64>,
) -> SessionEnd {
    let peer = running.peer().clone();
    let mut stop = Some(running.cancellation_token());
    let mut waiting = pin!(running.waiting());
    let http = shared.endpoint.is_http();
    loop {
        tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => {
                if let Some(ct) = stop.take() {
                    ct.cancel();
                }
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, &mut waiting).await;
                return SessionEnd::Shutdown;
            }
            quit = &mut waiting => {
                let what = if http { "the HTTP session ended" } else { "the server process exited or closed stdout" };
                let reason = match quit {
                    Ok(QuitReason::Closed) => what.to_owned(),
                    Ok(other) => format!("{what} ({other:?})"),
                    Err(e) => format!("{what} (session task failed: {e})"),
                };
                return SessionEnd::Closed(reason);
            }
            Some(lost) = reinit.recv() => {
                if lost != generation {
                    continue;
                }
                let reason = "the server lost the HTTP session; re-initializing".to_owned();
                // Calls from now on wait for the new session.
                shared.conn.send_modify(|c| {
                    c.status = UpstreamStatus::Restarting { attempt: 1, last_error: reason.clone() };
                    c.peer = None;
                    c.reinitializing = true;
                });
                if let Some(ct) = stop.take() {
                    ct.cancel();
                }
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, &mut waiting).await;
                return SessionEnd::Lost(reason);
            }
            _ = shared.router.tools_changed.notified() => {
                let listed = tokio::select! {
                    r = tokio::time::timeout(CONNECT_TIMEOUT, session::list_all_tools(&peer)) => r,
                    _ = shared.shutdown.cancelled() => continue,
                };
                match listed {
                    Ok(Ok(raw)) => {
                        let tools = shared.sync_tools(raw);
                        shared.conn.send_modify(|c| {
                            if c.generation == generation {
                                c.status = UpstreamStatus::Connected { tools };
                            }
                        });
                    }
                    Ok(Err(e)) => tracing::warn!(server = %shared.name, error = %e, "re-listing tools failed"),
                    Err(_) => tracing::warn!(server = %shared.name, "re-listing tools timed out"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        assert_eq!(backoff(1), Duration::from_millis(100));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(5), Duration::from_millis(1600));
        assert_eq!(
            backoff(9),
            Duration::from_secs(25) + Duration::from_millis(600)
        );
        assert_eq!(backoff(10), MAX_BACKOFF);
        assert_eq!(backoff(1000), MAX_BACKOFF);
    }
}
