//! The gateway over stdin/stdout, how MCP clients launch servers.

use rmcp::ServiceExt;

use super::server::Gateway;

/// Serves `gateway` over stdin/stdout until stdin closes.
///
/// When both are pipes (how MCP clients launch servers) they are driven by
/// Tokio's non-blocking pipe reactor rather than the blocking thread pool,
/// which halves per-call latency (see BENCHMARKS.md); otherwise the blocking
/// handles are used. Large `resources/read` results of stdio upstreams are
/// relayed as the server wrote them, without being decoded and encoded
/// again. Needs a Tokio runtime with IO enabled.
pub async fn serve_stdio(gateway: Gateway) -> Result<(), toolexec::Error> {
    let unavailable = |m: String| toolexec::Error::backend_unavailable("mcp-gateway", m);
    gateway.session.set_principal(super::trace::STDIO_PRINCIPAL);
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    // Large results of stdio upstreams are written as the server wrote them.
    #[cfg(feature = "upstream")]
    let stdout = {
        gateway.session.set_verbatim();
        crate::verbatim::ReleasingWriter::new(stdout).widening(1)
    };
    let running = match gateway.serve((stdin, stdout)).await {
        Ok(r) => r,
        // stdin closed before a client said hello: nothing to serve.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(e) => return Err(unavailable(format!("stdio handshake failed: {e}"))),
    };
    running
        .waiting()
        .await
        .map_err(|e| unavailable(format!("stdio server task failed: {e}")))?;
    Ok(())
}
