//! Per-connection state, and which log messages the client of one request
//! wants ([`LogGate`]): its session's level (`logging/setLevel`) or, from a
//! 2026-07-28 client, the level its request names.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use rmcp::RoleServer;
// MCP logging is deprecated by SEP-2577 (2026-07-28) but current in the
// 2025-11-25 revision the gateway speaks; chunks are relayed as log messages.
#[allow(deprecated)]
use rmcp::model::LoggingLevel;
use rmcp::service::RequestContext;

/// Session and listener ids: unique within the process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// An id no session or other listener has, for a 2026-07-28 listener's
/// resource subscriptions.
#[cfg(feature = "upstream")]
pub(super) fn listener_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Per-connection state.
pub(super) struct Session {
    /// Unique within the process: names the connection's subscriptions.
    #[cfg_attr(not(feature = "upstream"), allow(dead_code))]
    pub(super) id: u64,
    /// Lowest log level sent, as an index into [`LEVELS`].
    min_level: AtomicU8,
    /// Who is on the other end when the transport says so without
    /// per-request credentials (stdio: the local user).
    principal: std::sync::OnceLock<&'static str>,
    /// The transport writes large results kept by an upstream's transport
    /// in place of their placeholders (`crate::verbatim`).
    verbatim: AtomicBool,
}

#[allow(deprecated)]
impl Session {
    /// A new connection's state: log messages from `info` up.
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Session {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            min_level: AtomicU8::new(level_index(LoggingLevel::Info)),
            principal: std::sync::OnceLock::new(),
            verbatim: AtomicBool::new(false),
        })
    }

    /// Sets the connection's principal (once).
    pub(super) fn set_principal(&self, principal: &'static str) {
        let _ = self.principal.set(principal);
    }

    /// The connection's principal, when its transport set one.
    pub(super) fn principal(&self) -> Option<&'static str> {
        self.principal.get().copied()
    }

    /// Says the connection's transport releases verbatim results.
    #[cfg(feature = "upstream")]
    pub(super) fn set_verbatim(&self) {
        self.verbatim.store(true, Ordering::Relaxed);
    }

    /// Whether large results may be relayed verbatim to this connection.
    #[cfg_attr(not(feature = "upstream"), allow(dead_code))]
    pub(super) fn verbatim(&self) -> bool {
        self.verbatim.load(Ordering::Relaxed)
    }

    /// `logging/setLevel`: send log messages from `level` up.
    pub(super) fn set_level(&self, level: LoggingLevel) {
        self.min_level.store(level_index(level), Ordering::Relaxed);
    }

    /// The lowest level of log message sent.
    fn level(&self) -> u8 {
        self.min_level.load(Ordering::Relaxed)
    }
}

/// Which log messages the client of one request wants.
#[derive(Clone)]
pub(super) enum LogGate {
    /// A client of a revision with sessions: the level its session set
    /// (`logging/setLevel`; `info` until it sets one), read as each message
    /// comes.
    Session(Arc<Session>),
    /// A 2026-07-28 client: the level its request names in `_meta`
    /// (`io.modelcontextprotocol/logLevel`), as an index into [`LEVELS`];
    /// none named, no log messages (SEP-2575: a client opts in per request).
    Request(Option<u8>),
}

#[allow(deprecated)]
impl LogGate {
    /// The gate of the request `context`, on `session`.
    pub(super) fn of(context: &RequestContext<RoleServer>, session: &Arc<Session>) -> Self {
        if super::downstream::answers_inputs_itself(context) {
            LogGate::Request(context.meta.log_level().map(level_index))
        } else {
            LogGate::Session(session.clone())
        }
    }

    /// The lowest level of log message the client wants; `None`: none.
    pub(super) fn lowest(&self) -> Option<LoggingLevel> {
        let index = match self {
            LogGate::Session(session) => session.level(),
            LogGate::Request(level) => (*level)?,
        };
        LEVELS.get(usize::from(index)).copied()
    }

    /// True when a log message at `level` is sent.
    pub(super) fn wants(&self, level: LoggingLevel) -> bool {
        self.lowest()
            .is_some_and(|lowest| level_index(lowest) <= level_index(level))
    }
}

#[allow(deprecated)] // MCP logging: deprecated by SEP-2577, current in 2025-11-25.
const LEVELS: [LoggingLevel; 8] = [
    LoggingLevel::Debug,
    LoggingLevel::Info,
    LoggingLevel::Notice,
    LoggingLevel::Warning,
    LoggingLevel::Error,
    LoggingLevel::Critical,
    LoggingLevel::Alert,
    LoggingLevel::Emergency,
];

#[allow(deprecated)]
fn level_index(level: LoggingLevel) -> u8 {
    LEVELS.iter().position(|l| *l == level).unwrap_or(1) as u8
}
