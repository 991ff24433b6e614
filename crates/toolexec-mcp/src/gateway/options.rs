//! What the gateway publishes and how it presents itself: [`Expose`] and
//! [`GatewayOptions`].

#[cfg(feature = "code")]
use std::sync::Arc;

#[cfg(feature = "code")]
use toolexec_runtime::Runtimes;

#[cfg(feature = "code")]
use super::code::CodeModeOptions;
use super::limits::RunLimits;
use super::tasks::TaskOptions;

/// What the gateway publishes in `tools/list`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Expose {
    /// Only the meta-tools (`search_tools`, `describe_tool`, `run_tool`, ...).
    #[default]
    Meta,
    /// Only the catalog tools, each under its MCP name (`ns__name`).
    All,
    /// The meta-tools and every catalog tool.
    Both,
}

impl Expose {
    /// True when the meta-tools are published.
    pub fn meta(self) -> bool {
        matches!(self, Expose::Meta | Expose::Both)
    }

    /// True when catalog tools are published directly.
    pub fn direct(self) -> bool {
        matches!(self, Expose::All | Expose::Both)
    }

    /// The lowercase name (`meta`, `all`, `both`).
    pub fn as_str(self) -> &'static str {
        match self {
            Expose::Meta => "meta",
            Expose::All => "all",
            Expose::Both => "both",
        }
    }
}

impl std::fmt::Display for Expose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Expose {
    type Err = toolexec::Error;

    /// Parses `meta`, `all` or `both`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "meta" => Ok(Expose::Meta),
            "all" => Ok(Expose::All),
            "both" => Ok(Expose::Both),
            _ => Err(toolexec::Error::invalid_request(
                "expose",
                format!("expected meta, all or both, got {s:?}"),
            )),
        }
    }
}

/// How the gateway presents itself.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// What `tools/list` publishes.
    pub expose: Expose,
    /// Namespaces whose tools and prompts are published under their own
    /// names (`search`) instead of `namespace__search`. A name two of them
    /// share is published by neither, and calling it is an error naming
    /// both ([`NameConflict`](super::NameConflict),
    /// [`Gateway::name_conflicts`](super::Gateway::name_conflicts)).
    /// Empty: every name is prefixed.
    pub unprefixed: Vec<String>,
    /// `serverInfo.name` in the `initialize` result.
    pub server_name: String,
    /// `instructions` in the `initialize` result. `None` uses
    /// [`DEFAULT_INSTRUCTIONS`](super::DEFAULT_INSTRUCTIONS) when the meta-tools are published (none
    /// otherwise); `Some("")` sends none.
    pub instructions: Option<String>,
    /// How `execute_code` runs scripts: worker pool, default and maximum
    /// limits, profile (feature `code`).
    #[cfg(feature = "code")]
    pub code: CodeModeOptions,
    /// The sandbox runtimes `execute_code` uses when
    /// [`CodeModeOptions::profile`] is `hardened`. `None`: no runtime, so
    /// hardened scripts fail `backend_unavailable` (never silently in
    /// process). Feature `code`.
    #[cfg(feature = "code")]
    pub runtimes: Option<Arc<Runtimes>>,
    /// Runs `execute_code` scripts instead of a runner of the gateway's own
    /// (the fleet's durable code runs, `toolexec-fleet`). `None`: scripts
    /// run as [`CodeModeOptions::profile`] says. Feature `code`.
    #[cfg(feature = "code")]
    pub code_executor: Option<Arc<dyn toolexec_code::CodeExecutor>>,
    /// How many tool runs (`run_tool`, `run_chain`, direct tools) may be in
    /// flight and waiting, over all clients.
    pub runs: RunLimits,
    /// When long calls become tasks (the MCP Tasks extension), for clients
    /// that declare it.
    pub tasks: TaskOptions,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        GatewayOptions {
            expose: Expose::Meta,
            unprefixed: Vec::new(),
            server_name: "toolexec".into(),
            instructions: None,
            #[cfg(feature = "code")]
            code: CodeModeOptions::default(),
            #[cfg(feature = "code")]
            runtimes: None,
            #[cfg(feature = "code")]
            code_executor: None,
            runs: RunLimits::default(),
            tasks: TaskOptions::default(),
        }
    }
}
