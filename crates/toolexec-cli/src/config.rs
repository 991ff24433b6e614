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
use toolexec_mcp::upstream::{UpstreamConfig, UpstreamTransport};
use toolexec_runtime::{
    CommandToolDef, OutputMapping, Profile, ProfileMap, RuntimeLimits, StdinMapping, UnitKind,
};

mod gateway;

pub(crate) use gateway::GatewayConfig;
use gateway::RawGateway;

/// The file read when `--config` is not given, if it exists.
pub(crate) const DEFAULT_FILE: &str = "toolexec.toml";

/// A loaded, validated configuration.
#[derive(Debug)]
pub(crate) struct Config {
    /// Built-in groups to register.
    pub builtins: Vec<Group>,
    /// Pipeline limits.
    pub limits: Limits,
    /// Upstream MCP servers.
    pub servers: Vec<UpstreamConfig>,
    /// `toolexec serve` settings.
    pub gateway: GatewayConfig,
    /// `[runtimes]`: sandbox runtimes and the profile mapping.
    pub runtimes: RuntimesConfig,
    /// `[[commands]]`: command tools.
    pub commands: Vec<CommandToolDef>,
}

/// `[runtimes]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RuntimesConfig {
    /// Which runtimes serve each profile, in order of preference.
    pub map: ProfileMap,
    /// Registers the unsandboxed `host` runtime (dev profile only).
    pub allow_unsandboxed_host: bool,
    /// `[runtimes.bubblewrap]`.
    pub bubblewrap: BubblewrapOptions,
    /// `[runtimes.oci]` (runc and runsc).
    pub oci: OciOptions,
    /// `[runtimes.docker]`.
    pub docker: DockerOptions,
    /// `[runtimes.remote]`.
    pub remote: RemoteOptions,
    /// `[runtimes.wasm]`.
    pub wasm: WasmOptions,
}

/// `[runtimes.oci]`: runc (standard) and gVisor runsc (hardened).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OciOptions {
    /// The root filesystem: a directory, or a tarball (resolved against
    /// the config file's directory). Without one both runtimes are
    /// unavailable.
    pub rootfs: Option<PathBuf>,
    /// The `runc` binary (default: on `PATH`).
    pub runc: Option<PathBuf>,
    /// The `runsc` binary (default: on `PATH`).
    pub runsc: Option<PathBuf>,
}

/// `[runtimes.docker]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DockerOptions {
    /// The daemon's Unix socket (default: `DOCKER_HOST`, else
    /// `/var/run/docker.sock`).
    pub socket: Option<PathBuf>,
    /// The image units run in; without one the runtime is unavailable.
    pub image: Option<String>,
}

/// `[runtimes.remote]`: a `toolexec runtime-server` elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteOptions {
    /// `http://host:port` of the server; without one the runtime is
    /// unavailable.
    pub url: Option<String>,
    /// Where the shared key comes from (`key_file` or `key_env`).
    pub key: Option<toolexec_remote::auth::KeySource>,
    /// The strongest profile the server honours (default `standard`).
    pub max_profile: Profile,
    /// The unit kinds the server runs (default `["command"]`).
    pub unit_kinds: Vec<UnitKind>,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            url: None,
            key: None,
            max_profile: Profile::Standard,
            unit_kinds: vec![UnitKind::Command],
        }
    }
}

/// `[runtimes.wasm]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct WasmOptions {
    /// Instances that may run at once.
    pub pool_instances: Option<u32>,
    /// Largest linear memory of any instance, in bytes.
    pub max_memory: Option<u64>,
}

/// `[runtimes.bubblewrap]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BubblewrapOptions {
    /// The `bwrap` binary (default: found on `PATH`).
    pub bwrap: Option<PathBuf>,
    /// Sandboxes kept warm for reuse.
    pub pool_size: Option<usize>,
}

/// A configuration error: file, line, column, key and message.
#[derive(Debug)]
pub(crate) struct ConfigError {
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
    pub(crate) fn builtin() -> Self {
        Config {
            builtins: Group::ALL.to_vec(),
            limits: Limits::default(),
            servers: Vec::new(),
            gateway: GatewayConfig::default(),
            runtimes: RuntimesConfig::default(),
            commands: Vec::new(),
        }
    }

    /// Loads `explicit`, else `./toolexec.toml` if present, else built-ins.
    pub(crate) fn discover(explicit: Option<&Path>) -> Result<Self, ConfigError> {
        match explicit {
            Some(p) => Config::load(p),
            None if Path::new(DEFAULT_FILE).is_file() => Config::load(Path::new(DEFAULT_FILE)),
            None => Ok(Config::builtin()),
        }
    }

    /// Loads and validates one file.
    pub(crate) fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_owned(),
            position: None,
            key: String::new(),
            message: format!("cannot read: {e}"),
        })?;
        Config::parse(&text, path)
    }

    /// Parses `text` as the contents of `path`.
    pub(crate) fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
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
    #[serde(default)]
    runtimes: RawRuntimes,
    #[serde(default)]
    commands: Vec<toml::Spanned<RawCommand>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRuntimes {
    dev: Option<toml::Spanned<Vec<String>>>,
    standard: Option<toml::Spanned<Vec<String>>>,
    hardened: Option<toml::Spanned<Vec<String>>>,
    #[serde(default)]
    allow_unsandboxed_host: bool,
    #[serde(default)]
    bubblewrap: RawBubblewrap,
    #[serde(default)]
    oci: RawOci,
    #[serde(default)]
    docker: RawDocker,
    #[serde(default)]
    remote: RawRemote,
    #[serde(default)]
    wasm: RawWasm,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawOci {
    rootfs: Option<PathBuf>,
    runc: Option<PathBuf>,
    runsc: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDocker {
    socket: Option<PathBuf>,
    image: Option<toml::Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRemote {
    url: Option<toml::Spanned<String>>,
    key_file: Option<toml::Spanned<PathBuf>>,
    key_env: Option<toml::Spanned<String>>,
    max_profile: Option<toml::Spanned<String>>,
    unit_kinds: Option<toml::Spanned<Vec<UnitKind>>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawWasm {
    pool_instances: Option<toml::Spanned<u32>>,
    max_memory: Option<toml::Spanned<SizeText>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBubblewrap {
    bwrap: Option<PathBuf>,
    pool_size: Option<toml::Spanned<usize>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommand {
    id: String,
    description: String,
    input_schema: toml::Spanned<SchemaSource>,
    output_schema: Option<toml::Spanned<SchemaSource>>,
    argv: toml::Spanned<Vec<String>>,
    stdin: Option<toml::Spanned<String>>,
    #[serde(default)]
    output: OutputMapping,
    profile: Option<toml::Spanned<String>>,
    #[serde(default)]
    limits: RawCommandLimits,
}

/// A JSON Schema as an inline TOML table or a JSON string.
#[derive(Deserialize)]
#[serde(untagged)]
enum SchemaSource {
    Json(String),
    Table(serde_json::Map<String, serde_json::Value>),
}

impl SchemaSource {
    fn into_value(self) -> Result<serde_json::Value, String> {
        match self {
            SchemaSource::Table(t) => Ok(serde_json::Value::Object(t)),
            SchemaSource::Json(text) => match serde_json::from_str(&text) {
                Ok(v @ serde_json::Value::Object(_)) => Ok(v),
                Ok(_) => Err("the JSON schema must be an object".into()),
                Err(e) => Err(format!("not valid JSON: {e}")),
            },
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCommandLimits {
    wall_time: Option<DurationText>,
    cpu_time: Option<DurationText>,
    memory: Option<SizeText>,
    max_processes: Option<u32>,
    max_output: Option<SizeText>,
    disk: Option<SizeText>,
    max_tool_calls: Option<usize>,
}

/// A size written as bytes (`1048576`) or text (`"64MiB"`).
struct SizeText(usize);

impl<'de> Deserialize<'de> for SizeText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bytes(0) => Err(serde::de::Error::custom("the size must be positive")),
            Raw::Bytes(n) => usize::try_from(n)
                .map(SizeText)
                .map_err(|_| serde::de::Error::custom("the size is too large")),
            Raw::Text(s) => crate::args::parse_size(&s)
                .map(SizeText)
                .map_err(serde::de::Error::custom),
        }
    }
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
                Secret::from_private_file(&path).map_err(|e| (key.to_owned(), e.to_string()))
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
    #[serde(default)]
    inherit_env: Vec<String>,
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
        let gateway = self.gateway.resolve(base)?;
        let runtimes = resolve_runtimes(self.runtimes, base)?;
        let mut commands = Vec::with_capacity(self.commands.len());
        let mut ids = std::collections::HashSet::new();
        for (i, spanned) in self.commands.into_iter().enumerate() {
            let span = spanned.span();
            let def = resolve_command(spanned.into_inner(), i)
                .map_err(|(key, message, at)| (key, message, at.or_else(|| Some(span.clone()))))?;
            if !ids.insert(def.id.clone()) {
                return Err(at(&span)((
                    format!("commands[{i}].id"),
                    format!("duplicate command tool id {:?}", def.id),
                )));
            }
            commands.push(def);
        }
        Ok(Config {
            runtimes,
            commands,
            builtins,
            limits,
            servers,
            gateway,
        })
    }
}

/// Runtime names in profile lists: lowercase letters, digits, `_` and `-`.
fn valid_runtime_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// Validates `[runtimes]`.
fn resolve_runtimes(raw: RawRuntimes, base: &Path) -> Result<RuntimesConfig, ResolveError> {
    let mut map = ProfileMap::default();
    let lists = [
        (Profile::Dev, raw.dev),
        (Profile::Standard, raw.standard),
        (Profile::Hardened, raw.hardened),
    ];
    let dev_given = lists[0].1.is_some();
    for (profile, list) in lists {
        let Some(list) = list else { continue };
        let span = list.span();
        let key = format!("runtimes.{profile}");
        let names = list.into_inner();
        for (i, name) in names.iter().enumerate() {
            let fail = |message: String| (format!("{key}[{i}]"), message, Some(span.clone()));
            if !valid_runtime_name(name) {
                return Err(fail(format!(
                    "{name:?} is not a runtime name (lowercase letters, digits, `_`, `-`)"
                )));
            }
            if name == toolexec_sandbox::HostRuntime::NAME {
                if profile != Profile::Dev {
                    return Err(fail(format!(
                        "the unsandboxed host runtime is only fit for the dev profile, not {profile}"
                    )));
                }
                if !raw.allow_unsandboxed_host {
                    return Err(fail(
                        "the unsandboxed host runtime needs `allow_unsandboxed_host = true` in [runtimes]"
                            .into(),
                    ));
                }
            }
            if names[..i].contains(name) {
                return Err(fail(format!("{name:?} is listed twice")));
            }
        }
        *map.candidates_mut(profile) = names;
    }
    if raw.allow_unsandboxed_host && !dev_given {
        map.dev.push(toolexec_sandbox::HostRuntime::NAME.into());
    }
    let pool_size = match raw.bubblewrap.pool_size {
        Some(p) if *p.get_ref() > 64 => {
            return Err((
                "runtimes.bubblewrap.pool_size".into(),
                "must be at most 64".into(),
                Some(p.span()),
            ));
        }
        Some(p) => Some(p.into_inner()),
        None => None,
    };
    let relative = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
    Ok(RuntimesConfig {
        map,
        allow_unsandboxed_host: raw.allow_unsandboxed_host,
        bubblewrap: BubblewrapOptions {
            bwrap: raw.bubblewrap.bwrap,
            pool_size,
        },
        oci: OciOptions {
            rootfs: raw.oci.rootfs.map(relative),
            runc: raw.oci.runc,
            runsc: raw.oci.runsc,
        },
        docker: resolve_docker(raw.docker)?,
        remote: resolve_remote(raw.remote, base)?,
        wasm: resolve_wasm(raw.wasm)?,
    })
}

/// Validates `[runtimes.docker]` with the runtime's own checks.
fn resolve_docker(raw: RawDocker) -> Result<DockerOptions, ResolveError> {
    let image = match raw.image {
        Some(image) => {
            let span = image.span();
            let image = image.into_inner();
            toolexec_docker::DockerConfig::new(image.clone())
                .validate()
                .map_err(|e| {
                    let (field, m) = refused(e);
                    (format!("runtimes.{field}"), m, Some(span))
                })?;
            Some(image)
        }
        None => None,
    };
    Ok(DockerOptions {
        socket: raw.socket,
        image,
    })
}

/// Validates `[runtimes.remote]`: the URL as the client parses it, one key
/// source. The key itself is read when the runtime is registered.
fn resolve_remote(raw: RawRemote, base: &Path) -> Result<RemoteOptions, ResolveError> {
    use toolexec_remote::auth::KeySource;
    let mut options = RemoteOptions::default();
    if let Some(url) = raw.url {
        let span = url.span();
        let url = url.into_inner();
        let config = toolexec_remote::RemoteConfig::new(url.clone(), None);
        toolexec_remote::RemoteRuntime::new(config)
            .map_err(|e| ("runtimes.remote.url".into(), refused(e).1, Some(span)))?;
        options.url = Some(url);
    }
    options.key = match (raw.key_file, raw.key_env) {
        (Some(_), Some(env)) => {
            return Err((
                "runtimes.remote.key_env".into(),
                "give key_file or key_env, not both".into(),
                Some(env.span()),
            ));
        }
        (Some(file), None) => {
            let file = file.into_inner();
            Some(KeySource::File(if file.is_absolute() {
                file
            } else {
                base.join(file)
            }))
        }
        (None, Some(env)) => {
            let span = env.span();
            let name = env.into_inner();
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err((
                    "runtimes.remote.key_env".into(),
                    format!("{name:?} is not an environment variable name"),
                    Some(span),
                ));
            }
            Some(KeySource::Env(name))
        }
        (None, None) => None,
    };
    if let Some(p) = raw.max_profile {
        let span = p.span();
        options.max_profile = p.get_ref().parse::<Profile>().map_err(|e| {
            (
                "runtimes.remote.max_profile".into(),
                e.to_string(),
                Some(span),
            )
        })?;
    }
    if let Some(kinds) = raw.unit_kinds {
        if kinds.get_ref().is_empty() {
            return Err((
                "runtimes.remote.unit_kinds".into(),
                "list at least one unit kind (command, script, wasm)".into(),
                Some(kinds.span()),
            ));
        }
        options.unit_kinds = kinds.into_inner();
    }
    Ok(options)
}

/// Validates `[runtimes.wasm]` with the runtime's own checks.
fn resolve_wasm(raw: RawWasm) -> Result<WasmOptions, ResolveError> {
    let mut config = toolexec_wasm::WasmConfig::default();
    let mut options = WasmOptions::default();
    let (mut pool_span, mut memory_span) = (None, None);
    if let Some(n) = raw.pool_instances {
        pool_span = Some(n.span());
        config.pool_instances = *n.get_ref();
        options.pool_instances = Some(n.into_inner());
    }
    if let Some(m) = raw.max_memory {
        memory_span = Some(m.span());
        config.max_memory_bytes = m.get_ref().0 as u64;
        options.max_memory = Some(config.max_memory_bytes);
    }
    config.validate().map_err(|e| {
        let (field, m) = refused(e);
        if field == "wasm.pool_instances" {
            ("runtimes.wasm.pool_instances".into(), m, pool_span.clone())
        } else {
            ("runtimes.wasm.max_memory".into(), m, memory_span.clone())
        }
    })?;
    Ok(options)
}

/// The field and the bare message of a check the runtime crates made
/// (`invalid_request: <field>: <message>`), for a report that names the
/// file's own key and position.
fn refused(error: toolexec::Error) -> (String, String) {
    match error {
        toolexec::Error::InvalidRequest { field, message } => (field, message),
        other => (
            other.field().unwrap_or_default().to_owned(),
            other.to_string(),
        ),
    }
}

/// Validates one `[[commands]]` table (its index `i`) into a definition.
fn resolve_command(c: RawCommand, i: usize) -> Result<CommandToolDef, ResolveError> {
    let key = |k: &str| format!("commands[{i}].{k}");
    let fail = |k: &str, message: String| -> ResolveError { (key(k), message, None) };
    if let Err(reason) = toolexec::ToolIdRef::parse(&c.id) {
        return Err(fail("id", format!("not a valid tool id: {reason}")));
    }
    if !c.id.contains(':') {
        return Err(fail(
            "id",
            format!("{:?}: write it as \"namespace:name\"", c.id),
        ));
    }
    let schema = |src: toml::Spanned<SchemaSource>, k: &str| {
        let span = src.span();
        src.into_inner()
            .into_value()
            .map_err(|m| (key(k), m, Some(span)))
    };
    let input_schema = schema(c.input_schema, "input_schema")?;
    let output_schema = match c.output_schema {
        Some(s) => Some(schema(s, "output_schema")?),
        None => None,
    };
    let stdin = match c.stdin {
        Some(s) => {
            let span = s.span();
            Some(
                StdinMapping::try_from(s.into_inner())
                    .map_err(|m| (key("stdin"), m, Some(span)))?,
            )
        }
        None => None,
    };
    let profile = match c.profile {
        Some(p) => {
            let span = p.span();
            p.get_ref()
                .parse::<Profile>()
                .map_err(|e| (key("profile"), e.to_string(), Some(span)))?
        }
        None => Profile::Standard,
    };
    let mut limits = RuntimeLimits::default();
    let l = c.limits;
    if let Some(d) = l.wall_time {
        limits.wall_time = d.0;
    }
    if let Some(d) = l.cpu_time {
        limits.cpu_time = Some(d.0);
    }
    if let Some(m) = l.memory {
        limits.memory_bytes = Some(m.0 as u64);
    }
    if let Some(p) = l.max_processes {
        limits.max_processes = Some(p);
    }
    if let Some(o) = l.max_output {
        limits.max_output_bytes = o.0;
    }
    if let Some(d) = l.disk {
        limits.disk_bytes = Some(d.0 as u64);
    }
    if let Some(n) = l.max_tool_calls {
        limits.max_tool_calls = n;
    }
    if let Err(e) = limits.validate() {
        let (field, m) = refused(e);
        // RuntimeLimits names its fields; the file names them shorter.
        let field = match field.strip_prefix("limits.") {
            Some("memory_bytes") => "memory",
            Some("max_output_bytes") => "max_output",
            Some("disk_bytes") => "disk",
            Some(other) => other,
            None => "limits",
        };
        return Err(fail(&format!("limits.{field}"), m));
    }
    let argv_span = c.argv.span();
    let def = CommandToolDef {
        id: c.id,
        description: c.description,
        input_schema,
        output_schema,
        argv: c.argv.into_inner(),
        stdin,
        output: c.output,
        profile,
        limits,
    };
    // The same checks as at registration, reported with the file position.
    toolexec_runtime::CommandTool::new(def.clone(), Default::default()).map_err(|e| {
        let field = match &e {
            toolexec::Error::InvalidDefinition { field, .. } => field.clone(),
            _ => "argv".into(),
        };
        let span = if field.starts_with("argv") {
            Some(argv_span.clone())
        } else {
            None
        };
        (key(&field), e.to_string(), span)
    })?;
    Ok(def)
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
                inherit_env: s.inherit_env,
                cwd: s
                    .cwd
                    .map(|c| if c.is_absolute() { c } else { base.join(c) }),
            }
        }
        (None, Some(url)) => {
            if !s.args.is_empty()
                || !s.env.is_empty()
                || !s.inherit_env.is_empty()
                || s.cwd.is_some()
            {
                return Err(fail(
                    "args",
                    "args, env, inherit_env and cwd are for command servers".into(),
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
    use std::os::unix::fs::PermissionsExt;

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
        std::fs::set_permissions(dir.join("token"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
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

    /// A secret file its group or others may read is refused, whatever the
    /// secret is for, with the path and the mode (never the contents).
    #[test]
    fn secret_files_readable_by_others_are_refused() {
        let dir = std::env::temp_dir().join(format!("toolexec-cfg-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, "s3cr3t-value\n").unwrap();
        let configs = [
            (
                "[gateway]\ntoken = { file = \"secret\" }\n",
                "gateway.token",
            ),
            (
                "[[servers]]\nname = \"a\"\ncommand = \"x\"\nenv = { K = { file = \"secret\" } }\n",
                "servers[0].env.K",
            ),
            (
                "[[servers]]\nname = \"a\"\nurl = \"http://h\"\nbearer_token = { file = \"secret\" }\n",
                "servers[0].bearer_token",
            ),
        ];
        for mode in [0o644, 0o640, 0o604] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            for (text, key) in configs {
                let err = Config::parse(text, &dir.join("toolexec.toml"))
                    .unwrap_err()
                    .to_string();
                assert!(err.starts_with("invalid_request: config "), "{err}");
                assert!(err.contains(key), "{err}");
                assert!(err.contains(&file.display().to_string()), "{err}");
                assert!(err.contains(&format!("mode {mode:04o}")), "{err}");
                assert!(!err.contains("s3cr3t"), "{err}");
            }
        }
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        for (text, _) in configs {
            Config::parse(text, &dir.join("toolexec.toml")).unwrap();
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn inherit_env_is_for_command_servers() {
        let c = parse(
            "[[servers]]\nname = \"a\"\ncommand = \"x\"\ninherit_env = [\"HTTPS_PROXY\", \"AWS_*\"]\n",
        )
        .unwrap();
        match &c.servers[0].transport {
            UpstreamTransport::Stdio { inherit_env, .. } => {
                assert_eq!(inherit_env, &["HTTPS_PROXY", "AWS_*"]);
            }
            other => panic!("{other:?}"),
        }
        let err = parse("[[servers]]\nname = \"a\"\nurl = \"http://h\"\ninherit_env = [\"A\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("inherit_env"), "{err}");
    }
}
