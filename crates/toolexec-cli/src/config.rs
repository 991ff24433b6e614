//! `toolexec.toml`: upstream MCP servers, built-ins, limits and gateway auth.
//!
//! Errors name the file, line, column and key. Secrets (`{ env = "..." }` or
//! `{ file = "..." }`, or a literal string) are resolved at load time and
//! kept in [`Secret`]s, which never print.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toolexec::{Limits, Secret};
use toolexec_builtins::Group;
use toolexec_mcp::gateway::Expose;
use toolexec_mcp::upstream::{UpstreamConfig, UpstreamTransport};

/// The file read when `--config` is not given, if it exists.
pub const DEFAULT_FILE: &str = "toolexec.toml";

/// A loaded, validated configuration.
#[derive(Debug)]
pub struct Config {
    /// Built-in groups to register.
    pub builtins: Vec<Group>,
    /// Pipeline limits.
    pub limits: Limits,
    /// Upstream MCP servers.
    pub servers: Vec<UpstreamConfig>,
    /// `toolexec serve` settings.
    pub gateway: GatewayConfig,
}

/// `[gateway]`.
#[derive(Debug, Default)]
pub struct GatewayConfig {
    /// What `serve` publishes, unless `--expose` says otherwise.
    pub expose: Option<Expose>,
    /// Bearer token for HTTP mode, unless `--token-file` says otherwise.
    pub token: Option<Secret>,
    /// Extra allowed `Origin`s for HTTP mode.
    pub allowed_origins: Vec<String>,
}

/// A configuration error: file, line, column, key and message.
#[derive(Debug)]
pub struct ConfigError {
    file: PathBuf,
    position: Option<(usize, usize)>,
    key: String,
    message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid_request: config {}", self.file.display())?;
        if let Some((line, col)) = self.position {
            write!(f, ":{line}:{col}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": key `{}`", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Built-in catalog only, default limits.
    pub fn builtin() -> Self {
        Config {
            builtins: Group::ALL.to_vec(),
            limits: Limits::default(),
            servers: Vec::new(),
            gateway: GatewayConfig::default(),
        }
    }

    /// Loads `explicit`, else `./toolexec.toml` if present, else built-ins.
    pub fn discover(explicit: Option<&Path>) -> Result<Self, ConfigError> {
        match explicit {
            Some(p) => Config::load(p),
            None if Path::new(DEFAULT_FILE).is_file() => Config::load(Path::new(DEFAULT_FILE)),
            None => Ok(Config::builtin()),
        }
    }

    /// Loads and validates one file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_owned(),
            position: None,
            key: String::new(),
            message: format!("cannot read: {e}"),
        })?;
        Config::parse(&text, path)
    }

    /// Parses `text` as the contents of `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let error =
            |span: Option<std::ops::Range<usize>>, key: String, message: String| ConfigError {
                file: path.to_owned(),
                position: span.map(|s| line_col(text, s.start)),
                key,
                message,
            };
        let de = toml::Deserializer::parse(text)
            .map_err(|e| error(e.span(), String::new(), e.message().to_owned()))?;
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            // `toml::Spanned` shows up in serde's path as a private field: drop it.
            let key = e
                .path()
                .to_string()
                .split('.')
                .filter(|seg| !seg.starts_with("$__serde_spanned"))
                .collect::<Vec<_>>()
                .join(".");
            let inner = e.into_inner();
            error(inner.span(), key, inner.message().to_owned())
        })?;
        raw.resolve(path)
            .map_err(|(key, message, span)| error(span, key, message))
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    builtins: RawBuiltins,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    servers: Vec<toml::Spanned<RawServer>>,
    #[serde(default)]
    gateway: RawGateway,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBuiltins {
    /// `true` (all, the default), `false` (none) or a list of groups.
    enabled: Option<Enabled>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Enabled {
    All(bool),
    Groups(Vec<GroupName>),
}

struct GroupName(Group);

impl<'de> Deserialize<'de> for GroupName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse::<Group>().map(GroupName).map_err(|_| {
            serde::de::Error::custom(format!(
                "unknown built-in group {s:?}; expected one of {}",
                Group::ALL
                    .iter()
                    .map(|g| g.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    default_timeout: Option<DurationText>,
    max_input_bytes: Option<usize>,
    max_input_depth: Option<usize>,
    max_output_bytes: Option<usize>,
    max_output_depth: Option<usize>,
    max_chain_steps: Option<usize>,
    max_violations: Option<usize>,
}

/// A duration written as `"500ms"`, `"30s"`, `"2m"`.
struct DurationText(Duration);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        crate::args::parse_duration(&s)
            .map(DurationText)
            .map_err(serde::de::Error::custom)
    }
}

/// A secret: a literal string, `{ env = "NAME" }` or `{ file = "PATH" }`.
#[derive(Deserialize)]
#[serde(untagged)]
enum SecretSource {
    Literal(String),
    Env { env: String },
    File { file: PathBuf },
}

impl SecretSource {
    fn resolve(&self, key: &str, base: &Path) -> Result<Secret, (String, String)> {
        match self {
            SecretSource::Literal(s) => Ok(Secret::new(s.clone())),
            SecretSource::Env { env } => std::env::var(env).map(Secret::new).map_err(|_| {
                (
                    key.to_owned(),
                    format!("environment variable {env} is not set"),
                )
            }),
            SecretSource::File { file } => {
                let path = if file.is_absolute() {
                    file.clone()
                } else {
                    base.join(file)
                };
                std::fs::read_to_string(&path)
                    .map(|s| Secret::new(s.trim_end_matches(['\n', '\r']).to_owned()))
                    .map_err(|e| {
                        (
                            key.to_owned(),
                            format!("cannot read secret file {}: {}", path.display(), e.kind()),
                        )
                    })
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    name: String,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, toml::Spanned<SecretSource>>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, toml::Spanned<SecretSource>>,
    bearer_token: Option<toml::Spanned<SecretSource>>,
    timeout: Option<DurationText>,
    max_concurrency: Option<usize>,
    #[serde(default)]
    lazy: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawGateway {
    expose: Option<toml::Spanned<String>>,
    token: Option<toml::Spanned<SecretSource>>,
    #[serde(default)]
    allowed_origins: Vec<String>,
}

/// A resolution error: key, message, and where in the file (when known).
type ResolveError = (String, String, Option<std::ops::Range<usize>>);

/// Attaches `span` to a key/message error.
fn at(span: &std::ops::Range<usize>) -> impl Fn((String, String)) -> ResolveError + '_ {
    move |(key, message)| (key, message, Some(span.clone()))
}

/// Resolves a secret written at `src`'s position in the file.
fn resolve_secret(
    src: &toml::Spanned<SecretSource>,
    key: &str,
    base: &Path,
) -> Result<Secret, ResolveError> {
    src.get_ref().resolve(key, base).map_err(at(&src.span()))
}

impl RawConfig {
    fn resolve(self, path: &Path) -> Result<Config, ResolveError> {
        let base = path.parent().unwrap_or(Path::new("."));
        let builtins = match self.builtins.enabled {
            None | Some(Enabled::All(true)) => Group::ALL.to_vec(),
            Some(Enabled::All(false)) => Vec::new(),
            Some(Enabled::Groups(g)) => g.into_iter().map(|g| g.0).collect(),
        };
        let mut limits = Limits::default();
        let l = self.limits;
        if let Some(d) = l.default_timeout {
            limits.default_timeout = d.0;
        }
        let set = |target: &mut usize, v: Option<usize>, key: &str| -> Result<(), ResolveError> {
            match v {
                Some(0) => Err((
                    format!("limits.{key}"),
                    "must be greater than 0".into(),
                    None,
                )),
                Some(v) => {
                    *target = v;
                    Ok(())
                }
                None => Ok(()),
            }
        };
        set(
            &mut limits.max_input_bytes,
            l.max_input_bytes,
            "max_input_bytes",
        )?;
        set(
            &mut limits.max_input_depth,
            l.max_input_depth,
            "max_input_depth",
        )?;
        set(
            &mut limits.max_output_bytes,
            l.max_output_bytes,
            "max_output_bytes",
        )?;
        set(
            &mut limits.max_output_depth,
            l.max_output_depth,
            "max_output_depth",
        )?;
        set(
            &mut limits.max_chain_steps,
            l.max_chain_steps,
            "max_chain_steps",
        )?;
        set(
            &mut limits.max_violations,
            l.max_violations,
            "max_violations",
        )?;

        let mut servers = Vec::with_capacity(self.servers.len());
        let mut names = std::collections::HashSet::new();
        for (i, spanned) in self.servers.into_iter().enumerate() {
            let span = spanned.span();
            let server = resolve_server(spanned.into_inner(), i, base, &builtins, &limits)
                .map_err(|(key, message, at)| (key, message, at.or_else(|| Some(span.clone()))))?;
            if !names.insert(server.name.clone()) {
                return Err(at(&span)((
                    format!("servers[{i}].name"),
                    format!("duplicate server name {:?}", server.name),
                )));
            }
            servers.push(server);
        }
        let expose = match &self.gateway.expose {
            None => None,
            Some(e) => Some(e.get_ref().parse::<Expose>().map_err(|_| {
                (
                    "gateway.expose".to_owned(),
                    format!("expected meta, all or both, got {:?}", e.get_ref()),
                    Some(e.span()),
                )
            })?),
        };
        let token = match &self.gateway.token {
            Some(src) => Some(resolve_secret(src, "gateway.token", base)?),
            None => None,
        };
        Ok(Config {
            builtins,
            limits,
            servers,
            gateway: GatewayConfig {
                expose,
                token,
                allowed_origins: self.gateway.allowed_origins,
            },
        })
    }
}

/// Validates one `[[servers]]` table (its index `i`) into an upstream config.
fn resolve_server(
    s: RawServer,
    i: usize,
    base: &Path,
    builtins: &[Group],
    limits: &Limits,
) -> Result<UpstreamConfig, ResolveError> {
    let key = |k: &str| format!("servers[{i}].{k}");
    let fail = |k: &str, message: String| -> ResolveError { (key(k), message, None) };
    if let Err(reason) = toolexec::ToolIdRef::parse(&format!("{}:x", s.name)) {
        return Err(fail("name", format!("not a valid namespace: {reason}")));
    }
    if Group::ALL.iter().any(|g| g.as_str() == s.name)
        && builtins.iter().any(|g| g.as_str() == s.name)
    {
        return Err(fail(
            "name",
            format!("{:?} is a built-in namespace", s.name),
        ));
    }
    let transport = match (s.command, s.url) {
        (Some(command), None) => {
            if !s.headers.is_empty() || s.bearer_token.is_some() {
                return Err(fail(
                    "headers",
                    "headers and bearer_token are for url servers".into(),
                ));
            }
            let mut env = BTreeMap::new();
            for (name, src) in &s.env {
                env.insert(
                    name.clone(),
                    resolve_secret(src, &key(&format!("env.{name}")), base)?,
                );
            }
            UpstreamTransport::Stdio {
                command,
                args: s.args,
                env,
                cwd: s
                    .cwd
                    .map(|c| if c.is_absolute() { c } else { base.join(c) }),
            }
        }
        (None, Some(url)) => {
            if !s.args.is_empty() || !s.env.is_empty() || s.cwd.is_some() {
                return Err(fail(
                    "args",
                    "args, env and cwd are for command servers".into(),
                ));
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(fail(
                    "url",
                    format!("expected an http:// or https:// URL, got {url:?}"),
                ));
            }
            let mut headers = BTreeMap::new();
            for (name, src) in &s.headers {
                headers.insert(
                    name.clone(),
                    resolve_secret(src, &key(&format!("headers.{name}")), base)?,
                );
            }
            let bearer_token = match &s.bearer_token {
                Some(src) => Some(resolve_secret(src, &key("bearer_token"), base)?),
                None => None,
            };
            UpstreamTransport::Http {
                url,
                headers,
                bearer_token,
            }
        }
        (Some(_), Some(_)) => {
            return Err(fail(
                "url",
                "give either command (stdio) or url (HTTP), not both".into(),
            ));
        }
        (None, None) => {
            return Err(fail(
                "command",
                "missing: give command (stdio) or url (HTTP)".into(),
            ));
        }
    };
    let max_concurrency = s.max_concurrency.unwrap_or(16);
    if max_concurrency == 0 {
        return Err(fail("max_concurrency", "must be greater than 0".into()));
    }
    Ok(UpstreamConfig {
        name: s.name,
        transport,
        call_timeout: s.timeout.map_or(limits.default_timeout, |d| d.0),
        max_concurrency,
        lazy: s.lazy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/toolexec.toml"))
    }

    #[test]
    fn full_example_parses() {
        // SAFETY: tests in this module are the only users of this variable.
        unsafe { std::env::set_var("TOOLEXEC_TEST_SECRET", "hunter2") };
        let c = parse(
            r#"
[builtins]
enabled = ["math", "json"]

[limits]
default_timeout = "10s"
max_input_bytes = 4096

[gateway]
expose = "both"
token = { env = "TOOLEXEC_TEST_SECRET" }

[[servers]]
name = "everything"
command = "node"
args = ["server.js", "stdio"]
env = { API_KEY = { env = "TOOLEXEC_TEST_SECRET" }, MODE = "test" }
timeout = "5s"

[[servers]]
name = "remote"
url = "http://127.0.0.1:3001/mcp"
headers = { "X-Api-Key" = "abc" }
bearer_token = { env = "TOOLEXEC_TEST_SECRET" }
lazy = true
"#,
        )
        .unwrap();
        assert_eq!(c.builtins, [Group::Math, Group::Json]);
        assert_eq!(c.limits.default_timeout, Duration::from_secs(10));
        assert_eq!(c.limits.max_input_bytes, 4096);
        assert_eq!(c.servers.len(), 2);
        assert_eq!(c.servers[0].call_timeout, Duration::from_secs(5));
        assert_eq!(c.servers[1].call_timeout, Duration::from_secs(10));
        assert!(c.servers[1].lazy);
        assert_eq!(c.gateway.token.as_ref().unwrap().expose(), "hunter2");
        let debug = format!("{c:?}");
        assert!(
            !debug.contains("hunter2"),
            "secret leaked into Debug: {debug}"
        );
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let cases = [
            (
                "[limits]\ndefault_timeout = \"5 parsecs\"\n",
                "2:19",
                "limits.default_timeout",
            ),
            (
                "[[servers]]\nname = \"a\"\ncommand = \"x\"\nbogus = 1\n",
                "4:1",
                "servers[0]",
            ),
            (
                "[builtins]\nenabled = [\"math\", \"nope\"]\n",
                "2:",
                "builtins.enabled",
            ),
            ("[[servers]]\nname = \"a\"\n", "1:1", "servers[0].command"),
            (
                "[[servers]]\nname = \"a b\"\ncommand = \"x\"\n",
                "1:1",
                "servers[0].name",
            ),
            (
                "[[servers]]\nname = \"a\"\ncommand = \"x\"\nurl = \"http://h\"\n",
                "1:1",
                "servers[0].url",
            ),
            (
                "[[servers]]\nname = \"a\"\nurl = \"http://h\"\nbearer_token = { env = \"TOOLEXEC_SURELY_UNSET\" }\n",
                "4:16",
                "servers[0].bearer_token",
            ),
            (
                "[gateway]\nexpose = \"everything\"\n",
                "2:10",
                "gateway.expose",
            ),
            ("this is not toml", "1:", ""),
        ];
        for (text, position, key) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(
                err.starts_with("invalid_request: config /etc/toolexec.toml"),
                "{err}"
            );
            assert!(
                err.contains(&format!("toolexec.toml:{position}")),
                "{text:?}: {err}"
            );
            assert!(err.contains(key), "{text:?}: {err}");
        }
    }

    #[test]
    fn secret_file_errors_never_print_contents() {
        let dir = std::env::temp_dir().join(format!("toolexec-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "s3cr3t-token\n").unwrap();
        let c = Config::parse(
            "[gateway]\ntoken = { file = \"token\" }\n",
            &dir.join("toolexec.toml"),
        )
        .unwrap();
        assert_eq!(c.gateway.token.unwrap().expose(), "s3cr3t-token");
        let err = Config::parse(
            "[gateway]\ntoken = { file = \"missing\" }\n",
            &dir.join("toolexec.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("gateway.token") && err.contains("missing"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
