//! The MCP gateway over the built-in catalog (plus two demo tools), for
//! trying it with real clients and for the external-client tests.
//!
//! ```text
//! gateway_server [--expose meta|all|both]                      # stdio
//! gateway_server --http 127.0.0.1:8080 (--token TOKEN | --insecure-no-auth) [--expose ...]
//! ```
//!
//! In HTTP mode the first line on stdout is `listening http://ADDR/mcp`.

#[path = "../tests/support/gateway.rs"]
mod support;

use std::io::Write as _;

use tokio_util::sync::CancellationToken;
use toolexec::Secret;
use toolexec_mcp::gateway::{self, Expose, Gateway, GatewayOptions, HttpAuth, HttpOptions};

fn usage() -> ! {
    eprintln!(
        "usage: gateway_server [--expose meta|all|both] [--http ADDR (--token TOKEN | --insecure-no-auth)]"
    );
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    let mut expose = Expose::Meta;
    let mut http = None;
    let mut auth = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--expose" => {
                expose = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--http" => http = Some(args.next().unwrap_or_else(|| usage())),
            "--token" => {
                auth = Some(HttpAuth::Bearer(Secret::new(
                    args.next().unwrap_or_else(|| usage()),
                )))
            }
            "--insecure-no-auth" => auth = Some(HttpAuth::InsecureNoAuth),
            _ => usage(),
        }
    }
    let gateway = Gateway::new(
        support::demo_exec(),
        GatewayOptions {
            expose,
            ..GatewayOptions::default()
        },
    );
    let result = match http {
        None => gateway::serve_stdio(gateway).await,
        Some(addr) => {
            let bind = addr.parse().unwrap_or_else(|_| usage());
            let auth = auth.unwrap_or_else(|| usage());
            let shutdown = CancellationToken::new();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                let _ = tokio::signal::ctrl_c().await;
                stop.cancel();
            });
            match gateway::bind_http(gateway, HttpOptions::new(bind, auth), shutdown).await {
                Ok((addr, server)) => {
                    println!("listening http://{addr}/mcp");
                    let _ = std::io::stdout().flush();
                    server.await
                }
                Err(e) => Err(e),
            }
        }
    };
    if let Err(e) = result {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
