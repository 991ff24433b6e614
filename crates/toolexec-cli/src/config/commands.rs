//! `[[commands]]`: command tools, as `toolexec-runtime`'s
//! [`CommandToolDef`], checked as registration will check them.

use serde::Deserialize;
use toolexec_runtime::{CommandToolDef, OutputMapping, Profile, RuntimeLimits, StdinMapping};

use super::error::Fault;
use super::values::{DurationText, SizeText, from_text};

/// One `[[commands]]` table as written: schemas as TOML tables or JSON
/// text, limits as text (`"30s"`, `"64MiB"`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CommandTable {
    id: String,
    description: String,
    input_schema: Schema,
    output_schema: Option<Schema>,
    argv: Vec<String>,
    stdin: Option<StdinMapping>,
    #[serde(default)]
    output: OutputMapping,
    #[serde(default = "standard", deserialize_with = "from_text")]
    profile: Profile,
    #[serde(default)]
    limits: CommandLimits,
}

fn standard() -> Profile {
    Profile::Standard
}

/// A JSON Schema object, written as an inline TOML table or as JSON text.
pub(super) struct Schema(pub(super) serde_json::Value);

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Source {
            Json(String),
            Table(serde_json::Map<String, serde_json::Value>),
        }
        match Source::deserialize(d)? {
            Source::Table(t) => Ok(Schema(serde_json::Value::Object(t))),
            Source::Json(text) => match serde_json::from_str(&text) {
                Ok(v @ serde_json::Value::Object(_)) => Ok(Schema(v)),
                Ok(_) => Err(serde::de::Error::custom(
                    "the JSON schema must be an object",
                )),
                Err(e) => Err(serde::de::Error::custom(format!("not valid JSON: {e}"))),
            },
        }
    }
}

/// `[commands.limits]`: the file's names for [`RuntimeLimits`].
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CommandLimits {
    wall_time: Option<DurationText>,
    cpu_time: Option<DurationText>,
    memory: Option<SizeText>,
    max_processes: Option<u32>,
    max_output: Option<SizeText>,
    disk: Option<SizeText>,
    max_tool_calls: Option<usize>,
}

/// How [`RuntimeLimits`] fields are written in `[commands.limits]`.
const LIMIT_KEYS: &[(&str, &str)] = &[
    ("memory_bytes", "memory"),
    ("max_output_bytes", "max_output"),
    ("disk_bytes", "disk"),
];

impl CommandLimits {
    /// The defaults with what the table sets.
    fn into_limits(self) -> RuntimeLimits {
        let mut limits = RuntimeLimits::default();
        if let Some(d) = self.wall_time {
            limits.wall_time = d.0;
        }
        if let Some(d) = self.cpu_time {
            limits.cpu_time = Some(d.0);
        }
        if let Some(m) = self.memory {
            limits.memory_bytes = Some(m.0 as u64);
        }
        if let Some(p) = self.max_processes {
            limits.max_processes = Some(p);
        }
        if let Some(o) = self.max_output {
            limits.max_output_bytes = o.0;
        }
        if let Some(d) = self.disk {
            limits.disk_bytes = Some(d.0 as u64);
        }
        if let Some(n) = self.max_tool_calls {
            limits.max_tool_calls = n;
        }
        limits
    }
}

/// The command tools of the file, with unique ids.
pub(super) fn resolve(tables: Vec<CommandTable>) -> Result<Vec<CommandToolDef>, Fault> {
    let mut commands: Vec<CommandToolDef> = Vec::with_capacity(tables.len());
    for (i, table) in tables.into_iter().enumerate() {
        let def = table.resolve(i)?;
        if commands.iter().any(|c| c.id == def.id) {
            return Err(Fault::new(
                format!("commands[{i}].id"),
                format!("duplicate command tool id {:?}", def.id),
            ));
        }
        commands.push(def);
    }
    Ok(commands)
}

impl CommandTable {
    /// Validates the table (index `i`) into a definition.
    fn resolve(self, i: usize) -> Result<CommandToolDef, Fault> {
        let key = |k: &str| format!("commands[{i}].{k}");
        if let Err(reason) = toolexec::ToolIdRef::parse(&self.id) {
            return Err(Fault::new(
                key("id"),
                format!("not a valid tool id: {reason}"),
            ));
        }
        if !self.id.contains(':') {
            return Err(Fault::new(
                key("id"),
                format!("{:?}: write it as \"namespace:name\"", self.id),
            ));
        }
        let limits = self.limits.into_limits();
        limits
            .validate()
            .map_err(|e| Fault::refused(&key("limits"), e, LIMIT_KEYS))?;
        let def = CommandToolDef {
            id: self.id,
            description: self.description,
            input_schema: self.input_schema.0,
            output_schema: self.output_schema.map(|s| s.0),
            argv: self.argv,
            stdin: self.stdin,
            output: self.output,
            profile: self.profile,
            limits,
        };
        // The same checks as at registration, reported at the file's key.
        toolexec_runtime::CommandTool::new(def.clone(), Default::default()).map_err(
            |e| match e {
                toolexec::Error::InvalidDefinition { field, message, .. } => {
                    Fault::new(key(&field), message)
                }
                other => Fault::new(key("argv"), other.to_string()),
            },
        )?;
        Ok(def)
    }
}
