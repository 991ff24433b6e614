//! The meta-tools: names, descriptions written for a model, input and output
//! schemas, and the argument types they parse into.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use toolexec::{ChainStep, DetailLevel};

#[cfg(feature = "code")]
use super::code::CodeModeOptions;
use super::options::GatewayOptions;

/// `search_tools`.
pub(super) const SEARCH_TOOLS: &str = "search_tools";
/// `list_namespaces`.
pub(super) const LIST_NAMESPACES: &str = "list_namespaces";
/// `describe_tool`.
pub(super) const DESCRIBE_TOOL: &str = "describe_tool";
/// `run_tool`.
pub(super) const RUN_TOOL: &str = "run_tool";
/// `run_chain`.
pub(super) const RUN_CHAIN: &str = "run_chain";
/// `execute_code` (feature `code`).
#[cfg(feature = "code")]
pub(super) const EXECUTE_CODE: &str = "execute_code";

/// Every meta-tool name, in the order `tools/list` shows them
/// (`execute_code` with the feature `code`).
#[cfg(feature = "code")]
pub const META_TOOLS: [&str; 6] = [
    SEARCH_TOOLS,
    LIST_NAMESPACES,
    DESCRIBE_TOOL,
    RUN_TOOL,
    RUN_CHAIN,
    EXECUTE_CODE,
];
/// Every meta-tool name, in the order `tools/list` shows them
/// (`execute_code` with the feature `code`).
#[cfg(not(feature = "code"))]
pub const META_TOOLS: [&str; 5] = [
    SEARCH_TOOLS,
    LIST_NAMESPACES,
    DESCRIBE_TOOL,
    RUN_TOOL,
    RUN_CHAIN,
];

/// Default `limit` of `search_tools`.
pub(super) const DEFAULT_SEARCH_LIMIT: usize = 10;
/// Largest `limit` of `search_tools`.
pub(super) const MAX_SEARCH_LIMIT: usize = 50;

/// Arguments of `search_tools`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchArgs {
    pub query: String,
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub mode: Option<toolexec::search::SearchMode>,
}

/// Arguments of `list_namespaces`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NoArgs {}

/// Arguments of `describe_tool`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DescribeArgs {
    pub tool_id: String,
    #[serde(default)]
    pub detail: DetailLevel,
}

/// Arguments of `run_tool`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RunArgs {
    pub tool_id: String,
    #[serde(default)]
    pub args: Option<Value>,
}

/// Arguments of `run_chain`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ChainArgs {
    pub steps: Vec<ChainStep>,
}

/// A meta-tool's MCP definition pieces.
pub(super) struct MetaTool {
    pub name: &'static str,
    pub title: &'static str,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Value,
    pub read_only: bool,
}

const SEARCH_DESCRIPTION: &str = "\
Find tools in the catalog by describing what you need in plain words \
(e.g. \"sha256 hash of a string\", \"convert time zone\"). Use this first when \
you do not know which tool to call. Returns up to `limit` (default 10, at most \
50) matches, best first, each with its `id`, a one-line `summary`, `tags` and a \
relevance `score`. Tool ids look like `namespace:name` or \
`namespace:name:version` (e.g. `hash:sha256`); pass an id to `describe_tool` \
to see its arguments, then to `run_tool` to call it. Use `namespace` to search \
one namespace only (see `list_namespaces`).";

const LIST_NAMESPACES_DESCRIPTION: &str = "\
List the catalog's namespaces (groups of related tools, the part of a tool id \
before the first `:`) with how many tools each holds. Use it to get an overview \
of what is available, or to pick a `namespace` for `search_tools`. Takes no \
arguments.";

const DESCRIBE_DESCRIPTION: &str = "\
Show one tool's documentation before calling it. `tool_id` is an id from \
`search_tools` (`namespace:name`, or `namespace:name:version` for a specific \
version; without a version the newest is used). `detail` is `summary` (id, \
title, summary, tags), `schema` (default: plus the full description and the \
JSON Schemas of its arguments `input_schema` and result `output_schema`) or \
`full` (plus annotations, usage notes and worked examples). Read \
`input_schema` to build the `args` for `run_tool`.";

/// The end of `describe_tool`'s description with code mode.
#[cfg(feature = "code")]
const DESCRIBE_TYPESCRIPT: &str = " At `schema` and `full` the \
result also has `typescript`: the tool's TypeScript declaration (argument and \
result types), for scripts sent to `execute_code`.";

const RUN_TOOL_DESCRIPTION: &str = "\
Call one catalog tool by id and return its result. `tool_id` is an id from \
`search_tools` (e.g. `math:add`); `args` is a JSON object matching the tool's \
input schema (see `describe_tool`). On success the structured result is the \
tool's JSON value when that is an object, else `{\"result\": value}`. \
Failures come back as an error result whose text starts with a stable code: \
`validation_input` (args break the schema; the details list each violation, \
fix them and retry), `tool_not_found`, `invalid_tool_id`, `execution_failed`, \
`timeout`, `cancelled`, `limit_exceeded`, `backend_unavailable`, \
`validation_output`; the structured error is `{\"error\": {code, message, \
details}}`.";

const RUN_CHAIN_DESCRIPTION: &str = "\
Run several tools in sequence in one call, optionally feeding each step the \
previous step's result. `steps` is an array of \
`{\"tool_id\": \"ns:name\", \"args\": {...}, \"use_previous\": false, \
\"stop_on_error\": true}`. With `use_previous: true` the previous step's \
structured result is passed as `args.previous` (or as the whole arguments \
when the step has no `args`). With `stop_on_error: true` (default) a failing \
step skips the rest. Returns `{ok, output, steps, duration_ms}`: `ok` is true \
when every step succeeded, `output` is the last step's result, and each \
`steps[i]` has the step's `output` or `error` (with a stable error code) or \
`skipped: true`. A chain with a failed step comes back as an error result \
carrying `{\"error\": ..., \"chain\": {...}}`. Example: \
`{\"steps\": [{\"tool_id\": \"math:add\", \"args\": {\"a\": 2, \"b\": 3}}, \
{\"tool_id\": \"math:multiply\", \"args\": {\"b\": 10}, \"use_previous\": true}]}`.";

pub(crate) fn error_body_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Stable error code, e.g. validation_input"},
            "message": {"type": "string", "description": "Human message, starting with the code"},
            "details": {"description": "Structured details (violations, limit, tool, ...)"}
        },
        "required": ["code", "message"]
    })
}

fn tool_id_schema(what: &str) -> Value {
    json!({
        "type": "string",
        "minLength": 3,
        "description": format!("{what}: `namespace:name` or `namespace:name:version`, e.g. `hash:sha256`")
    })
}

fn search() -> MetaTool {
    MetaTool {
        name: SEARCH_TOOLS,
        title: "Search tools",
        description: SEARCH_DESCRIPTION.to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What the tool should do, in words"},
                "limit": {
                    "type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT,
                    "default": DEFAULT_SEARCH_LIMIT, "description": "Most results to return"
                },
                "namespace": {"type": "string", "description": "Only search this namespace"},
                "mode": {
                    "type": "string", "enum": ["lexical", "semantic", "hybrid"],
                    "description": "How to rank: by words (lexical), by meaning (semantic, needs the server's embedding model) or both (hybrid); default: the server's"
                }
            },
            "required": ["query"],
            "additionalProperties": false
        }),
        output_schema: json!({
            "type": "object",
            "properties": {
                "results": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string", "description": "Tool id for describe_tool and run_tool"},
                            "title": {"type": "string"},
                            "summary": {"type": "string"},
                            "tags": {"type": "array", "items": {"type": "string"}},
                            "score": {"type": "number", "description": "Relevance; higher is better"}
                        },
                        "required": ["id", "summary", "score"]
                    }
                }
            },
            "required": ["results"]
        }),
        read_only: true,
    }
}

fn list_namespaces() -> MetaTool {
    MetaTool {
        name: LIST_NAMESPACES,
        title: "List namespaces",
        description: LIST_NAMESPACES_DESCRIPTION.to_owned(),
        input_schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
        output_schema: json!({
            "type": "object",
            "properties": {
                "namespaces": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "tools": {"type": "integer", "description": "Number of tools (each version counts)"}
                        },
                        "required": ["name", "tools"]
                    }
                }
            },
            "required": ["namespaces"]
        }),
        read_only: true,
    }
}

fn describe() -> MetaTool {
    // Code mode adds the `typescript` declaration to both.
    #[cfg_attr(not(feature = "code"), allow(unused_mut))]
    let mut description = DESCRIBE_DESCRIPTION.to_owned();
    #[cfg_attr(not(feature = "code"), allow(unused_mut))]
    let mut output_schema = json!({
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "title": {"type": "string"},
            "summary": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "description": {"type": "string"},
            "input_schema": {"type": "object", "description": "JSON Schema of the arguments"},
            "output_schema": {"description": "JSON Schema of the structured result"},
            "annotations": {"type": "object"},
            "notes": {"type": "array", "items": {"type": "string"}},
            "examples": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "title": {"type": "string"},
                        "args": {"type": "object"},
                        "result": {}
                    },
                    "required": ["title", "args"]
                }
            }
        },
        "required": ["id", "summary"]
    });
    #[cfg(feature = "code")]
    {
        description.push_str(DESCRIBE_TYPESCRIPT);
        output_schema["properties"]["typescript"] = json!({
            "type": "string",
            "description": "TypeScript declaration of the tool's function for execute_code scripts (schema and full detail)"
        });
    }
    MetaTool {
        name: DESCRIBE_TOOL,
        title: "Describe a tool",
        description,
        input_schema: json!({
            "type": "object",
            "properties": {
                "tool_id": tool_id_schema("The tool to describe"),
                "detail": {
                    "type": "string", "enum": ["summary", "schema", "full"], "default": "schema",
                    "description": "How much to include"
                }
            },
            "required": ["tool_id"],
            "additionalProperties": false
        }),
        output_schema,
        read_only: true,
    }
}

fn run_tool() -> MetaTool {
    MetaTool {
        name: RUN_TOOL,
        title: "Run a tool",
        description: RUN_TOOL_DESCRIPTION.to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "tool_id": tool_id_schema("The tool to call"),
                "args": {
                    "type": "object",
                    "description": "Arguments matching the tool's input schema (default {})"
                }
            },
            "required": ["tool_id"],
            "additionalProperties": false
        }),
        output_schema: json!({
            "type": "object",
            "description": "The tool's structured result: its JSON value when that is an object, else {\"result\": value}"
        }),
        read_only: false,
    }
}

fn run_chain() -> MetaTool {
    let step_output = json!({
        "type": "object",
        "properties": {
            "value": {"description": "The step's structured result"},
            "content": {"type": "array", "description": "Content blocks the tool returned, if any"}
        }
    });
    MetaTool {
        name: RUN_CHAIN,
        title: "Run a chain of tools",
        description: RUN_CHAIN_DESCRIPTION.to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "steps": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "tool_id": tool_id_schema("The step's tool"),
                            "args": {"type": "object", "description": "Arguments of the step"},
                            "use_previous": {
                                "type": "boolean", "default": false,
                                "description": "Pass the previous step's result as args.previous (or as the whole args when args is absent)"
                            },
                            "stop_on_error": {
                                "type": "boolean", "default": true,
                                "description": "Skip the remaining steps when this one fails"
                            }
                        },
                        "required": ["tool_id"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["steps"],
            "additionalProperties": false
        }),
        output_schema: json!({
            "type": "object",
            "properties": {
                "ok": {"type": "boolean", "description": "True when every step ran and succeeded"},
                "output": {"description": "The last step's structured result, when it succeeded"},
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "tool_id": {"type": "string"},
                            "output": step_output,
                            "error": error_body_schema(),
                            "skipped": {"type": "boolean"},
                            "duration_ms": {"type": "number"}
                        },
                        "required": ["tool_id", "skipped", "duration_ms"]
                    }
                },
                "duration_ms": {"type": "number"}
            },
            "required": ["ok", "steps", "duration_ms"]
        }),
        read_only: false,
    }
}

#[cfg(feature = "code")]
fn execute_code(code: &CodeModeOptions) -> MetaTool {
    MetaTool {
        name: EXECUTE_CODE,
        title: "Execute code that calls tools",
        description: code.description(),
        input_schema: code.input_schema(),
        output_schema: CodeModeOptions::output_schema(error_body_schema()),
        read_only: false,
    }
}

/// Every meta-tool's definition (`execute_code` with the feature `code`,
/// described with `options.code`'s limits).
pub(super) fn all(options: &GatewayOptions) -> Vec<MetaTool> {
    #[cfg(not(feature = "code"))]
    let _ = options;
    vec![
        search(),
        list_namespaces(),
        describe(),
        run_tool(),
        run_chain(),
        #[cfg(feature = "code")]
        execute_code(&options.code),
    ]
}

/// Parses a meta-tool's arguments (absent arguments count as `{}`).
pub(super) fn parse<T: serde::de::DeserializeOwned>(
    tool: &str,
    args: Option<Map<String, Value>>,
) -> Result<T, String> {
    let value = Value::Object(args.unwrap_or_default());
    serde_json::from_value(value).map_err(|e| format!("invalid arguments for {tool}: {e}"))
}

/// The default server instructions around `$code`, the sentence on
/// `execute_code`.
macro_rules! instructions {
    ($code:literal) => {
        concat!(
            "\
This server gives access to a catalog of tools through a few meta-tools. \
Workflow: 1) `search_tools` with a short description of what you need (or \
`list_namespaces` for an overview); 2) `describe_tool` with the chosen id to \
read its input schema; 3) `run_tool` with `tool_id` and `args`, or \
`run_chain` to run several steps where each can use the previous result; ",
            $code,
            "\
Tool ids look like `namespace:name` (e.g. `hash:sha256`). Errors start with a \
stable code such as `validation_input`; read the details, fix the arguments \
and retry."
        )
    };
}

/// The default server instructions, used when [`GatewayOptions::instructions`]
/// is `None`.
#[cfg(feature = "code")]
pub const DEFAULT_INSTRUCTIONS: &str = instructions!(
    "\
for many calls, loops or combining results, send one JavaScript script to \
`execute_code` (`describe_tool` gives each tool's TypeScript declaration). "
);

/// The default server instructions, used when [`GatewayOptions::instructions`]
/// is `None`.
#[cfg(not(feature = "code"))]
pub const DEFAULT_INSTRUCTIONS: &str = instructions!("");
