//! How to reach and call one upstream server: [`UpstreamConfig`] and
//! [`UpstreamTransport`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use toolexec::Secret;
pub use toolexec_http::TlsOptions;

use super::oauth::{TokenExchange, UpstreamOAuth};

/// Default [`UpstreamConfig::call_timeout`].
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`UpstreamConfig::max_concurrency`].
pub const DEFAULT_MAX_CONCURRENCY: usize = 16;

/// How to reach one upstream MCP server, and how to call it.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// The server's name: the namespace of its tools (`name:tool`). Must be a
    /// valid toolexec namespace (`A-Z a-z 0-9 _ - .`, at most 128 bytes).
    pub name: String,
    /// Where the server is.
    pub transport: UpstreamTransport,
    /// Deadline of each call, enforced by the backend itself (waiting for a
    /// concurrency slot included). Must not be zero.
    pub call_timeout: Duration,
    /// Most calls in flight at once; more wait for a slot. At least 1.
    pub max_concurrency: usize,
    /// Connect in the background instead of in
    /// [`Upstream::connect`](super::Upstream::connect).
    pub lazy: bool,
    /// What the server may ask the client of a call, and what of its log is
    /// relayed there, through the call's
    /// [`Caller::link`](toolexec::telemetry::Caller::link): declared to the
    /// server as capabilities. Each request waits at most
    /// [`call_timeout`](Self::call_timeout). Nothing by default, where no
    /// client could answer; [`ClientRelay::GATEWAY`] for a gateway.
    pub relay: ClientRelay,
}

/// What of an upstream server's requests to its client, and of its log, is
/// relayed to the client of the call it belongs to (see the module's
/// "Requests to the client").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientRelay {
    /// `sampling/createMessage`.
    pub sampling: bool,
    /// `elicitation/create` (form and URL mode), and
    /// `notifications/elicitation/complete`.
    pub elicitation: bool,
    /// `roots/list`. Not in [`ClientRelay::GATEWAY`]: roots belong to a
    /// whole session, and one upstream session serves every client of the
    /// gateway, so a server that keeps the roots one client answered would
    /// apply them to every other client's calls.
    pub roots: bool,
    /// Log messages (`notifications/message`), at or above the level the
    /// client set.
    pub logging: bool,
}

impl ClientRelay {
    /// Whether the client request `method` is relayed.
    pub(crate) fn allows(&self, method: &str) -> bool {
        match method {
            "sampling/createMessage" => self.sampling,
            "elicitation/create" => self.elicitation,
            "roots/list" => self.roots,
            _ => false,
        }
    }

    /// Nothing relayed, nothing declared.
    pub const NONE: ClientRelay = ClientRelay {
        sampling: false,
        elicitation: false,
        roots: false,
        logging: false,
    };
    /// What `toolexec serve` relays by default: sampling, elicitation and
    /// log messages.
    pub const GATEWAY: ClientRelay = ClientRelay {
        sampling: true,
        elicitation: true,
        roots: false,
        logging: true,
    };

    /// True when anything is relayed.
    pub fn any(&self) -> bool {
        *self != ClientRelay::NONE
    }
}

impl UpstreamConfig {
    /// A configuration with the defaults: [`DEFAULT_CALL_TIMEOUT`],
    /// [`DEFAULT_MAX_CONCURRENCY`], not lazy.
    ///
    /// ```
    /// use toolexec_mcp::upstream::{UpstreamConfig, UpstreamTransport};
    /// let config = UpstreamConfig::new("remote", UpstreamTransport::Http {
    ///     url: "http://127.0.0.1:3001/mcp".into(),
    ///     headers: Default::default(),
    ///     bearer_token: Some(toolexec::Secret::new("s3cr3t")),
    ///     tls: Default::default(),
    ///     oauth: None,
    ///     token_exchange: None,
    /// });
    /// assert!(!format!("{config:?}").contains("s3cr3t"));
    /// ```
    pub fn new(name: impl Into<String>, transport: UpstreamTransport) -> Self {
        UpstreamConfig {
            name: name.into(),
            transport,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            lazy: false,
            relay: ClientRelay::NONE,
        }
    }
}

/// The transport to an upstream server.
// A configuration value, made once per server: boxing the larger variant's
// settings would only make it harder to write.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum UpstreamTransport {
    /// A child process speaking MCP on stdin/stdout; its stderr goes to
    /// `tracing`. Its environment starts empty: the variables of this process
    /// named in [`INHERITED_ENV`] or `inherit_env` are copied, then `env` is
    /// set, so this process's other variables (tokens, keys, other servers'
    /// secrets) never reach it.
    ///
    /// [`INHERITED_ENV`]: super::INHERITED_ENV
    Stdio {
        /// The program to run (looked up on this process's `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables set for it.
        env: BTreeMap<String, Secret>,
        /// More variables to copy from this process's environment when set,
        /// besides [`INHERITED_ENV`]: names, or patterns with `*`
        /// (`"AWS_*"`).
        ///
        /// [`INHERITED_ENV`]: super::INHERITED_ENV
        inherit_env: Vec<String>,
        /// Working directory (default: this process's).
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint, `http://` or `https://`.
    Http {
        /// The MCP endpoint URL, such as `http://127.0.0.1:3001/mcp` or
        /// `https://mcp.example.com/mcp`.
        url: String,
        /// Extra headers sent with every request.
        headers: BTreeMap<String, Secret>,
        /// Sent as `Authorization: Bearer <token>`.
        bearer_token: Option<Secret>,
        /// Roots and client certificate of an `https://` URL (must be empty
        /// for `http://`).
        tls: TlsOptions,
        /// OAuth 2.1 sign-in instead of a static token (see
        /// [`oauth`](super::oauth)); not with `bearer_token`.
        oauth: Option<UpstreamOAuth>,
        /// Act as the caller: each call carries a token exchanged for the
        /// caller's access token (RFC 8693) instead of the credential above
        /// (which the session itself keeps using).
        token_exchange: Option<TokenExchange>,
    },
    /// A server on the HTTP+SSE transport of protocol revision 2024-11-05
    /// (`GET` an event stream, `POST` to the URL its `endpoint` event
    /// names), for servers that predate streamable HTTP.
    Sse {
        /// The event stream's URL, such as `http://127.0.0.1:3001/sse`.
        url: String,
        /// Extra headers sent with every request.
        headers: BTreeMap<String, Secret>,
        /// Sent as `Authorization: Bearer <token>`.
        bearer_token: Option<Secret>,
        /// Roots and client certificate of an `https://` URL (must be empty
        /// for `http://`).
        tls: TlsOptions,
    },
}
