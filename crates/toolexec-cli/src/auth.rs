//! `toolexec auth login|status|logout`: OAuth sign-in to the upstream
//! servers configured with `auth.oauth` ([`toolexec_mcp::upstream::oauth`]
//! does the work).

use std::io::Write as _;

use serde_json::json;
use toolexec::Error;
use toolexec_mcp::upstream::oauth::{self, LoginOptions};
use toolexec_mcp::upstream::{UpstreamConfig, UpstreamTransport};

use crate::args::AuthCommand;
use crate::commands::{EXIT_OK, Failure};
use crate::config::Config;
use crate::render;

fn has_oauth(server: &UpstreamConfig) -> bool {
    matches!(
        &server.transport,
        UpstreamTransport::Http { oauth: Some(_), .. }
    )
}

/// The configured server named `name`, if it uses OAuth.
fn server<'a>(config: &'a Config, name: &str) -> Result<&'a UpstreamConfig, Error> {
    let found = config.servers.iter().find(|s| s.name == name);
    match found {
        Some(s) if has_oauth(s) => Ok(s),
        Some(_) => Err(Error::invalid_request(
            "server",
            format!("{name} has no auth.oauth in [[servers]]"),
        )),
        None => {
            let known: Vec<&str> = config
                .servers
                .iter()
                .filter(|s| has_oauth(s))
                .map(|s| s.name.as_str())
                .collect();
            Err(Error::invalid_request(
                "server",
                format!(
                    "no server {name:?} (servers with auth.oauth: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            ))
        }
    }
}

/// Starts a browser on `url` where one can run (a graphical session),
/// without waiting for it.
fn open_browser(url: &str) -> bool {
    let program = if cfg!(target_os = "macos") {
        "open"
    } else if std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some()
    {
        "xdg-open"
    } else {
        return false;
    };
    std::process::Command::new(program)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .is_ok()
}

/// Runs an `auth` command.
pub(crate) async fn run(config: &Config, cmd: &AuthCommand, json: bool) -> Result<u8, Failure> {
    let mut out = std::io::stdout();
    let io = Failure::Io;
    match cmd {
        AuthCommand::Login(args) => {
            let server = server(config, &args.server)?;
            let mut options = LoginOptions::default();
            options.redirect_port = args.port;
            options.scopes = args.scopes.clone();
            options.timeout = args.timeout;
            let no_browser = args.no_browser;
            let open = move |url: &str| {
                let mut err = std::io::stderr().lock();
                let _ = writeln!(err, "Open this URL to sign in:\n\n  {url}\n");
                if !no_browser && open_browser(url) {
                    let _ = writeln!(err, "(a browser was started)");
                }
                let _ = writeln!(err, "Waiting for the redirect...");
            };
            let report = oauth::login(server, &options, &open).await?;
            if json {
                render::json(&mut out, &json!(report)).map_err(io)?;
            } else {
                writeln!(
                    out,
                    "Signed in to {} as client {} (scopes: {}); tokens in {}",
                    report.server,
                    report.client_id,
                    if report.scopes.is_empty() {
                        "none granted".to_owned()
                    } else {
                        report.scopes.join(" ")
                    },
                    report.token_file.display()
                )
                .map_err(io)?;
            }
        }
        AuthCommand::Status { server: name } => {
            let servers: Vec<&UpstreamConfig> = match name {
                Some(n) => vec![server(config, n)?],
                None => config.servers.iter().filter(|s| has_oauth(s)).collect(),
            };
            let mut all = Vec::with_capacity(servers.len());
            for s in servers {
                all.push(oauth::status(s).await?);
            }
            if json {
                render::json(&mut out, &json!(all)).map_err(io)?;
            } else if all.is_empty() {
                writeln!(out, "No server has auth.oauth.").map_err(io)?;
            } else {
                for s in all {
                    let state = if !s.signed_in {
                        "not signed in".to_owned()
                    } else {
                        let expiry = match s.expires_in {
                            Some(secs) if secs <= 0 => "expired".to_owned(),
                            Some(secs) => format!("expires in {secs}s"),
                            None => "no expiry given".to_owned(),
                        };
                        format!(
                            "signed in, {expiry}{}, scopes: {}",
                            if s.refreshable { ", refreshable" } else { "" },
                            s.scopes.join(" ")
                        )
                    };
                    writeln!(out, "{}: {state} ({})", s.server, s.token_file.display())
                        .map_err(io)?;
                }
            }
        }
        AuthCommand::Logout { server: name } => {
            let removed = oauth::logout(server(config, name)?).await?;
            if json {
                render::json(&mut out, &json!({"server": name, "removed": removed})).map_err(io)?;
            } else if removed {
                writeln!(out, "Signed out of {name} (tokens deleted).").map_err(io)?;
            } else {
                writeln!(out, "{name} had no stored tokens.").map_err(io)?;
            }
        }
    }
    Ok(EXIT_OK)
}
