//! Helpers of the MCP tests: `gateway` (the demo catalog, an in-process
//! HTTP gateway, the example server binary), `hardened` (bubblewrap with
//! the real code worker) and `upstream` (child processes, ports, events).

pub(crate) mod gateway;
pub(crate) mod hardened;
pub(crate) mod upstream;
