//! `toolexec runtime-server`: runs units for remote callers on this
//! machine's runtimes (the same `[runtimes]` configuration as the rest of
//! the CLI), over [`toolexec_remote::RuntimeServer`].

use std::io::{self, Write};

use serde_json::json;
use toolexec::Error;
use toolexec_remote::auth::KeySource;
use toolexec_remote::{RuntimeServer, ServerConfig};
use toolexec_runtime::Runtimes;

use crate::args::RuntimeServerArgs;

/// The server's settings from the flags; the key is loaded (never printed).
pub(crate) fn server_config(args: &RuntimeServerArgs) -> Result<ServerConfig, Error> {
    let (source, field) = match (&args.key_file, &args.key_env) {
        (Some(path), None) => (KeySource::File(path.clone()), "key_file"),
        (None, Some(name)) => (KeySource::Env(name.clone()), "key_env"),
        // clap requires exactly one of them.
        _ => {
            return Err(Error::invalid_request(
                "key",
                "give --key-file PATH or --key-env NAME",
            ));
        }
    };
    let key = source.load().map_err(|e| {
        let message = e.to_string();
        let message = message
            .strip_prefix("invalid_request: ")
            .unwrap_or(&message);
        Error::invalid_request(field, message.to_owned())
    })?;
    let mut config = ServerConfig::new(key);
    if let Some(skew) = args.max_skew {
        config.max_clock_skew = skew;
    }
    if let Some(body) = args.max_body {
        config.max_body_bytes = body;
    }
    if let Some(runs) = args.max_runs {
        config.max_concurrent_runs = runs as usize;
    }
    config.hosts = args.hosts.clone();
    Ok(config)
}

/// Binds, prints `listening on http://ADDR` (or `{"listening": ...}` with
/// `--json`) on stdout, and serves until SIGTERM or Ctrl-C.
pub(crate) async fn run(
    runtimes: Runtimes,
    config: ServerConfig,
    args: &RuntimeServerArgs,
    json_out: bool,
) -> Result<(), Error> {
    let addr = crate::serve::parse_bind(&args.listen).map_err(|_| {
        Error::invalid_request(
            "listen",
            format!("expected PORT or IP:PORT, got {:?}", args.listen),
        )
    })?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::invalid_request("listen", format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::backend_unavailable("runtime-server", e.to_string()))?;
    // Handlers first: whoever reads the address may signal at once.
    let shutdown = crate::serve::shutdown_signal("runtime-server")?;
    let url = format!("http://{bound}");
    {
        let mut out = io::stdout().lock();
        let written = if json_out {
            // One line, so that a reader can take the first line.
            writeln!(out, "{}", json!({"listening": url}))
        } else {
            writeln!(out, "listening on {url}")
        };
        // Whoever started the server reads the address from this line.
        written
            .and_then(|()| out.flush())
            .map_err(|e| Error::backend_unavailable("runtime-server", format!("stdout: {e}")))?;
    }
    let available: Vec<String> = runtimes
        .list()
        .into_iter()
        .filter(|r| r.available)
        .map(|r| r.name)
        .collect();
    tracing::info!(%url, runtimes = ?available, "runtime server listening");
    let server = RuntimeServer::new(runtimes, config);
    server
        .serve(listener, shutdown)
        .await
        .map_err(|e| Error::backend_unavailable("runtime-server", e.to_string()))
}
