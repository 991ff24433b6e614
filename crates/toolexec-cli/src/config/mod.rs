//! `toolexec.toml`: upstream MCP servers, built-ins, limits, gateway
//! settings, sandbox runtimes, command tools and HTTP APIs.
//!
//! Composition: each table is read by the type that uses it where one fits
//! it (`toolexec::Limits`, the runtimes' configs), else by one table type
//! here ([`servers`], [`commands`], [`gateway`], [`runtimes`], [`apis`]). Every error
//! is a [`ConfigError`] naming the file, line, column and key: serde's for
//! what does not deserialize, and for what is refused after, the position
//! of the key it names ([`error::Document`]). Secrets (`{ env = "..." }`,
//! `{ file = "..." }` or a literal string) are resolved at load time and
//! kept in [`toolexec::Secret`]s, which never print.

use std::path::Path;

use serde::Deserialize;
use toolexec::Limits;
use toolexec::policy::{Policy, PolicyConfig};
use toolexec::quota::{QuotaConfig, Quotas};
use toolexec_builtins::Group;
use toolexec_http::openapi::ImportOptions;
use toolexec_http::{ClientOptions, PlainTool};
use toolexec_mcp::upstream::UpstreamConfig;
use toolexec_runtime::CommandToolDef;

mod apis;
mod cluster;
mod commands;
mod error;
mod gateway;
mod grpc;
mod runtimes;
mod search;
mod servers;
mod telemetry;
#[cfg(test)]
mod tests;
mod values;

pub(crate) use cluster::ClusterConfig;
pub(crate) use error::ConfigError;
pub(crate) use gateway::GatewayConfig;
pub(crate) use runtimes::RuntimesConfig;
pub(crate) use search::SearchConfig;
pub(crate) use telemetry::TelemetryConfig;

use error::{Document, Fault};

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
    /// Servers with `prefix = false`, in file order.
    pub unprefixed: Vec<String>,
    /// `toolexec serve` settings.
    pub gateway: GatewayConfig,
    /// `[runtimes]`: sandbox runtimes and the profile mapping.
    pub runtimes: RuntimesConfig,
    /// `[[commands]]`: command tools.
    pub commands: Vec<CommandToolDef>,
    /// `[[openapi]]`: APIs imported from OpenAPI documents.
    pub openapi: Vec<ImportOptions>,
    /// `[[http]]`: plain HTTP tools, each with its client options.
    pub http: Vec<(PlainTool, ClientOptions)>,
    /// `[[grpc]]`: gRPC services.
    pub grpc: Vec<toolexec_grpc::ImportOptions>,
    /// `[search]`: the embedding model and the default search mode.
    pub search: SearchConfig,
    /// `[telemetry]` and `[audit]`: traces, metrics, the audit log.
    pub telemetry: TelemetryConfig,
    /// `[policy]`: who may use which tools, prompts and resources through
    /// `serve` (checked when the file is read).
    pub policy: Option<Policy>,
    /// `[quotas]`: rate and concurrency limits per caller and per tool,
    /// for `serve` (checked when the file is read).
    pub quotas: Option<QuotaConfig>,
    /// `[cluster]` and `[worker]`: the NATS JetStream fleet.
    pub cluster: ClusterConfig,
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    builtins: values::Builtins,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    servers: Vec<servers::ServerTable>,
    #[serde(default)]
    gateway: gateway::GatewayTable,
    #[serde(default)]
    runtimes: RuntimesConfig,
    #[serde(default)]
    commands: Vec<commands::CommandTable>,
    #[serde(default)]
    openapi: Vec<apis::OpenApiTable>,
    #[serde(default)]
    http: Vec<apis::HttpTable>,
    #[serde(default)]
    grpc: Vec<grpc::GrpcTable>,
    #[serde(default)]
    search: search::SearchTable,
    #[serde(default)]
    telemetry: telemetry::TelemetryTable,
    #[serde(default)]
    audit: telemetry::AuditTable,
    policy: Option<PolicyConfig>,
    quotas: Option<QuotaConfig>,
    #[serde(default)]
    cluster: cluster::ClusterTable,
    #[serde(default)]
    worker: cluster::WorkerTable,
}

impl Config {
    /// Built-in catalog only, default limits.
    pub(crate) fn builtin() -> Self {
        Config {
            builtins: Group::ALL.to_vec(),
            limits: Limits::default(),
            servers: Vec::new(),
            unprefixed: Vec::new(),
            gateway: GatewayConfig::default(),
            runtimes: RuntimesConfig::default(),
            commands: Vec::new(),
            openapi: Vec::new(),
            http: Vec::new(),
            grpc: Vec::new(),
            search: search::SearchConfig::default(),
            telemetry: TelemetryConfig::default(),
            policy: None,
            quotas: None,
            cluster: ClusterConfig::default(),
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
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::unreadable(path, e))?;
        Config::parse(&text, path)
    }

    /// Parses `text` as the contents of `path`.
    pub(crate) fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let syntax = |e| ConfigError::toml(path, text, String::new(), e);
        let document = Document::parse(text).map_err(syntax)?;
        let de = toml::Deserializer::parse(text).map_err(syntax)?;
        let file: File = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            ConfigError::toml(path, text, key, e.into_inner())
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        file.resolve(base, &document)
            .map_err(|fault| ConfigError::at(path, &document, fault))
    }
}

impl File {
    /// Checks what serde cannot: values against each other and the
    /// runtimes' own checks; resolves secrets and relative paths.
    fn resolve(self, base: &Path, document: &Document<'_>) -> Result<Config, Fault> {
        let builtins = self.builtins.groups();
        self.limits
            .validate()
            .map_err(|e| Fault::refused("limits", e, &[]))?;
        let (servers, unprefixed) = servers::resolve(self.servers, base, &builtins, &self.limits)?;
        let gateway = self.gateway.resolve(base)?;
        let mut runtimes = self.runtimes;
        runtimes.resolve(base, document)?;
        let commands = commands::resolve(self.commands)?;
        let server_names: Vec<String> = servers.iter().map(|s| s.name.clone()).collect();
        let openapi =
            apis::resolve_openapi(self.openapi, base, &server_names, &builtins, &self.limits)?;
        let http = apis::resolve_http(self.http, base, &self.limits)?;
        let taken: Vec<String> = builtins
            .iter()
            .map(|g| g.as_str().to_owned())
            .chain(server_names)
            .chain(openapi.iter().map(|o| o.name.clone()))
            .collect();
        let grpc = grpc::resolve(self.grpc, base, &taken, &self.limits)?;
        let search = self.search.resolve(base)?;
        let telemetry = self.telemetry.resolve(self.audit, base)?;
        let policy = match &self.policy {
            Some(p) => Some(Policy::new(p).map_err(|e| Fault::refused("policy", e, &[]))?),
            None => None,
        };
        let cluster = self.cluster.resolve(self.worker, base)?;
        if cluster.code && (self.policy.is_some() || self.quotas.is_some()) {
            // A script on a worker calls tools there, where the gateway's
            // policy and quotas do not reach: never a way around them.
            return Err(Fault::new(
                "cluster.code",
                "code runs on the fleet cannot be held to [policy] or [quotas] (the worker \
                 calls the tools): remove one or the other",
            ));
        }
        if let Some(q) = &self.quotas {
            Quotas::new(q).map_err(|e| Fault::refused("quotas", e, &[]))?;
        }
        Ok(Config {
            builtins,
            limits: self.limits,
            servers,
            unprefixed,
            gateway,
            runtimes,
            commands,
            openapi,
            http,
            grpc,
            search,
            telemetry,
            policy,
            quotas: self.quotas,
            cluster,
        })
    }
}
