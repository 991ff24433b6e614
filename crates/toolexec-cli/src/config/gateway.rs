//! `[gateway]`: what `toolexec serve` publishes, its HTTP auth, and the
//! bounds on connections, sessions and tool runs (`toolexec-mcp`'s
//! [`HttpLimits`] and [`RunLimits`], whose keys the table writes flat).

use std::path::Path;

use serde::Deserialize;
use toolexec::Secret;
use toolexec_mcp::gateway::{
    Expose, HttpAuth, HttpLimits, NamedToken, OAuthOptions, RunLimits, TaskOptions,
};
use toolexec_runtime::Profile;

use super::error::Fault;
use super::values::{DurationText, SecretSource};

/// `[gateway]`.
#[derive(Debug, Default)]
pub(crate) struct GatewayConfig {
    /// What `serve` publishes, unless `--expose` says otherwise.
    pub expose: Option<Expose>,
    /// Bearer token for HTTP mode, unless `--token-file` says otherwise.
    pub token: Option<Secret>,
    /// Named bearer tokens for HTTP mode (`tokens = [{name, token}]`):
    /// each caller's principal is its token's name.
    pub tokens: Vec<NamedToken>,
    /// `[gateway.auth]`: OAuth access tokens of an issuer instead of
    /// static tokens.
    pub oauth: Option<OAuthOptions>,
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
    /// When long calls become tasks (MCP Tasks extension).
    pub tasks: TaskOptions,
}

/// The `[gateway]` table as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct GatewayTable {
    expose: Option<ExposeText>,
    token: Option<SecretSource>,
    #[serde(default)]
    tokens: Vec<TokenTable>,
    auth: Option<AuthTable>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    code_profile: Option<CodeProfile>,
    max_connections: Option<usize>,
    header_timeout: Option<DurationText>,
    body_timeout: Option<DurationText>,
    max_sessions: Option<usize>,
    session_idle_timeout: Option<DurationText>,
    max_concurrent_runs: Option<usize>,
    max_queued_runs: Option<usize>,
    /// `false`: never answer a call with a task.
    tasks: Option<bool>,
    /// How long a call runs before it becomes a task.
    task_after: Option<DurationText>,
    /// How long a task and its result are kept.
    task_ttl: Option<DurationText>,
}

/// One of `tokens`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenTable {
    name: String,
    token: SecretSource,
}

/// `[gateway.auth]`: the gateway as an OAuth resource server.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthTable {
    issuer: String,
    audience: OneOrMany,
    jwks_uri: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
    resource: Option<String>,
    leeway: Option<DurationText>,
    ca_file: Option<std::path::PathBuf>,
}

/// A string or a list of strings.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl AuthTable {
    fn resolve(self, base: &Path) -> Result<OAuthOptions, Fault> {
        let audience = match self.audience {
            OneOrMany::One(a) => vec![a],
            OneOrMany::Many(list) => list,
        };
        let mut o = OAuthOptions::new(self.issuer, String::new());
        o.audience = audience;
        o.jwks_uri = self.jwks_uri;
        o.scopes = self.scopes;
        o.resource = self.resource;
        if let Some(l) = self.leeway {
            o.leeway = l.0;
        }
        o.tls.ca_file = self.ca_file.map(|f| super::values::relative_to(base, &f));
        o.check()
            .map_err(|e| Fault::refused("gateway.auth", e, &[]))?;
        Ok(o)
    }
}

/// `meta`, `all` or `both`.
struct ExposeText(Expose);

impl<'de> Deserialize<'de> for ExposeText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map(ExposeText)
            .map_err(|_| serde::de::Error::custom(format!("expected meta, all or both, got {s:?}")))
    }
}

/// `standard` or `hardened`.
struct CodeProfile(Profile);

impl<'de> Deserialize<'de> for CodeProfile {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "standard" => Ok(CodeProfile(Profile::Standard)),
            "hardened" => Ok(CodeProfile(Profile::Hardened)),
            other => Err(serde::de::Error::custom(format!(
                "expected \"standard\" (in process) or \"hardened\" (in a sandbox runtime), got {other:?}"
            ))),
        }
    }
}

impl GatewayTable {
    /// The settings, the token read relative to `base`.
    pub(super) fn resolve(self, base: &Path) -> Result<GatewayConfig, Fault> {
        let token = match &self.token {
            Some(src) => Some(src.resolve("gateway.token", base)?),
            None => None,
        };
        if token.is_some() && !self.tokens.is_empty() {
            return Err(Fault::new(
                "gateway.tokens",
                "give either token (one shared token) or tokens (named ones), not both",
            ));
        }
        let mut tokens = Vec::with_capacity(self.tokens.len());
        for (i, t) in self.tokens.iter().enumerate() {
            tokens.push(NamedToken {
                name: t.name.clone(),
                token: t
                    .token
                    .resolve(&format!("gateway.tokens[{i}].token"), base)?,
            });
        }
        let oauth = self.auth.map(|a| a.resolve(base)).transpose()?;
        if oauth.is_some() && (token.is_some() || !tokens.is_empty()) {
            return Err(Fault::new(
                "gateway.auth",
                "give either auth (OAuth access tokens) or token/tokens (static ones), not both",
            ));
        }
        if !tokens.is_empty() {
            HttpAuth::Tokens(tokens.clone())
                .check()
                .map_err(|e| Fault::refused("gateway", e, &[]))?;
        }
        // Durations are never zero (`DurationText` refuses "0s").
        let mut http_limits = HttpLimits::default();
        let mut runs = RunLimits::default();
        let counts = [
            (
                "max_connections",
                self.max_connections,
                &mut http_limits.max_connections,
            ),
            (
                "max_sessions",
                self.max_sessions,
                &mut http_limits.max_sessions,
            ),
            (
                "max_concurrent_runs",
                self.max_concurrent_runs,
                &mut runs.max_concurrent,
            ),
        ];
        for (key, value, target) in counts {
            match value {
                Some(0) => {
                    return Err(Fault::new(
                        format!("gateway.{key}"),
                        "must be greater than 0",
                    ));
                }
                Some(n) => *target = n,
                None => {}
            }
        }
        let durations = [
            (self.header_timeout, &mut http_limits.header_timeout),
            (self.body_timeout, &mut http_limits.body_timeout),
            (
                self.session_idle_timeout,
                &mut http_limits.session_idle_timeout,
            ),
        ];
        for (value, target) in durations {
            if let Some(d) = value {
                *target = d.0;
            }
        }
        if let Some(q) = self.max_queued_runs {
            runs.max_queued = q;
        }
        let mut tasks = TaskOptions::default();
        if let Some(on) = self.tasks {
            tasks.enabled = on;
        }
        if let Some(d) = self.task_after {
            tasks.after = d.0;
        }
        if let Some(d) = self.task_ttl {
            if d.0.is_zero() {
                return Err(Fault::new(
                    "gateway.task_ttl",
                    "must be greater than 0".to_owned(),
                ));
            }
            tasks.ttl = d.0;
        }
        Ok(GatewayConfig {
            expose: self.expose.map(|e| e.0),
            token,
            tokens,
            oauth,
            allowed_origins: self.allowed_origins,
            code_profile: self.code_profile.map(|p| p.0),
            http_limits,
            runs,
            tasks,
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
    fn tasks_are_on_by_default_and_can_be_tuned() {
        let c = parse("").unwrap();
        assert!(c.gateway.tasks.enabled);
        let c = parse("[gateway]\ntasks = false\ntask_after = \"250ms\"\ntask_ttl = \"10m\"\n")
            .unwrap();
        assert!(!c.gateway.tasks.enabled);
        assert_eq!(c.gateway.tasks.after, Duration::from_millis(250));
        assert_eq!(c.gateway.tasks.ttl, Duration::from_secs(600));
        let err = parse("[gateway]\ntask_ttl = \"0s\"\n").unwrap_err();
        assert!(err.contains("gateway.task_ttl"), "{err}");
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
