//! [`Service`]: one gRPC server, its channel and its limits.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tonic::client::Grpc;
use tonic::metadata::{AsciiMetadataValue, BinaryMetadataValue, MetadataKey, MetadataMap};
use tonic::transport::{Channel, Endpoint};
use toolexec::{Error, Secret};
use toolexec_http::TlsOptions;
use toolexec_http::tls::Tls;

/// Default deadline of one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default largest message decoded, and largest total of a stream.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 << 20;
/// Default most messages of a server stream kept.
pub const DEFAULT_MAX_STREAM_MESSAGES: usize = 10_000;
/// Longest deadline or connect timeout that can be configured.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 86_400);
/// Most calls in flight that can be configured.
pub const MAX_CONCURRENCY: usize = 10_000;
/// Default calls in flight at once.
pub const DEFAULT_MAX_CONCURRENCY: usize = 64;

/// How a [`Service`] talks to its server.
#[derive(Debug, Clone)]
pub struct GrpcOptions {
    /// Deadline of one call, sent to the server as `grpc-timeout` and kept
    /// here too; past it the call fails with `timeout`.
    pub timeout: Duration,
    /// Time to open a connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// Calls in flight at once; more wait for a slot (within their
    /// deadline).
    pub max_concurrency: usize,
    /// Largest message decoded, and largest total of one server stream; a
    /// larger answer is `limit_exceeded`.
    pub max_message_bytes: usize,
    /// Most messages of one server stream; more is `limit_exceeded`.
    pub max_stream_messages: usize,
    /// Roots and client certificate for `https://`.
    pub tls: TlsOptions,
    /// Metadata sent with every call (secrets: never logged or shown).
    /// Keys ending in `-bin` carry base64 of binary values.
    pub metadata: BTreeMap<String, Secret>,
}

impl GrpcOptions {
    /// Checks `url` and these options as [`Service::new`] does, without
    /// connecting or needing a runtime: `invalid_request` naming the field
    /// (`url`, `max_concurrency`, `max_message_bytes`,
    /// `max_stream_messages`, `metadata.<key>`, `tls.*`).
    ///
    /// ```
    /// let options = toolexec_grpc::GrpcOptions::default();
    /// assert!(options.check("http://127.0.0.1:50051").is_ok());
    /// assert_eq!(options.check("ftp://x").unwrap_err().field(), Some("url"));
    /// ```
    pub fn check(&self, url: &str) -> Result<(), Error> {
        self.checked(url).map(drop)
    }

    /// Whether `url` is `https://`, and the metadata as gRPC carries it.
    fn checked(&self, url: &str) -> Result<(bool, MetadataMap), Error> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| Error::invalid_request("url", format!("{url:?} is not a URL: {e}")))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(Error::invalid_request(
                    "url",
                    format!("{url:?}: the scheme must be http or https"),
                ));
            }
        };
        if uri.host().is_none() {
            return Err(Error::invalid_request(
                "url",
                format!("{url:?} has no host"),
            ));
        }
        for (field, value) in [
            ("max_concurrency", self.max_concurrency),
            ("max_message_bytes", self.max_message_bytes),
            ("max_stream_messages", self.max_stream_messages),
        ] {
            if value == 0 {
                return Err(Error::invalid_request(field, "must be greater than 0"));
            }
        }
        for (field, value) in [
            ("timeout", self.timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if value.is_zero() || value > MAX_TIMEOUT {
                return Err(Error::invalid_request(
                    field,
                    format!(
                        "must be between 1 ms and {} days",
                        MAX_TIMEOUT.as_secs() / 86_400
                    ),
                ));
            }
        }
        if !https && !self.tls.is_empty() {
            return Err(Error::invalid_request(
                "url",
                format!(
                    "{url:?}: TLS options (ca_file, client_cert, client_key) need an https:// URL"
                ),
            ));
        }
        if self.max_concurrency > MAX_CONCURRENCY {
            return Err(Error::invalid_request(
                "max_concurrency",
                format!("at most {MAX_CONCURRENCY}"),
            ));
        }
        if https && !self.tls.is_empty() {
            self.tls.check()?;
        }
        Ok((https, metadata(&self.metadata)?))
    }
}

impl Default for GrpcOptions {
    fn default() -> Self {
        GrpcOptions {
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(10),
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_stream_messages: DEFAULT_MAX_STREAM_MESSAGES,
            tls: TlsOptions::default(),
            metadata: BTreeMap::new(),
        }
    }
}

/// One gRPC server: a lazily connected HTTP/2 channel (reconnected as
/// needed), its limits and its metadata. Shared by the tools of its
/// methods.
pub struct Service {
    name: String,
    url: String,
    channel: Channel,
    pub(crate) tls: Tls,
    pub(crate) options: GrpcOptions,
    pub(crate) slots: Semaphore,
    metadata: MetadataMap,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("name", &self.name)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// A service at `url` (`http://` for HTTP/2 without TLS, `https://`),
    /// named `name` in errors. Nothing is connected yet; must be called
    /// inside a Tokio runtime. Bad options are `invalid_request` naming
    /// the field (`url`, `max_concurrency`, `metadata.<key>`, `tls.*`).
    pub fn new(name: &str, url: &str, options: GrpcOptions) -> Result<Arc<Service>, Error> {
        let (https, metadata) = options.checked(url)?;
        let tls = if https {
            options.tls.client_config(name)?
        } else {
            Tls::unused()
        };
        let connector = tls.h2_connector(options.connect_timeout, false);
        let endpoint = Endpoint::from_shared(url.to_owned())
            .map_err(|e| Error::invalid_request("url", format!("{url:?}: {e}")))?
            .connect_timeout(options.connect_timeout)
            .user_agent(concat!("toolexec/", env!("CARGO_PKG_VERSION")))
            .map_err(|e| Error::invalid_request("url", e.to_string()))?
            .tcp_nodelay(true);
        Ok(Arc::new(Service {
            name: name.to_owned(),
            url: url.to_owned(),
            channel: endpoint.connect_with_connector_lazy(connector),
            slots: Semaphore::new(options.max_concurrency),
            tls,
            options,
            metadata,
        }))
    }

    /// The name given at construction.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client on the shared channel, decoding at most
    /// [`GrpcOptions::max_message_bytes`] per message.
    pub(crate) fn client(&self) -> Grpc<Channel> {
        Grpc::new(self.channel.clone()).max_decoding_message_size(self.options.max_message_bytes)
    }

    /// `message` as a request carrying the configured metadata.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        *request.metadata_mut() = self.metadata.clone();
        request
    }
}

/// The configured metadata as gRPC metadata; a key or value gRPC cannot
/// carry is `invalid_request` at `metadata.<key>` (the value never shown).
fn metadata(entries: &BTreeMap<String, Secret>) -> Result<MetadataMap, Error> {
    let mut map = MetadataMap::new();
    for (key, value) in entries {
        let field = format!("metadata.{key}");
        let bad = |why: &str| Error::invalid_request(&field, why);
        let lower = key.to_ascii_lowercase();
        if map.contains_key(lower.as_str()) {
            return Err(bad("given twice (keys are case-insensitive)"));
        }
        if lower.starts_with("grpc-") || matches!(lower.as_str(), "te" | "content-type") {
            return Err(bad("reserved by gRPC"));
        }
        if lower.ends_with("-bin") {
            let key = MetadataKey::from_bytes(lower.as_bytes())
                .map_err(|_| bad("not a valid metadata key"))?;
            let bytes =
                base64::Engine::decode(&base64::engine::general_purpose::STANDARD, value.expose())
                    .map_err(|_| bad("a -bin value must be base64"))?;
            let mut value = BinaryMetadataValue::from_bytes(&bytes);
            value.set_sensitive(true);
            map.insert_bin(key, value);
        } else {
            let key = MetadataKey::from_bytes(lower.as_bytes())
                .map_err(|_| bad("not a valid metadata key"))?;
            let mut value: AsciiMetadataValue = value
                .expose()
                .parse()
                .map_err(|_| bad("the value must be visible ASCII"))?;
            // Never added to the HPACK table, where it could outlive the call.
            value.set_sensitive(true);
            map.insert(key, value);
        }
    }
    Ok(map)
}
