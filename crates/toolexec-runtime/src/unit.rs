//! Units of work and run requests.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolexec::Error;

use crate::{Profile, RuntimeLimits};

/// A unit of work for a runtime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Unit {
    /// A command: `argv[0]` is looked up on the sandbox's `PATH`.
    Command(CommandUnit),
    /// A script for an engine (`javascript`: toolexec code mode).
    Script(ScriptUnit),
    /// A WebAssembly module or component.
    Wasm(WasmUnit),
}

impl Unit {
    /// The kind of this unit.
    pub fn kind(&self) -> UnitKind {
        match self {
            Unit::Command(_) => UnitKind::Command,
            Unit::Script(_) => UnitKind::Script,
            Unit::Wasm(_) => UnitKind::Wasm,
        }
    }

    /// A command unit from argv.
    ///
    /// ```
    /// use toolexec_runtime::{Unit, UnitKind};
    /// let unit = Unit::command(["echo", "hi"]);
    /// assert_eq!(unit.kind(), UnitKind::Command);
    /// ```
    pub fn command<I, S>(argv: I) -> Unit
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Unit::Command(CommandUnit {
            argv: argv.into_iter().map(Into::into).collect(),
            ..CommandUnit::default()
        })
    }

    /// A JavaScript (code mode) unit.
    pub fn javascript(source: impl Into<String>) -> Unit {
        Unit::Script(ScriptUnit {
            language: "javascript".into(),
            source: source.into(),
        })
    }
}

/// The kinds of [`Unit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnitKind {
    /// [`Unit::Command`].
    Command,
    /// [`Unit::Script`].
    Script,
    /// [`Unit::Wasm`].
    Wasm,
}

impl UnitKind {
    /// The stable name.
    pub const fn as_str(self) -> &'static str {
        match self {
            UnitKind::Command => "command",
            UnitKind::Script => "script",
            UnitKind::Wasm => "wasm",
        }
    }
}

/// A command to run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CommandUnit {
    /// Program and arguments; must not be empty.
    pub argv: Vec<String>,
    /// Bytes written to the command's stdin (then closed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Environment. Nothing of the host's environment is passed, besides a
    /// fixed `PATH` and the channel variables.
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox (default `/tmp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// The largest `stdin` a command unit may carry: 64 MiB.
pub const MAX_COMMAND_STDIN_BYTES: usize = 64 << 20;

impl CommandUnit {
    /// Checks the unit can be started as given, whatever the runtime:
    /// a non-empty program, no NUL bytes, variable names without `=`, no
    /// variables of the channel's own (`TOOLEXEC_CHANNEL*`, set by the
    /// runtime), an absolute working directory, stdin within
    /// [`MAX_COMMAND_STDIN_BYTES`]. The error is the failing field
    /// (`unit.argv`, `unit.env`, `unit.cwd`, `unit.stdin`) and why.
    ///
    /// ```
    /// use toolexec_runtime::CommandUnit;
    /// let unit = CommandUnit { argv: vec![], ..CommandUnit::default() };
    /// let err = unit.check().unwrap_err();
    /// assert!(matches!(err, toolexec::Error::InvalidRequest { ref field, .. } if field == "unit.argv"));
    /// ```
    pub fn check(&self) -> Result<(), Error> {
        let bad = |field: &str, message: String| Err(Error::invalid_request(field, message));
        if self.argv.first().is_none_or(|program| program.is_empty()) {
            return bad("unit.argv", "must name a program".into());
        }
        if self.argv.iter().any(|a| a.contains('\0')) {
            return bad("unit.argv", "arguments must not contain NUL bytes".into());
        }
        for (key, value) in &self.env {
            if key.is_empty() || key.contains(['=', '\0']) {
                return bad("unit.env", format!("{key:?} is not a variable name"));
            }
            if value.contains('\0') {
                return bad("unit.env", format!("the value of {key} contains NUL"));
            }
            if key.starts_with("TOOLEXEC_CHANNEL") {
                return bad("unit.env", format!("{key} is set by the runtime"));
            }
        }
        if let Some(cwd) = &self.cwd
            && (!cwd.starts_with('/') || cwd.contains('\0'))
        {
            return bad("unit.cwd", format!("{cwd:?} is not an absolute path"));
        }
        if self
            .stdin
            .as_ref()
            .is_some_and(|s| s.len() > MAX_COMMAND_STDIN_BYTES)
        {
            return bad("unit.stdin", "more than 64 MiB".into());
        }
        Ok(())
    }
}

/// A script for an engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptUnit {
    /// The engine: `javascript`.
    pub language: String,
    /// The script source.
    pub source: String,
}

/// A WebAssembly module or component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WasmUnit {
    /// The binary (`.wasm`) or text (`.wat`) form of a core module or a
    /// component. In JSON: `{"binary": "<base64>"}` or `{"wat": "(module ...)"}`.
    #[serde(flatten)]
    pub code: WasmCode,
    /// Export to call (default: `_start` for WASI commands, `run` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// JSON input handed to the module through the tool ABI's `input` import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Arguments (`argv[1..]`) for WASI commands.
    #[serde(default)]
    pub args: Vec<String>,
}

/// The code of a [`WasmUnit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WasmCode {
    /// Binary module or component, base64 in JSON.
    Binary(#[serde(with = "base64_bytes")] Vec<u8>),
    /// WebAssembly text.
    Wat(String),
}

/// Everything a runtime needs for one run besides the tool host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// What to run.
    pub unit: Unit,
    /// The required isolation.
    pub profile: Profile,
    /// The limits.
    #[serde(default)]
    pub limits: RuntimeLimits,
}

impl RunRequest {
    /// A request with default limits.
    pub fn new(unit: Unit, profile: Profile) -> Self {
        RunRequest {
            unit,
            profile,
            limits: RuntimeLimits::default(),
        }
    }

    /// Replaces the limits.
    pub fn with_limits(mut self, limits: RuntimeLimits) -> Self {
        self.limits = limits;
        self
    }
}

mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD
            .decode(text)
            .map_err(|e| serde::de::Error::custom(format!("binary: invalid base64: {e}")))
    }
}
