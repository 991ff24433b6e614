//! One MCP client session with an upstream server: the transport (a spawned
//! child over stdio, or streamable HTTP), the rmcp client handler
//! (list changes, resource updates), and tool listing.

use std::collections::HashMap;
use std::sync::Arc;

#[allow(deprecated)] // sampling and roots: deprecated by SEP-2577, current in 2025-11-25.
use rmcp::model::{
    ClientConfig, ClientRequest, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, Implementation, ListRootsResult, ListToolsRequest,
    PaginatedRequestParams, ProtocolVersion, ResourceUpdatedNotificationParam, ServerResult,
};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt, NotificationContext,
    RequestContext, RunningService,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, InsufficientScopeError, StreamableHttpClient,
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient};
use serde_json::{Map, Value};
use tokio::io::AsyncBufReadExt;
use tokio::sync::OnceCell;
use toolexec::Secret;

use super::UpstreamTransport;
use super::child::ChildStdio;
use super::oauth::{Authorizer, Exchanger, SignedIn, UpstreamOAuth};
use super::passthrough::UpstreamNotice;
use super::routing::{InOrder, Router};
use toolexec_http::tls::Tls;

use crate::verbatim::Wanted;

/// Most `tools/list` pages followed before giving up on a server whose
/// cursors never end.
const MAX_LIST_PAGES: usize = 1000;

/// The transport, validated and ready to connect with, secrets still wrapped.
#[derive(Debug, Clone)]
pub(crate) enum Endpoint {
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, Secret)>,
        inherit_env: Vec<String>,
        cwd: Option<std::path::PathBuf>,
    },
    Http {
        url: String,
        /// Header values are marked sensitive, so `Debug` redacts them.
        headers: HashMap<http::HeaderName, http::HeaderValue>,
        bearer_token: Option<Secret>,
        /// The TLS configuration (for `http://`, one that is never used).
        tls: Box<Tls>,
        /// OAuth sign-in: the settings, and the authorizer the sessions of
        /// this server share (made by the first connection attempt).
        oauth: Option<Arc<(UpstreamOAuth, OnceCell<Arc<Authorizer>>)>>,
        /// Token exchange for calls made as the caller.
        exchange: Option<Arc<Exchanger>>,
    },
    /// The HTTP+SSE transport of revision 2024-11-05.
    Sse {
        url: String,
        /// Header values are marked sensitive, as for `Http`; the bearer
        /// token is among them.
        headers: HashMap<http::HeaderName, http::HeaderValue>,
        tls: Box<Tls>,
    },
}

impl Endpoint {
    /// Validates the configured transport. Errors never quote secret values.
    pub(crate) fn from_config(
        server: &str,
        transport: &UpstreamTransport,
    ) -> Result<Self, toolexec::Error> {
        match transport {
            UpstreamTransport::Stdio {
                command,
                args,
                env,
                inherit_env,
                cwd,
            } => {
                super::env::check_patterns(inherit_env)?;
                if command.trim().is_empty() {
                    return Err(toolexec::Error::invalid_request(
                        "transport.command",
                        "is empty",
                    ));
                }
                Ok(Endpoint::Stdio {
                    command: command.clone(),
                    args: args.clone(),
                    env: env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    inherit_env: inherit_env.clone(),
                    cwd: cwd.clone(),
                })
            }
            UpstreamTransport::Http {
                url,
                headers,
                bearer_token,
                tls,
                oauth,
                token_exchange,
            } => {
                if let Some(oauth) = oauth {
                    oauth.check()?;
                    if bearer_token.is_some() {
                        return Err(toolexec::Error::invalid_request(
                            "transport.oauth",
                            "OAuth and bearer_token are alternatives: set one",
                        ));
                    }
                }
                if token_exchange.is_some()
                    && let Some(name) = headers
                        .keys()
                        .find(|h| h.eq_ignore_ascii_case("authorization"))
                {
                    // Headers go on every request: a configured credential
                    // would ride along with each caller's own.
                    return Err(toolexec::Error::invalid_request(
                        format!("transport.headers.{name}"),
                        "not with token_exchange: each call carries the caller's token \
                         (use bearer_token or oauth for the session's own)",
                    ));
                }
                let (tls, map) = http_parts(server, url, headers, tls)?;
                check_bearer(bearer_token.as_ref())?;
                Ok(Endpoint::Http {
                    url: url.trim().to_owned(),
                    headers: map,
                    bearer_token: bearer_token.clone(),
                    oauth: oauth.clone().map(|o| Arc::new((o, OnceCell::new()))),
                    exchange: match token_exchange {
                        Some(settings) => Some(Arc::new(Exchanger::new(
                            server,
                            url.trim(),
                            settings,
                            tls.config.clone(),
                        )?)),
                        None => None,
                    },
                    tls,
                })
            }
            UpstreamTransport::Sse {
                url,
                headers,
                bearer_token,
                tls,
            } => {
                let (tls, mut map) = http_parts(server, url, headers, tls)?;
                if let Some(token) = check_bearer(bearer_token.as_ref())? {
                    map.insert(http::header::AUTHORIZATION, token);
                }
                Ok(Endpoint::Sse {
                    url: url.trim().to_owned(),
                    headers: map,
                    tls,
                })
            }
        }
    }

    /// Streamable HTTP, whose sessions can be lost and re-initialized.
    pub(crate) fn is_http(&self) -> bool {
        matches!(self, Endpoint::Http { .. })
    }

    /// The token exchange of a server that acts as the caller.
    pub(crate) fn exchange(&self) -> Option<&Exchanger> {
        match self {
            Endpoint::Http {
                exchange: Some(e), ..
            } => Some(e),
            _ => None,
        }
    }

    /// For an OAuth server whose request `e` was refused (`401`, or `403
    /// insufficient_scope`), what its operator should do.
    pub(crate) fn auth_refusal(&self, e: &(dyn std::error::Error + 'static)) -> Option<String> {
        let Endpoint::Http {
            oauth: Some(oauth), ..
        } = self
        else {
            return None;
        };
        let authorizer = oauth.1.get()?;
        auth_refusal_in(e).map(|challenge| authorizer.refusal(challenge.as_deref()))
    }
}

/// The TLS setup of `url` and the configured headers, checked.
fn http_parts(
    server: &str,
    url: &str,
    headers: &std::collections::BTreeMap<String, Secret>,
    tls: &super::TlsOptions,
) -> Result<(Box<Tls>, HashMap<http::HeaderName, http::HeaderValue>), toolexec::Error> {
    let lower = url.trim().to_ascii_lowercase();
    let tls = Box::new(if lower.starts_with("https://") {
        tls.client_config(server)?
    } else if lower.starts_with("http://") {
        if !tls.is_empty() {
            return Err(toolexec::Error::invalid_request(
                "transport.tls",
                "ca_file, client_cert and client_key are for https:// URLs",
            ));
        }
        Tls::unused()
    } else {
        return Err(toolexec::Error::invalid_request(
            "transport.url",
            "must be an http:// or https:// URL",
        ));
    });
    let mut map = HashMap::with_capacity(headers.len());
    for (name, value) in headers {
        let header_name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            toolexec::Error::invalid_request(
                format!("transport.headers.{name}"),
                "not a valid HTTP header name",
            )
        })?;
        let mut header_value = http::HeaderValue::from_str(value.expose()).map_err(|_| {
            toolexec::Error::invalid_request(
                format!("transport.headers.{name}"),
                "the value is not a valid HTTP header value (value not shown)",
            )
        })?;
        header_value.set_sensitive(true);
        map.insert(header_name, header_value);
    }
    Ok((tls, map))
}

/// The `Authorization` value of a bearer token (marked sensitive), if one
/// is set; refused when it cannot be a header value.
fn check_bearer(token: Option<&Secret>) -> Result<Option<http::HeaderValue>, toolexec::Error> {
    let Some(token) = token else {
        return Ok(None);
    };
    let mut value =
        http::HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
            toolexec::Error::invalid_request(
                "transport.bearer_token",
                "not valid in an HTTP header (value not shown)",
            )
        })?;
    value.set_sensitive(true);
    Ok(Some(value))
}

/// The rmcp client handler of one session.
#[derive(Debug, Clone)]
pub(crate) struct Handler {
    pub(crate) server: Arc<str>,
    pub(crate) router: Arc<Router>,
    /// What the server may ask the client of a call.
    pub(crate) relay: super::ClientRelay,
    /// The longest a relayed request waits.
    pub(crate) relay_timeout: std::time::Duration,
}

impl Handler {
    /// `notifications/tools/list_changed`: the tools are listed again.
    pub(super) fn tools_changed(&self) {
        tracing::debug!(server = %self.server, "tools/list_changed");
        self.router.tools_changed.notify_one();
    }
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed();
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.router
            .publish(UpstreamNotice::ResourceUpdated { uri: params.uri });
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.router.publish(UpstreamNotice::ResourcesChanged);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.router.publish(UpstreamNotice::PromptsChanged);
    }

    #[allow(deprecated)] // sampling: deprecated by SEP-2577, current in 2025-11-25.
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.relay("sampling/createMessage", params, context).await
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.relay("elicitation/create", params, context).await
    }

    #[allow(deprecated)] // roots: deprecated by SEP-2577, current in 2025-11-25.
    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        self.relay("roots/list", serde_json::json!({}), context)
            .await
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            super::client_requests::relayed_capabilities(self.relay),
            Implementation::new("toolexec", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

/// A connected session.
pub(crate) type Running = RunningService<RoleClient, Handler>;

/// Why a connection attempt failed, and whether retrying can help.
#[derive(Debug)]
pub(crate) struct ConnectError {
    pub(crate) message: String,
    /// Retrying cannot help (authorization refused, no common protocol version).
    pub(crate) permanent: bool,
    /// The server refused the credentials: `Some(None)` after a `401`,
    /// `Some(Some(challenge))` after a `403 insufficient_scope`.
    pub(crate) auth: Option<Option<String>>,
    /// The `server/discover` probe itself failed: the server ended the
    /// session on it (stdio), or answered it with something that is neither
    /// a discover result nor an error. Offering `initialize` may work.
    pub(crate) probe: bool,
}

impl ConnectError {
    pub(crate) fn transient(message: impl Into<String>) -> Self {
        ConnectError {
            message: message.into(),
            permanent: false,
            auth: None,
            probe: false,
        }
    }
}

/// Whether an error chain holds an authorization refusal, and its kind.
fn auth_refusal_in(e: &(dyn std::error::Error + 'static)) -> Option<Option<String>> {
    let mut link = Some(e);
    while let Some(current) = link {
        if current.is::<AuthRequiredError>() {
            return Some(None);
        }
        if let Some(r) = current.downcast_ref::<InsufficientScopeError>() {
            return Some(Some(r.www_authenticate_header.clone()));
        }
        match current.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            Some(StreamableHttpError::AuthRequired(_)) => return Some(None),
            Some(StreamableHttpError::InsufficientScope(r)) => {
                return Some(Some(r.www_authenticate_header.clone()));
            }
            _ => {}
        }
        link = next_link(current);
    }
    None
}

/// Opens a session: spawns the child (stdio) or opens the HTTP session, and
/// runs the MCP handshake. Returns the session and the child's pid.
///
/// Some servers of earlier revisions exit on any request before
/// `initialize`, or answer `server/discover` with something other than an
/// error: a session whose probe itself failed (see [`ConnectError::probe`];
/// never for credentials, certificates or an unreachable server) is opened
/// once more with `initialize`. A server that ends on an earlier revision
/// either way is offered `initialize` first for a while
/// ([`Era`](super::revision::Era)).
pub(crate) async fn open(
    endpoint: &Endpoint,
    handler: Handler,
    max_concurrency: usize,
    era: &super::revision::Era,
) -> Result<(Running, Option<u32>), ConnectError> {
    let lifecycle = era.lifecycle();
    let probed = matches!(lifecycle, ClientLifecycleMode::Auto { .. })
        && !matches!(endpoint, Endpoint::Sse { .. });
    let opened = match open_session(endpoint, handler.clone(), max_concurrency, lifecycle).await {
        Err(e) if probed && e.probe && !e.permanent && e.auth.is_none() => {
            tracing::info!(server = %handler.server, error = %e.message, "server/discover failed; opening the session again with initialize");
            open_session(
                endpoint,
                handler.clone(),
                max_concurrency,
                ClientLifecycleMode::Initialize,
            )
            .await
        }
        other => other,
    };
    era.learn(probed, opened.as_ref().ok().map(|(running, _)| running));
    let (running, pid) = opened?;
    super::revision::listen_for_changes(&running, handler);
    Ok((running, pid))
}

/// [`open`] with one lifecycle, without the listener.
async fn open_session(
    endpoint: &Endpoint,
    handler: Handler,
    max_concurrency: usize,
    lifecycle: ClientLifecycleMode,
) -> Result<(Running, Option<u32>), ConnectError> {
    match endpoint {
        Endpoint::Stdio {
            command,
            args,
            env,
            inherit_env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            // Never leave a server behind, even if the runtime goes away
            // before the graceful shutdown ran.
            cmd.args(args).kill_on_drop(true);
            // Only the allow-listed part of this process's environment.
            cmd.env_clear()
                .envs(super::env::inherited(std::env::vars_os(), inherit_env));
            for (k, v) in env {
                cmd.env(k, v.expose());
            }
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            let wanted = Arc::new(Wanted::default());
            let (child, stderr) = ChildStdio::spawn(cmd, wanted.clone())
                .map_err(|e| ConnectError::transient(format!("cannot start {command:?}: {e}")))?;
            let pid = child.id();
            forward_stderr(handler.server.clone(), stderr);
            let transport = InOrder::new(child, handler.router.clone()).verbatim(wanted);
            let running = handler
                .serve_with_lifecycle(transport, lifecycle)
                .await
                .map_err(|e| init_error(&e, None))?;
            Ok((running, pid))
        }
        Endpoint::Sse { url, headers, tls } => {
            tls.new_attempt();
            let client = super::http_client::SessionAwareClient::new(tls.config.clone())
                .map_err(ConnectError::transient)?;
            let headers: http::HeaderMap = headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let transport = super::sse::LegacySse::connect(client.into_inner(), url, headers)
                .await
                .map_err(|e| sse_error(&e, tls))?;
            let transport = InOrder::new(transport, handler.router.clone());
            // The 2024-11-05 transport predates `server/discover`.
            let running = handler
                .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
                .await
                .map_err(|e| init_error(&e, Some(tls)))?;
            Ok((running, None))
        }
        Endpoint::Http {
            url,
            headers,
            bearer_token,
            tls,
            oauth,
            exchange: _,
        } => {
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(headers.clone())
                .max_concurrent_requests(max_concurrency);
            if let Some(token) = bearer_token {
                config = config.auth_header(token.expose());
            }
            tls.new_attempt();
            let client = super::http_client::SessionAwareClient::new(tls.config.clone())
                .map_err(ConnectError::transient)?;
            let Some(oauth) = oauth else {
                return serve_http(client, config, handler, tls, lifecycle).await;
            };
            let (options, cell) = &**oauth;
            let authorizer = cell
                .get_or_try_init(|| {
                    Authorizer::new(&handler.server, url, options, tls.config.clone())
                })
                .await
                .map_err(ConnectError::transient)?
                .clone();
            // Not signed in (yet) or discovery failed: retried with backoff,
            // so a sign-in made meanwhile is picked up.
            authorizer
                .prepare()
                .await
                .map_err(ConnectError::transient)?;
            let refusal = authorizer.clone();
            serve_http(
                SignedIn::new(authorizer, client),
                config,
                handler,
                tls,
                lifecycle,
            )
            .await
            .map_err(|mut e| {
                if let Some(hint) = e.auth.take() {
                    e.message = match hint {
                        Some(challenge) => refusal.refusal(Some(&challenge)),
                        None => refusal.refusal(None),
                    };
                    e.permanent = false;
                }
                e
            })
        }
    }
}

/// Why opening an SSE event stream failed: a TLS failure as for streamable
/// HTTP; a refused credential (401, 403) is permanent.
fn sse_error(e: &super::sse::SseError, tls: &Tls) -> ConnectError {
    if let Some(failure) = tls.failure_in(e, next_link) {
        let mut message = format!("TLS handshake failed: {}", failure.reason);
        if failure.permanent {
            message.push_str(" (not retried)");
        }
        return ConnectError {
            message,
            permanent: failure.permanent,
            auth: None,
            probe: false,
        };
    }
    let refused = matches!(
        e,
        super::sse::SseError::Status {
            status: 401 | 403,
            ..
        }
    );
    ConnectError {
        message: format!("opening the SSE event stream failed: {}", error_chain(e)),
        permanent: refused,
        auth: None,
        probe: false,
    }
}

/// Opens a streamable HTTP session with `client`.
async fn serve_http<C>(
    client: C,
    config: StreamableHttpClientTransportConfig,
    handler: Handler,
    tls: &Tls,
    lifecycle: ClientLifecycleMode,
) -> Result<(Running, Option<u32>), ConnectError>
where
    C: StreamableHttpClient<Error = reqwest::Error> + Send + Sync + 'static,
{
    let transport = StreamableHttpClientTransport::with_client(client, config);
    let transport = InOrder::new(transport, handler.router.clone());
    let running = handler
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .map_err(|e| init_error(&e, Some(tls)))?;
    Ok((running, None))
}

/// `http` is the TLS setup of an HTTP session.
fn init_error(e: &ClientInitializeError, http: Option<&Tls>) -> ConnectError {
    let cause: &(dyn std::error::Error + 'static) = match e {
        ClientInitializeError::TransportError { error, .. } => error.error.as_ref(),
        other => other,
    };
    if let Some(tls) = http
        && let Some(failure) = tls.failure_in(cause, next_link)
    {
        let mut message = format!("TLS handshake failed: {}", failure.reason);
        if failure.permanent {
            message.push_str(" (not retried)");
        }
        return ConnectError {
            message,
            permanent: failure.permanent,
            auth: None,
            probe: false,
        };
    }
    let http = http.is_some();
    let permanent = matches!(e, ClientInitializeError::NoCompatibleProtocolVersion { .. })
        || (http && e.is_authorization_required())
        || (http && error_chain_has_http_auth_failure(e));
    let mut message = match e {
        ClientInitializeError::TransportError { error, context } => {
            format!(
                "MCP handshake failed ({context}): {}",
                error_chain(error.error.as_ref())
            )
        }
        other => format!("MCP handshake failed: {}", error_chain(other)),
    };
    if permanent {
        message.push_str(" (not retried)");
    }
    ConnectError {
        message,
        permanent,
        auth: auth_refusal_in(cause),
        probe: super::revision::probe_failed(e, http),
    }
}

/// An error and its sources, in one line (sources already quoted by an
/// outer message are not repeated). Sees through rmcp's HTTP client errors,
/// whose `Display` hides the cause (connection refused, ...).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    toolexec_http::tls::error_chain(e, next_link)
}

/// The next link of an error chain, seeing through rmcp's HTTP client
/// errors (whose `source()` is empty), else as
/// [`toolexec_http::tls::next_link`] (into `std::io::Error`s).
pub(crate) fn next_link<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    if let Some(StreamableHttpError::<reqwest::Error>::Client(inner)) =
        e.downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        return Some(inner);
    }
    toolexec_http::tls::next_link(e)
}

fn error_chain_has_http_auth_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(
            StreamableHttpError::<reqwest::Error>::AuthRequired(_)
            | StreamableHttpError::<reqwest::Error>::InsufficientScope(_),
        ) = err.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Copies the child's stderr to `tracing` (debug level, target
/// `toolexec_mcp::upstream::stderr`). The server's own output is not filtered.
fn forward_stderr(server: Arc<str>, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(target: "toolexec_mcp::upstream::stderr", server = %server, "{line}");
        }
    });
}

/// Lists every tool, following `nextCursor`, as raw JSON objects (so one
/// malformed tool does not fail the listing). Bypasses rmcp's response cache,
/// which could otherwise return a listing from before `list_changed`.
pub(crate) async fn list_all_tools(
    peer: &Peer<RoleClient>,
) -> Result<Vec<Map<String, Value>>, String> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen_cursors = std::collections::HashSet::new();
    for _ in 0..MAX_LIST_PAGES {
        let mut params = PaginatedRequestParams::default();
        params.cursor = cursor.take();
        let request = ClientRequest::ListToolsRequest(ListToolsRequest::with_param(params));
        let result = peer
            .send_request(request)
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        let page = match result {
            ServerResult::ListToolsResult(r) => serde_json::to_value(r),
            ServerResult::CustomResult(c) => Ok(c.0),
            other => serde_json::to_value(other),
        }
        .map_err(|e| format!("tools/list: unreadable result: {e}"))?;
        let Some(items) = page.get("tools").and_then(Value::as_array) else {
            return Err("tools/list: the result has no tools array".to_owned());
        };
        for item in items {
            match item {
                Value::Object(m) => tools.push(m.clone()),
                _ => tracing::warn!("tools/list: skipping an entry that is not an object"),
            }
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) if !next.is_empty() => {
                if !seen_cursors.insert(next.to_owned()) {
                    return Err(format!("tools/list: the server repeated cursor {next:?}"));
                }
                cursor = Some(next.to_owned());
            }
            _ => return Ok(tools),
        }
    }
    Err(format!("tools/list: more than {MAX_LIST_PAGES} pages"))
}
