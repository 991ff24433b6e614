//! Helpers of the MCP tests: `gateway` (the demo catalog, an in-process
//! HTTP gateway, the example server binary), `hardened` (bubblewrap with
//! the real code worker) and `upstream` (child processes, ports, events).

pub mod gateway;
pub mod hardened;
pub mod upstream;
