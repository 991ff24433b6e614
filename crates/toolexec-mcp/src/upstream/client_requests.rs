//! A server's requests to its client (`sampling/createMessage`,
//! `elicitation/create`, `roots/list`), relayed to the client of the call
//! they belong to ([`Links`](super::links::Links) decides which, as the
//! transport reads the request).
//!
//! Only what [`UpstreamConfig::relay`](super::UpstreamConfig::relay) names
//! is declared to the server; each request is then checked against what
//! the calling client declared, tagged with the server's name, and waits at
//! most the server's call timeout, until the server cancels it, or until
//! the call it belongs to ends.

use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ElicitationCapability, ErrorCode, FormElicitationCapability,
    RootsCapabilities, SamplingCapability, UrlElicitationCapability,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleClient};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use toolexec::ClientError;

use tokio_util::sync::CancellationToken;

use super::ClientRelay;
use super::links::Target;
use super::routing::RelayTarget;
use super::session::Handler;

/// The `_meta` key naming the upstream server that asks, so that a client
/// can tell the servers behind the gateway apart.
pub const SERVER_META_KEY: &str = "io.toolexec/server";

/// The capabilities declared to a server that relays `relay`.
pub(crate) fn relayed_capabilities(relay: ClientRelay) -> ClientCapabilities {
    let mut caps = ClientCapabilities::default();
    if relay.sampling {
        let mut sampling = SamplingCapability::default();
        sampling.tools = Some(Default::default());
        caps.sampling = Some(sampling);
    }
    if relay.elicitation {
        caps.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::default())
                .with_url(UrlElicitationCapability::default()),
        );
    }
    if relay.roots {
        caps.roots = Some(RootsCapabilities::default());
    }
    caps
}

impl Handler {
    /// Relays the request `method` to the client it is meant for and
    /// returns its answer; an error the client answered is relayed as it is.
    pub(crate) async fn relay<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: P,
        context: RequestContext<RoleClient>,
    ) -> Result<R, ErrorData> {
        let asker = Asker {
            server: &self.server,
            relay: self.relay,
            timeout: self.relay_timeout,
        };
        let target = match context.extensions.get::<RelayTarget>() {
            Some(RelayTarget(target)) => target.clone(),
            None => Err("it was not read through toolexec's transport".to_owned()),
        };
        let value = asker
            .ask(method, params, target, context.ct.clone())
            .await?;
        serde_json::from_value(value).map_err(|e| {
            ErrorData::internal_error(
                format!("the client's answer to {method} is malformed: {e}"),
                None,
            )
        })
    }
}

/// Asks the client of a call on behalf of `server`: what both a 2025
/// server's requests to its client and a 2026-07-28 server's input
/// requests (`input_required`) go through.
pub(crate) struct Asker<'a> {
    pub(crate) server: &'a str,
    pub(crate) relay: ClientRelay,
    /// The longest the client is waited for.
    pub(crate) timeout: Duration,
}

impl Asker<'_> {
    /// Relays `method` to the client of `target` and returns its answer; an
    /// error the client answered comes back as it is. `cancelled` is the
    /// server withdrawing the request.
    pub(crate) async fn ask<P: Serialize>(
        &self,
        method: &str,
        params: P,
        target: Target,
        cancelled: CancellationToken,
    ) -> Result<Value, ErrorData> {
        let server = self.server;
        let refused = |why: String| {
            tracing::debug!(server, method, reason = %why, "not relayed to a client");
            ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("{method} cannot be relayed to a client: {why}"),
                None,
            )
        };
        if !self.relay.allows(method) {
            return Err(refused(if self.relay.any() {
                "this server is not configured to relay it".to_owned()
            } else {
                "no client can answer it here: toolexec relays a server's requests only \
                 when it serves clients as a gateway"
                    .to_owned()
            }));
        }
        let (link, ended) = target.map_err(refused)?;
        let mut params = serde_json::to_value(params)
            .map_err(|e| ErrorData::internal_error(format!("encoding {method}: {e}"), None))?;
        for_client(method, &mut params, server);
        if !link.supports(method, &params) {
            return Err(to_error_data(ClientError::Unsupported {
                method: method.to_owned(),
            }));
        }
        let answer = tokio::select! {
            answer = link.request(method, params) => answer,
            _ = cancelled.cancelled() => Err(ClientError::Failed(
                "the server cancelled the request".to_owned(),
            )),
            _ = ended.cancelled() => Err(ClientError::Failed(
                "the call the request belongs to ended before the client answered".to_owned(),
            )),
            _ = tokio::time::sleep(self.timeout) => Err(ClientError::Failed(format!(
                "the client did not answer within {}",
                humanize(self.timeout)
            ))),
        };
        answer.map_err(to_error_data)
    }
}

/// The parameters of the request `method` as a client of the gateway gets
/// it from `server`: no sampling context (through the gateway, "this
/// server" is every server behind it, and a client must not mix their
/// context into this one's request), and the server's name in `_meta`.
pub(crate) fn for_client(method: &str, params: &mut Value, server: &str) {
    if let Value::Object(map) = params {
        if method == "sampling/createMessage"
            && map.get("includeContext").is_some_and(|c| c != "none")
        {
            map.insert("includeContext".to_owned(), Value::from("none"));
        }
        let meta = map
            .entry("_meta")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Value::Object(meta) = meta {
            meta.insert(SERVER_META_KEY.to_owned(), Value::from(server));
        }
    }
}

/// The JSON-RPC error a failed relay answers the server with: the client's
/// own error as it is, `-32601` when the client cannot answer such a
/// request, else `-32603`.
fn to_error_data(e: ClientError) -> ErrorData {
    match e {
        ClientError::Answered {
            code,
            message,
            data,
        } => ErrorData::new(
            ErrorCode(i32::try_from(code).unwrap_or(ErrorCode::INTERNAL_ERROR.0)),
            message,
            data,
        ),
        e @ ClientError::Unsupported { .. } => {
            ErrorData::new(ErrorCode::METHOD_NOT_FOUND, e.to_string(), None)
        }
        ClientError::Failed(why) => ErrorData::internal_error(why, None),
    }
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}
