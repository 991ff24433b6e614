//! The `toolexec` command: a thin layer over the `toolexec` library.

mod args;
mod auth;
mod code;
mod commands;
mod config;
mod fleet;
mod render;
mod runtime_server;
mod runtimes;
mod serve;
mod telemetry;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // The sandbox init runs inside every bubblewrap sandbox: before clap,
    // logging or a runtime, so it starts fast and touches nothing else.
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.first().map(String::as_str) == Some(toolexec_bwrap::init::SUBCOMMAND) {
        return toolexec_bwrap::init::main(&raw);
    }
    let cli = args::Cli::parse();
    if matches!(cli.command, args::Command::ScriptWorker) {
        // Logs go to stderr: stdout carries the tool channel.
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env(telemetry::LOG_ENV)
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .init();
        return script_worker();
    }
    // Other commands install logging and telemetry once their configuration
    // is read (`commands::dispatch`); logs go to stderr, as stdout carries
    // results (and, for `serve`, the protocol).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(commands::dispatch(cli));
    // Tools that ignored cancellation must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    ExitCode::from(code)
}

/// `toolexec __script-worker`: no configuration, a single-threaded
/// runtime, the outcome over the tool channel; exit 0 once it is sent.
fn script_worker() -> ExitCode {
    toolexec_code::worker::worker_main()
}
