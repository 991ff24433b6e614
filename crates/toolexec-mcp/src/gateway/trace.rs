//! Each MCP request in a span and for a [`Caller`]: the span follows the
//! OpenTelemetry MCP conventions (`{method} {target}`, `mcp.method.name`,
//! `mcp.session.id`, `jsonrpc.request.id`) and continues the client's
//! trace from `_meta.traceparent` or the HTTP `traceparent` header; the
//! caller (principal, session, client name) reaches the pipeline's
//! observers (metrics, audit log) through [`with_caller`].

use std::future::Future;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use toolexec::telemetry::{
    Caller, PrincipalKind, TraceContext, clip, current_trace, set_parent, with_caller,
};
use tracing::Instrument;
use tracing::field::Empty;

use toolexec::ClientLink;

use super::downstream::Downstream;
use super::server::Gateway;

/// Who the HTTP layer authenticated (principal, kind, scopes, claims), put
/// in the request's extensions.
#[derive(Debug, Clone)]
pub(super) struct Identity(pub(super) Arc<Caller>);

/// The principal of requests over stdio: the local user who started it
/// ([`PrincipalKind::Local`]).
pub(super) const STDIO_PRINCIPAL: &str = "stdio";

impl Gateway {
    /// Runs `work`, the answer to the request `method` (about `target`, a
    /// tool or resource name, when there is one), in its span and for its
    /// caller. `failed` says whether the answer is a failure, for
    /// `error.type`.
    pub(super) async fn traced<T>(
        &self,
        method: &'static str,
        target: Option<&str>,
        context: &RequestContext<RoleServer>,
        failed: impl FnOnce(&T) -> Option<&'static str>,
        work: impl Future<Output = T>,
    ) -> T {
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let client = context
            .peer
            .peer_info()
            .map(|info| clip(&info.client_info.name).to_owned());
        let session = match parts.and_then(|p| p.headers.get("mcp-session-id")) {
            Some(v) => clip(v.to_str().unwrap_or_default()).to_owned(),
            None => self.session.id.to_string(),
        };
        let identity = parts.and_then(|p| p.extensions.get::<Identity>());
        let target = target.map(clip);
        let span = tracing::info_span!(
            target: "toolexec::gateway",
            "mcp_request",
            otel.name = Empty,
            otel.kind = "server",
            mcp.method.name = method,
            mcp.session.id = %session,
            jsonrpc.request.id = %context.id,
            client.name = client.as_deref(),
            trace_id = Empty,
            error.type = Empty,
        );
        if !span.is_disabled() {
            span.record(
                "otel.name",
                match target {
                    Some(t) => format!("{method} {t}"),
                    None => method.to_owned(),
                },
            );
            let parent = TraceContext::extract(|k| context.meta.get(k).and_then(|v| v.as_str()))
                .or_else(|| {
                    let headers = &parts?.headers;
                    TraceContext::extract(|k| headers.get(k).and_then(|v| v.to_str().ok()))
                });
            if let Some(parent) = &parent {
                set_parent(&span, parent);
            }
            if let Some(trace) = span.in_scope(current_trace) {
                span.record("trace_id", trace.trace_id());
            }
        }
        let downstream = Downstream::new(context, &self.session);
        let link = Some(ClientLink(downstream.clone()));
        let caller = Arc::new(match identity {
            Some(Identity(who)) => Caller {
                session: Some(session),
                client,
                link,
                ..Caller::clone(who)
            },
            None => Caller {
                principal: self.session.principal().map(str::to_owned),
                kind: match self.session.principal() {
                    Some(_) => PrincipalKind::Local,
                    None => PrincipalKind::Anonymous,
                },
                session: Some(session),
                client,
                link,
                ..Caller::default()
            },
        });
        let out = with_caller(caller, work).instrument(span.clone()).await;
        // What an upstream logged during the request goes out before its answer.
        downstream.flush().await;
        if let Some(kind) = failed(&out) {
            span.record("error.type", kind);
        }
        out
    }
}
