//! Command tools: a catalog tool backed by a command run in a sandbox.
//!
//! A [`CommandToolDef`] declares the tool (id, description, JSON Schemas)
//! and how a call becomes a command: an argv template whose `{name}`
//! elements take argument values as **whole argv elements** (never through
//! a shell; arrays expand to several elements), what goes to stdin, and
//! how stdout becomes the result. [`CommandTool`] is the
//! [`toolexec::Backend`] that runs it through [`Runtimes`] under the
//! declared [`Profile`] and [`RuntimeLimits`].
//!
//! Values are never interpreted: `; rm -rf /` or `$(id)` reach the program
//! as one literal argument. A value starting with `-` is still one element,
//! but the program may read it as an option: put `--` before placeholders
//! in the template for programs that accept it.
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//! use toolexec_runtime::{CommandTool, CommandToolDef, OutputMapping, Profile, ProfileMap, Runtimes};
//! use toolexec_sandbox::{HostRuntime, UnsandboxedOptIn};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let mut map = ProfileMap::default();
//! map.dev = vec![HostRuntime::NAME.into()];
//! let mut runtimes = Runtimes::new(map);
//! runtimes.register(HostRuntime::new(UnsandboxedOptIn::i_understand_units_run_unsandboxed()));
//! let def = CommandToolDef {
//!     id: "demo:echo".into(),
//!     description: "Echoes its words".into(),
//!     input_schema: json!({"type": "object", "properties": {"words": {"type": "array", "items": {"type": "string"}}}, "required": ["words"]}),
//!     argv: vec!["echo".into(), "{words}".into()],
//!     profile: Profile::Dev,
//!     ..CommandToolDef::default()
//! };
//! let exec = toolexec::Exec::builder().build();
//! CommandTool::register(exec.catalog(), def, Arc::new(runtimes)).unwrap();
//! let out = exec.run_tool("demo:echo", json!({"words": ["a", "$(id)"]})).await.unwrap();
//! assert_eq!(out.value, json!({"stdout": "a $(id)\n"}));
//! # }
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolexec::{
    Availability, Backend, BoxFuture, Call, CancellationToken, Catalog, Error, Tool, ToolOutput,
    ValidationFailure, Violation,
};

use crate::{
    LimitKind, Profile, RunOutcome, RunRequest, RunStatus, RuntimeLimits, Runtimes, Unit, UnitKind,
};

/// What a command's stdin receives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum StdinMapping {
    /// `"json"`: the whole arguments object as JSON.
    Json,
    /// `"{field}"`: one argument (strings raw, other values as JSON).
    Field(String),
}

impl From<StdinMapping> for String {
    fn from(m: StdinMapping) -> String {
        match m {
            StdinMapping::Json => "json".into(),
            StdinMapping::Field(f) => format!("{{{f}}}"),
        }
    }
}

impl TryFrom<String> for StdinMapping {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if s == "json" {
            return Ok(StdinMapping::Json);
        }
        match placeholder(&s) {
            Some(name) => Ok(StdinMapping::Field(name.to_owned())),
            None => Err(format!(
                "stdin must be \"json\" or \"{{field}}\", got {s:?}"
            )),
        }
    }
}

/// How stdout becomes the tool's result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputMapping {
    /// `{"stdout": "<text>"}`.
    #[default]
    Text,
    /// stdout parsed as JSON (failing with `execution_failed` if it is not).
    Json,
}

/// A command tool's declaration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandToolDef {
    /// `namespace:name`.
    pub id: String,
    /// What the tool does, for a model.
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Value,
    /// JSON Schema of the result, if declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Program and arguments; elements written `{name}` take the argument
    /// `name`. `argv[0]` must be literal.
    pub argv: Vec<String>,
    /// What goes to stdin (nothing by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<StdinMapping>,
    /// How stdout becomes the result.
    #[serde(default)]
    pub output: OutputMapping,
    /// The isolation required.
    #[serde(default = "standard")]
    pub profile: Profile,
    /// The run's limits.
    #[serde(default)]
    pub limits: RuntimeLimits,
}

fn standard() -> Profile {
    Profile::Standard
}

impl Default for CommandToolDef {
    fn default() -> Self {
        CommandToolDef {
            id: String::new(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            argv: Vec::new(),
            stdin: None,
            output: OutputMapping::Text,
            profile: Profile::Standard,
            limits: RuntimeLimits::default(),
        }
    }
}

/// One element of a parsed argv template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Arg(String),
}

/// `{name}` → `name`, for a whole element that is one placeholder.
fn placeholder(s: &str) -> Option<&str> {
    let name = s.strip_prefix('{')?.strip_suffix('}')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() || first == '_')
        .then_some(())
        .filter(|_| chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .map(|_| name)
}

/// True when `s` has a `{name}` inside it without being exactly one.
fn embeds_placeholder(s: &str) -> bool {
    s.match_indices('{').any(|(i, _)| {
        s[i..]
            .find('}')
            .is_some_and(|j| placeholder(&s[i..=i + j]).is_some())
    })
}

/// A validated command tool: the backend behind its catalog entry.
pub struct CommandTool {
    id: String,
    parts: Vec<Part>,
    required: Vec<String>,
    stdin: Option<StdinMapping>,
    output: OutputMapping,
    profile: Profile,
    limits: RuntimeLimits,
    runtimes: Arc<Runtimes>,
}

impl std::fmt::Debug for CommandTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandTool")
            .field("id", &self.id)
            .field("parts", &self.parts)
            .field("profile", &self.profile)
            .finish_non_exhaustive()
    }
}

impl CommandTool {
    /// Validates `def` and builds its catalog [`Tool`] and backend.
    /// Errors are `invalid_definition` naming the field.
    pub fn new(def: CommandToolDef, runtimes: Arc<Runtimes>) -> Result<(Tool, CommandTool), Error> {
        let bad = |field: &str, message: String| Error::InvalidDefinition {
            tool: def.id.clone(),
            field: field.into(),
            message,
        };
        let properties = def
            .input_schema
            .get("properties")
            .and_then(Value::as_object);
        let has_property = |name: &str| properties.is_some_and(|p| p.contains_key(name));
        let Some(program) = def.argv.first() else {
            return Err(bad("argv", "must name a program".into()));
        };
        if placeholder(program).is_some() || embeds_placeholder(program) {
            return Err(bad(
                "argv[0]",
                "the program must be literal, not a placeholder".into(),
            ));
        }
        if program.is_empty() {
            return Err(bad("argv[0]", "must not be empty".into()));
        }
        let mut parts = Vec::with_capacity(def.argv.len());
        for (i, element) in def.argv.iter().enumerate() {
            if let Some(name) = placeholder(element) {
                if !has_property(name) {
                    return Err(bad(
                        &format!("argv[{i}]"),
                        format!("placeholder {{{name}}} names no property of input_schema"),
                    ));
                }
                parts.push(Part::Arg(name.to_owned()));
            } else if embeds_placeholder(element) {
                return Err(bad(
                    &format!("argv[{i}]"),
                    format!(
                        "{element:?}: placeholders must be whole argv elements (\"{{name}}\"), never part of one"
                    ),
                ));
            } else {
                parts.push(Part::Literal(element.clone()));
            }
        }
        if let Some(StdinMapping::Field(name)) = &def.stdin
            && !has_property(name)
        {
            return Err(bad(
                "stdin",
                format!("{{{name}}} names no property of input_schema"),
            ));
        }
        def.limits.validate().map_err(|e| match e {
            Error::InvalidRequest { field, message } => bad(&field, message),
            other => bad("limits", other.to_string()),
        })?;
        let required = def
            .input_schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let mut builder = Tool::builder(&def.id)
            .description(def.description.clone())
            .input_schema(def.input_schema.clone())
            .tags(["command"]);
        if let Some(schema) = &def.output_schema {
            builder = builder.output_schema(schema.clone());
        }
        let tool = builder.build()?;
        let backend = CommandTool {
            id: def.id,
            parts,
            required,
            stdin: def.stdin,
            output: def.output,
            profile: def.profile,
            limits: def.limits,
            runtimes,
        };
        Ok((tool, backend))
    }

    /// Validates `def` and registers it in `catalog`.
    pub fn register(
        catalog: &Catalog,
        def: CommandToolDef,
        runtimes: Arc<Runtimes>,
    ) -> Result<(), Error> {
        let (tool, backend) = CommandTool::new(def, runtimes)?;
        catalog.register(tool, Arc::new(backend))
    }

    /// The argv for `args` (an object the pipeline already validated).
    pub fn argv(&self, args: &Value) -> Result<Vec<String>, Error> {
        let mut argv = Vec::with_capacity(self.parts.len());
        for part in &self.parts {
            match part {
                Part::Literal(s) => argv.push(s.clone()),
                Part::Arg(name) => match args.get(name) {
                    None | Some(Value::Null) if !self.required.contains(name) => {}
                    None | Some(Value::Null) => {
                        return Err(self.invalid(name, "required", "is required by argv"));
                    }
                    Some(Value::Array(items)) => {
                        for (i, item) in items.iter().enumerate() {
                            argv.push(self.scalar(item).ok_or_else(|| {
                                self.invalid(
                                    &format!("{name}/{i}"),
                                    "type",
                                    "array items in argv must be strings, numbers or booleans",
                                )
                            })?);
                        }
                    }
                    Some(v) => argv.push(self.scalar(v).ok_or_else(|| {
                        self.invalid(
                            name,
                            "type",
                            "argv values must be strings, numbers, booleans or arrays of them",
                        )
                    })?),
                },
            }
        }
        Ok(argv)
    }

    fn scalar(&self, v: &Value) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    fn invalid(&self, path: &str, keyword: &str, message: &str) -> Error {
        Error::ValidationInput(Box::new(ValidationFailure {
            tool: self.id.clone(),
            violations: vec![Violation {
                instance_path: format!("/{path}"),
                schema_path: format!("/x-command/argv/{keyword}"),
                keyword: keyword.to_owned(),
                message: format!("{path} {message}"),
            }],
            truncated: false,
        }))
    }

    fn stdin(&self, args: &Value) -> Option<String> {
        match self.stdin.as_ref()? {
            StdinMapping::Json => Some(args.to_string()),
            StdinMapping::Field(name) => Some(match args.get(name) {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
            }),
        }
    }

    fn failed(&self, message: String, data: Option<Value>) -> Error {
        Error::ExecutionFailed {
            tool: self.id.clone(),
            message,
            data,
            panicked: false,
        }
    }

    async fn run(&self, args: Value, cancel: CancellationToken) -> Result<ToolOutput, Error> {
        let argv = self.argv(&args)?;
        let stdin = self.stdin(&args);
        let mut unit = crate::CommandUnit {
            argv,
            stdin,
            ..crate::CommandUnit::default()
        };
        unit.cwd = None;
        let request =
            RunRequest::new(Unit::Command(unit), self.profile).with_limits(self.limits.clone());
        let outcome = self.runtimes.run(request, None, cancel).await;
        if let Some(error) = self.outcome_error(&outcome) {
            return Err(error);
        }
        let value = match self.output {
            OutputMapping::Text => json!({"stdout": outcome.stdout}),
            OutputMapping::Json => serde_json::from_str(&outcome.stdout).map_err(|e| {
                let head: String = outcome.stdout.chars().take(200).collect();
                self.failed(
                    format!("stdout is not JSON ({e}): {head:?}"),
                    Some(json!({"runtime": outcome.runtime})),
                )
            })?,
        };
        Ok(ToolOutput::structured(value))
    }
}

impl CommandTool {
    /// The error a run that did not end `ok` maps to: non-zero exit →
    /// `execution_failed`, wall time → `timeout`, any other sandbox limit
    /// → `limit_exceeded` with the same limit kind, cancellation →
    /// `cancelled`, a runtime that could not run the unit →
    /// `backend_unavailable`. `None` for a successful run.
    fn outcome_error(&self, outcome: &RunOutcome) -> Option<Error> {
        Some(match &outcome.status {
            RunStatus::Ok => return None,
            RunStatus::Failed { message } => self.failed(
                format!("{message}{}", outcome.stderr_tail()),
                Some(json!({"exit_code": outcome.exit_code, "runtime": outcome.runtime})),
            ),
            RunStatus::LimitExceeded {
                limit: LimitKind::WallTime,
                ..
            } => Error::Timeout {
                tool: self.id.clone(),
                after: self.limits.wall_time,
            },
            RunStatus::LimitExceeded { limit, message } => Error::LimitExceeded {
                limit: *limit,
                message: format!("(tool {}, runtime {}): {message}", self.id, outcome.runtime),
            },
            RunStatus::Cancelled => Error::Cancelled {
                tool: self.id.clone(),
            },
            // The runtime's own error (a refused unit, an unavailable
            // sandbox), with its code kept.
            RunStatus::Error { error } => Error::from(error.clone()),
        })
    }
}

impl Backend for CommandTool {
    fn kind(&self) -> &str {
        "command"
    }

    fn call<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, Error>> {
        let cancel = call.ctx.cancellation_token().cloned().unwrap_or_default();
        Box::pin(self.run(call.args, cancel))
    }

    fn availability(&self) -> Availability {
        match self.runtimes.select(self.profile, UnitKind::Command) {
            Ok(_) => Availability::Available,
            Err(e) => Availability::Unavailable { reason: e.message },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(argv: &[&str]) -> CommandToolDef {
        CommandToolDef {
            id: "t:cmd".into(),
            description: "test".into(),
            input_schema: json!({"type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "array"}, "o": {}},
                "required": ["a"]}),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            ..CommandToolDef::default()
        }
    }

    fn tool(argv: &[&str]) -> Result<CommandTool, Error> {
        CommandTool::new(def(argv), Arc::new(Runtimes::default())).map(|(_, b)| b)
    }

    #[test]
    fn placeholders_are_whole_elements() {
        assert_eq!(placeholder("{a}"), Some("a"));
        assert_eq!(placeholder("{print $1}"), None);
        assert_eq!(placeholder("a{b}"), None);
        assert!(embeds_placeholder("--x={a}"));
        assert!(!embeds_placeholder("{print $1}"));
        let t = tool(&["prog", "--", "{a}", "{b}"]).unwrap();
        let argv = t
            .argv(&json!({"a": "; rm -rf /", "b": ["$(id)", 2, true]}))
            .unwrap();
        assert_eq!(argv, ["prog", "--", "; rm -rf /", "$(id)", "2", "true"]);
        // Optional and absent: no element.
        assert_eq!(t.argv(&json!({"a": "x"})).unwrap(), ["prog", "--", "x"]);
    }

    #[test]
    fn bad_definitions_name_the_field() {
        let msg = |argv: &[&str]| tool(argv).unwrap_err().to_string();
        assert!(msg(&[]).contains("argv"), "{}", msg(&[]));
        assert!(msg(&["{a}"]).contains("argv[0]"));
        assert!(msg(&["p", "--x={a}"]).contains("argv[1]"));
        assert!(msg(&["p", "{nope}"]).contains("argv[1]"));
        assert!(msg(&["p", "{nope}"]).starts_with("invalid_definition"));
    }

    #[test]
    fn bad_values_are_validation_errors() {
        let t = tool(&["p", "{a}", "{o}", "{b}"]).unwrap();
        let e = t.argv(&json!({})).unwrap_err();
        assert_eq!(e.code().as_str(), "validation_input");
        assert!(e.to_string().contains("/a"), "{e}");
        let e = t.argv(&json!({"a": "x", "o": {"k": 1}})).unwrap_err();
        assert!(e.to_string().contains("/o"), "{e}");
        let e = t.argv(&json!({"a": "x", "b": [[1]]})).unwrap_err();
        assert!(e.to_string().contains("/b/0"), "{e}");
    }

    #[test]
    fn sandbox_limits_map_to_limit_exceeded_with_the_same_kind() {
        let t = tool(&["p", "{a}"]).unwrap();
        let kinds = [
            LimitKind::CpuTime,
            LimitKind::Memory,
            LimitKind::Processes,
            LimitKind::Output,
            LimitKind::Disk,
            LimitKind::Network,
            LimitKind::ToolCalls,
        ];
        for kind in kinds {
            let outcome = RunOutcome::new(
                "bubblewrap",
                RunStatus::LimitExceeded {
                    limit: kind,
                    message: "over".into(),
                },
            );
            let body = t.outcome_error(&outcome).unwrap().to_body();
            assert_eq!(body.code.as_str(), "limit_exceeded", "{kind}: {body:?}");
            let details = body.details.unwrap();
            assert_eq!(details["limit"], kind.as_str(), "{kind}");
            assert!(body.message.contains("t:cmd"), "{}", body.message);
            assert!(body.message.contains("bubblewrap"), "{}", body.message);
        }
        let wall = RunOutcome::new(
            "bubblewrap",
            RunStatus::LimitExceeded {
                limit: LimitKind::WallTime,
                message: "over".into(),
            },
        );
        assert_eq!(t.outcome_error(&wall).unwrap().code().as_str(), "timeout");
        let failed = RunOutcome::new(
            "x",
            RunStatus::Failed {
                message: "exit 3".into(),
            },
        );
        assert_eq!(
            t.outcome_error(&failed).unwrap().code().as_str(),
            "execution_failed"
        );
        assert!(
            t.outcome_error(&RunOutcome::new("x", RunStatus::Ok))
                .is_none()
        );
    }

    /// A failed run's error ends with the tail of its stderr (the shared
    /// [`RunOutcome::stderr_tail`]), cut at a character boundary.
    #[test]
    fn failed_runs_carry_the_tail_of_stderr() {
        let t = tool(&["p"]).unwrap();
        let mut failed = RunOutcome::new(
            "x",
            RunStatus::Failed {
                message: "exit 3".into(),
            },
        );
        let message = |o: &RunOutcome| t.outcome_error(o).unwrap().to_body().message;
        failed.stderr = "  \n".into();
        assert!(message(&failed).ends_with("exit 3"), "{}", message(&failed));
        // 3-byte characters: the byte cut lands inside one.
        failed.stderr = format!("{}last words\n", "\u{20ac}".repeat(600));
        let m = message(&failed);
        let (_, tail) = m.split_once("exit 3; stderr: ").expect(&m);
        assert!(tail.ends_with("\u{20ac}last words"), "{tail}");
        assert!(
            tail.len() <= RunOutcome::STDERR_TAIL_BYTES,
            "{}",
            tail.len()
        );
        assert!(
            tail.len() > RunOutcome::STDERR_TAIL_BYTES - 3,
            "{}",
            tail.len()
        );
    }

    #[test]
    fn stdin_mapping_parses() {
        let m: StdinMapping = serde_json::from_value(json!("{a}")).unwrap();
        assert_eq!(m, StdinMapping::Field("a".into()));
        let m: StdinMapping = serde_json::from_value(json!("json")).unwrap();
        assert_eq!(m, StdinMapping::Json);
        assert!(serde_json::from_value::<StdinMapping>(json!("yaml")).is_err());
    }
}
