//! `[gateway]`: what `toolexec serve` publishes, its HTTP auth, and the
//! bounds on connections, sessions and tool runs.

use std::path::Path;

use serde::Deserialize;
use toolexec::Secret;
use toolexec_mcp::gateway::{Expose, HttpLimits, RunLimits};
use toolexec_runtime::Profile;

use super::{DurationText, ResolveError, SecretSource, resolve_secret};

/// `[gateway]`.
#[derive(Debug, Default)]
pub(crate) struct GatewayConfig {
    /// What `serve` publishes, unless `--expose` says otherwise.
    pub expose: Option<Expose>,
    /// Bearer token for HTTP mode, unless `--token-file` says otherwise.
    pub token: Option<Secret>,
    /// Extra allowed `Origin`s for HTTP mode.
    pub allowed_origins: Vec<String>,
    /// Where `execute_code` runs scripts (`standard`: in process;
    /// `hardened`: in a sandbox runtime), unless `--code-profile` says
    /// otherwise.
    pub code_profile: Option<Profile>,
    /// HTTP connections, header and body time, sessions.
    pub http_limits: HttpLimits,
    /// Tool runs in flight and waiting.
    pub runs: RunLimits,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGateway {
    expose: Option<toml::Spanned<String>>,
    token: Option<toml::Spanned<SecretSource>>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    code_profile: Option<toml::Spanned<String>>,
    max_connections: Option<toml::Spanned<usize>>,
    header_timeout: Option<DurationText>,
    body_timeout: Option<DurationText>,
    max_sessions: Option<toml::Spanned<usize>>,
    session_idle_timeout: Option<DurationText>,
    max_concurrent_runs: Option<toml::Spanned<usize>>,
    max_queued_runs: Option<usize>,
}

/// A count that must be at least 1.
fn positive(
    v: Option<toml::Spanned<usize>>,
    key: &str,
    default: usize,
) -> Result<usize, ResolveError> {
    match v {
        None => Ok(default),
        Some(n) if *n.get_ref() == 0 => Err((
            format!("gateway.{key}"),
            "must be greater than 0".into(),
            Some(n.span()),
        )),
        Some(n) => Ok(n.into_inner()),
    }
}

impl RawGateway {
    pub(super) fn resolve(self, base: &Path) -> Result<GatewayConfig, ResolveError> {
        let expose = match &self.expose {
            None => None,
            Some(e) => Some(e.get_ref().parse::<Expose>().map_err(|_| {
                (
                    "gateway.expose".to_owned(),
                    format!("expected meta, all or both, got {:?}", e.get_ref()),
                    Some(e.span()),
                )
            })?),
        };
        let token = match &self.token {
            Some(src) => Some(resolve_secret(src, "gateway.token", base)?),
            None => None,
        };
        let code_profile = match self.code_profile {
            Some(p) => match p.get_ref().as_str() {
                "standard" => Some(Profile::Standard),
                "hardened" => Some(Profile::Hardened),
                other => {
                    return Err((
                        "gateway.code_profile".into(),
                        format!(
                            "expected \"standard\" (in process) or \"hardened\" (in a sandbox runtime), got {other:?}"
                        ),
                        Some(p.span()),
                    ));
                }
            },
            None => None,
        };
        // Durations are never zero (`DurationText` refuses "0s").
        let mut http_limits = HttpLimits::default();
        http_limits.max_connections = positive(
            self.max_connections,
            "max_connections",
            http_limits.max_connections,
        )?;
        http_limits.max_sessions =
            positive(self.max_sessions, "max_sessions", http_limits.max_sessions)?;
        if let Some(d) = self.header_timeout {
            http_limits.header_timeout = d.0;
        }
        if let Some(d) = self.body_timeout {
            http_limits.body_timeout = d.0;
        }
        if let Some(d) = self.session_idle_timeout {
            http_limits.session_idle_timeout = d.0;
        }
        let mut runs = RunLimits::default();
        runs.max_concurrent = positive(
            self.max_concurrent_runs,
            "max_concurrent_runs",
            runs.max_concurrent,
        )?;
        if let Some(q) = self.max_queued_runs {
            runs.max_queued = q;
        }
        Ok(GatewayConfig {
            expose,
            token,
            allowed_origins: self.allowed_origins,
            code_profile,
            http_limits,
            runs,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use crate::config::Config;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("/etc/toolexec.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn limits_have_defaults_and_can_be_set() {
        let c = parse("").unwrap();
        assert_eq!(c.gateway.http_limits, Default::default());
        assert_eq!(c.gateway.runs, Default::default());
        let c = parse(
            r#"[gateway]
max_connections = 8
header_timeout = "2s"
body_timeout = "3s"
max_sessions = 4
session_idle_timeout = "1m"
max_concurrent_runs = 2
max_queued_runs = 0
"#,
        )
        .unwrap();
        let l = c.gateway.http_limits;
        assert_eq!(l.max_connections, 8);
        assert_eq!(l.header_timeout, Duration::from_secs(2));
        assert_eq!(l.body_timeout, Duration::from_secs(3));
        assert_eq!(l.max_sessions, 4);
        assert_eq!(l.session_idle_timeout, Duration::from_secs(60));
        assert_eq!(c.gateway.runs.max_concurrent, 2);
        assert_eq!(c.gateway.runs.max_queued, 0);
    }

    #[test]
    fn zero_limits_are_refused_with_their_key() {
        for (text, key) in [
            (
                "[gateway]\nmax_connections = 0\n",
                "gateway.max_connections",
            ),
            ("[gateway]\nmax_sessions = 0\n", "gateway.max_sessions"),
            (
                "[gateway]\nmax_concurrent_runs = 0\n",
                "gateway.max_concurrent_runs",
            ),
            (
                "[gateway]\nheader_timeout = \"0s\"\n",
                "gateway.header_timeout",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert!(
                err.starts_with("invalid_request: config /etc/toolexec.toml:2:"),
                "{err}"
            );
            assert!(err.contains(key), "{text:?}: {err}");
        }
    }
}
