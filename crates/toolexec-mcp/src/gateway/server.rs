//! The [`Gateway`] value: state shared by every connection (the executor,
//! the options, the code runner, the run slots, the clients to notify) and
//! the per-connection [`Session`].

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use parking_lot::Mutex;
use rmcp::{Peer, RoleServer};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use toolexec::Exec;
#[cfg(feature = "code")]
use toolexec_code::{CodeExecutor, CodeRunner};

use super::limits::RunSlots;
use super::options::GatewayOptions;
#[cfg(feature = "upstream")]
use super::passthrough::Passthrough;
use super::session::Session;

/// An MCP server over an [`Exec`]. Implements [`rmcp::ServerHandler`], so it
/// can be served over any rmcp transport (`gateway.serve(transport)`), or
/// with [`serve_stdio`](super::serve_stdio) and
/// [`serve_http`](super::serve_http).
///
/// Cheap to clone. One value serves one connection at a time as far as
/// per-connection state goes (the `logging/setLevel` level);
/// [`serve_http`](super::serve_http) gives each HTTP session its own.
#[derive(Clone)]
pub struct Gateway {
    pub(super) shared: Arc<Shared>,
    pub(super) session: Arc<Session>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

/// What the gateway relays from upstream servers besides tools (nothing
/// without the `upstream` feature).
#[cfg(feature = "upstream")]
type Relayed = Arc<Passthrough>;
#[cfg(not(feature = "upstream"))]
#[derive(Default)]
struct Relayed {
    _none: (),
}

/// State shared by every connection of one gateway.
pub(super) struct Shared {
    pub(super) exec: Exec,
    pub(super) options: GatewayOptions,
    /// Runs `execute_code` scripts where the code profile says, at most
    /// `code.max_concurrent` at once over every connection.
    #[cfg(feature = "code")]
    pub(super) code: Arc<dyn CodeExecutor>,
    /// Bounds tool runs over every connection.
    pub(super) runs: RunSlots,
    /// Initialized clients, to notify of list changes.
    pub(super) peers: Arc<Mutex<Vec<Peer<RoleServer>>>>,
    /// The upstream servers whose resources, prompts and completion are
    /// relayed.
    #[cfg(feature = "upstream")]
    pub(super) passthrough: Arc<Passthrough>,
    /// Catalog changes since the gateway was created, until the watcher
    /// task takes the receiver.
    pub(super) changes: Mutex<Option<broadcast::Receiver<toolexec::CatalogEvent>>>,
    pub(super) watcher_started: AtomicBool,
    /// Tools already logged as not published directly.
    pub(super) unpublished: Mutex<HashSet<String>>,
    /// Stops the watcher when the last clone of the gateway goes.
    pub(super) stop: CancellationToken,
    /// Long calls become tasks here.
    pub(super) tasks: super::tasks::TaskStore,
    /// Bounds the `subscriptions/listen` streams held open over every
    /// connection ([`super::notify::MAX_LISTENERS`]).
    pub(super) listeners: Arc<tokio::sync::Semaphore>,
    /// Watches started as listeners were acknowledged, oldest first.
    pub(super) pending_listens: Mutex<std::collections::VecDeque<super::notify::Watch>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Gateway {
    /// A gateway over `exec`.
    pub fn new(exec: Exec, options: GatewayOptions) -> Self {
        Self::build(exec, options, Relayed::default())
    }

    /// A gateway over `exec` that also relays the resources, resource
    /// templates, subscriptions, prompts and completion of `upstreams` (whose
    /// tools are in `exec`'s catalog), as a client of those servers would
    /// see them.
    #[cfg(feature = "upstream")]
    pub fn with_upstreams(
        exec: Exec,
        options: GatewayOptions,
        upstreams: Vec<Arc<crate::upstream::Upstream>>,
    ) -> Self {
        let passthrough = Passthrough::new(upstreams, &options.unprefixed, exec.clone());
        Self::build(exec, options, Arc::new(passthrough))
    }

    fn build(
        exec: Exec,
        options: GatewayOptions,
        #[cfg_attr(not(feature = "upstream"), allow(unused_variables))] passthrough: Relayed,
    ) -> Self {
        let changes = options.expose.direct().then(|| exec.catalog().subscribe());
        #[cfg(feature = "code")]
        let code: Arc<dyn CodeExecutor> = match &options.code_executor {
            Some(executor) => executor.clone(),
            None => Arc::new(CodeRunner::new(
                exec.clone(),
                options.code.profile,
                options.runtimes.clone(),
                options.code.max_concurrent,
            )),
        };
        let runs = RunSlots::new(options.runs);
        let tasks = super::tasks::TaskStore::new(options.tasks.clone());
        Gateway {
            shared: Arc::new(Shared {
                exec,
                options,
                #[cfg(feature = "code")]
                code,
                runs,
                peers: Arc::default(),
                #[cfg(feature = "upstream")]
                passthrough,
                changes: Mutex::new(changes),
                watcher_started: AtomicBool::new(false),
                unpublished: Mutex::default(),
                stop: CancellationToken::new(),
                tasks,
                listeners: Arc::new(tokio::sync::Semaphore::new(super::notify::MAX_LISTENERS)),
                pending_listens: Mutex::default(),
            }),
            session: Session::new(),
        }
    }

    /// The executor.
    pub fn exec(&self) -> &Exec {
        &self.shared.exec
    }

    /// The options.
    pub fn options(&self) -> &GatewayOptions {
        &self.shared.options
    }

    /// Tool runs in flight and waiting for a slot, over every client (the
    /// bound of [`GatewayOptions::runs`]), for metrics.
    pub fn run_load(&self) -> (usize, usize) {
        self.shared.runs.load()
    }

    /// A copy sharing the executor and notifications but with fresh
    /// per-connection state.
    pub fn for_new_connection(&self) -> Self {
        Gateway {
            shared: self.shared.clone(),
            session: Session::new(),
        }
    }
}
