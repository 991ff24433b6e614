//! A server's requests to its client (`sampling/createMessage`,
//! `elicitation/create`, `roots/list`), relayed to the client of the call
//! they belong to ([`Router::link_for`](super::routing::Router::link_for)).
//!
//! Only an upstream configured to relay them
//! ([`UpstreamConfig::relay_client_requests`](super::UpstreamConfig::relay_client_requests))
//! declares the capabilities; each request is then checked against what the
//! calling client declared, and waits at most the server's call timeout,
//! until the server cancels it, or until the call it belongs to ends.

use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ElicitationCapability, ErrorCode, FormElicitationCapability,
    RootsCapabilities, SamplingCapability, UrlElicitationCapability,
};
use rmcp::service::{InboundStreamOrigin, RequestContext};
use rmcp::{ErrorData, RoleClient};
use serde::Serialize;
use serde::de::DeserializeOwned;
use toolexec::ClientError;

use super::session::Handler;

/// The capabilities a relaying upstream declares: everything a client of
/// the gateway may answer.
pub(crate) fn relayed_capabilities() -> ClientCapabilities {
    let mut caps = ClientCapabilities::default();
    let mut sampling = SamplingCapability::default();
    sampling.tools = Some(Default::default());
    sampling.context = Some(Default::default());
    caps.sampling = Some(sampling);
    caps.elicitation = Some(
        ElicitationCapability::new()
            .with_form(FormElicitationCapability::default())
            .with_url(UrlElicitationCapability::default()),
    );
    caps.roots = Some(RootsCapabilities::default());
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
        let refused = |why: String| {
            tracing::debug!(server = %self.server, method, reason = %why, "not relayed to the client");
            ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("{method} cannot be relayed to a client: {why}"),
                None,
            )
        };
        let Some(timeout) = self.relay else {
            return Err(refused(
                "no client can answer it here: toolexec relays a server's requests only \
                 when it serves clients as a gateway"
                    .to_owned(),
            ));
        };
        let origin = context.extensions.get::<InboundStreamOrigin>();
        let (link, ended) = self.router.link_for(origin).map_err(refused)?;
        let params = serde_json::to_value(params)
            .map_err(|e| ErrorData::internal_error(format!("encoding {method}: {e}"), None))?;
        if !link.supports(method, &params) {
            return Err(to_error_data(ClientError::Unsupported {
                method: method.to_owned(),
            }));
        }
        let answer = tokio::select! {
            answer = link.request(method, params) => answer,
            _ = context.ct.cancelled() => Err(ClientError::Failed(
                "the server cancelled the request".to_owned(),
            )),
            _ = ended.cancelled() => Err(ClientError::Failed(
                "the call the request belongs to ended before the client answered".to_owned(),
            )),
            _ = tokio::time::sleep(timeout) => Err(ClientError::Failed(format!(
                "the client did not answer within {}",
                humanize(timeout)
            ))),
        };
        let value = answer.map_err(to_error_data)?;
        serde_json::from_value(value).map_err(|e| {
            ErrorData::internal_error(
                format!("the client's answer to {method} is malformed: {e}"),
                None,
            )
        })
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
