//! [`import`]: a server's methods as tools.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use prost_reflect::{DescriptorPool, MethodDescriptor};
use prost_types::method_options::IdempotencyLevel;
use serde_json::json;
use toolexec::{Backend, Error, Tool, ToolAnnotations};

use crate::check;
use crate::connect::{GrpcOptions, Service};
use crate::method::Method;
use crate::reflect;
use crate::schema::{self, Direction};

/// Most methods one server may describe.
const MAX_METHODS: usize = 10_000;
/// Largest JSON Schema (serialized) of one tool's input or output.
const MAX_SCHEMA_BYTES: usize = 1 << 20;

/// Where the service descriptions come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The server's reflection service.
    Reflection,
    /// A descriptor set file (`protoc --include_imports
    /// --descriptor_set_out=FILE`, `--include_source_info` for the
    /// comments as descriptions).
    DescriptorSet(PathBuf),
}

/// What to import from one server.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The tools' namespace (`echo` makes `echo:echo_say`).
    pub name: String,
    /// The server: `http://host:port` (HTTP/2 without TLS) or `https://`.
    pub url: String,
    /// Where the descriptions come from.
    pub source: Source,
    /// Services (`package.Service`) or methods (`package.Service/Method`)
    /// to import; empty imports every one.
    pub include: Vec<String>,
    /// Services or methods left out.
    pub exclude: Vec<String>,
    /// Channel, limits and metadata.
    pub options: GrpcOptions,
}

impl ImportOptions {
    /// Every service of `url`, described by `source`, as namespace `name`.
    pub fn new(name: &str, url: &str, source: Source) -> Self {
        ImportOptions {
            name: name.to_owned(),
            url: url.to_owned(),
            source,
            include: Vec::new(),
            exclude: Vec::new(),
            options: GrpcOptions::default(),
        }
    }
}

/// The outcome of [`import`].
#[derive(Debug)]
pub struct Import {
    /// The server the tools call.
    pub service: Arc<Service>,
    /// The tools, sorted by id.
    pub tools: Vec<(Tool, Arc<Method>)>,
    /// Methods not imported because they cannot be, with the reason.
    pub skipped: Vec<Skipped>,
    /// Methods left out by `include` / `exclude`.
    pub excluded: usize,
}

impl Import {
    /// The tools as [`Catalog::register_many`](toolexec::Catalog::register_many)
    /// takes them.
    pub fn tools(&self) -> Vec<(Tool, Arc<dyn Backend>)> {
        self.tools
            .iter()
            .map(|(tool, method)| (tool.clone(), method.clone() as Arc<dyn Backend>))
            .collect()
    }
}

/// A method that was not imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// `package.Service/Method`.
    pub method: String,
    /// Why.
    pub reason: String,
}

/// Describes the server's services and builds a tool per selected unary
/// or server-streaming method (client- and bidirectional-streaming ones
/// are skipped with the reason, and logged). A server that cannot be
/// reached or described is `backend_unavailable`; bad options or a bad
/// descriptor set are `invalid_request` naming the field, as is an
/// `include` or `exclude` entry that names nothing.
pub async fn import(options: ImportOptions) -> Result<Import, Error> {
    let ImportOptions {
        name,
        url,
        source,
        include,
        exclude,
        options,
    } = options;
    let service = Service::new(&name, &url, options)?;
    let (services, pool) = match &source {
        Source::Reflection => reflect::discover(&service).await?,
        Source::DescriptorSet(path) => reflect::from_file(path)?,
    };
    let methods = methods(&pool, &services);
    if methods.len() > MAX_METHODS {
        return Err(Error::backend_unavailable(
            &name,
            format!(
                "the server describes {} methods, more than {MAX_METHODS}",
                methods.len()
            ),
        ));
    }
    for (field, entries) in [("include", &include), ("exclude", &exclude)] {
        if let Some(entry) = entries
            .iter()
            .find(|e| !methods.iter().any(|m| selects(e, m)))
        {
            let known: Vec<&str> = services.iter().take(20).map(String::as_str).collect();
            let more = if services.len() > 20 { ", ..." } else { "" };
            return Err(Error::invalid_request(
                field,
                format!(
                    "{entry:?} names no service or method of {name} (its services: {}{more})",
                    known.join(", ")
                ),
            ));
        }
    }
    let mut excluded = 0;
    let mut skipped = Vec::new();
    let mut chosen = Vec::new();
    for method in methods {
        let selected = (include.is_empty() || include.iter().any(|e| selects(e, &method)))
            && !exclude.iter().any(|e| selects(e, &method));
        if !selected {
            excluded += 1;
            continue;
        }
        match importable(&method) {
            Ok(()) => chosen.push(method),
            Err(reason) => skipped.push(Skipped {
                method: full_name(&method),
                reason,
            }),
        }
    }
    // `service_method`, or with the package when two services share a
    // short name; a name still taken keeps its first method.
    let short: Vec<String> = chosen.iter().map(|m| tool_name(m, false)).collect();
    let mut claimed: HashSet<String> = HashSet::new();
    let mut tools = Vec::new();
    for (i, method) in chosen.into_iter().enumerate() {
        let shared = short.iter().filter(|s| **s == short[i]).count() > 1;
        let original = if shared {
            tool_name(&method, true)
        } else {
            short[i].clone()
        };
        let mapped = toolexec::names::map_name(&original);
        if !claimed.insert(mapped.clone()) {
            skipped.push(Skipped {
                method: full_name(&method),
                reason: format!("its tool name {mapped:?} is taken by another method"),
            });
            continue;
        }
        let id = format!("{name}:{mapped}");
        match build(&service, &id, &method) {
            Ok(tool) => tools.push(tool),
            Err(reason) => skipped.push(Skipped {
                method: full_name(&method),
                reason,
            }),
        }
    }
    for s in &skipped {
        tracing::warn!(target: "toolexec_grpc", server = %name, method = %s.method, reason = %s.reason, "method not imported");
    }
    tools.sort_by(|a, b| a.0.id.cmp(&b.0.id));
    Ok(Import {
        service,
        tools,
        skipped,
        excluded,
    })
}

/// Every method of the named services, in order, each once (a server may
/// list a service twice).
fn methods(pool: &DescriptorPool, services: &[String]) -> Vec<MethodDescriptor> {
    let mut seen = HashSet::new();
    services
        .iter()
        .filter(|s| seen.insert(s.as_str()))
        .filter_map(|s| pool.get_service_by_name(s))
        .flat_map(|s| s.methods().collect::<Vec<_>>())
        .collect()
}

fn full_name(method: &MethodDescriptor) -> String {
    format!("{}/{}", method.parent_service().full_name(), method.name())
}

/// Whether `entry` (a service or `service/method`) names `method`.
fn selects(entry: &str, method: &MethodDescriptor) -> bool {
    entry == method.parent_service().full_name() || entry == full_name(method)
}

/// The tool name before mapping: `service_method` in snake case
/// (`Echo/SayHello` → `echo_say_hello`), with the package in front when
/// `qualified` (`acme.v1.Echo/Say` → `acme_v1_echo_say`).
fn tool_name(method: &MethodDescriptor, qualified: bool) -> String {
    let service = method.parent_service();
    let package = service.package_name();
    let prefix = if qualified && !package.is_empty() {
        format!("{}_", package.replace('.', "_"))
    } else {
        String::new()
    };
    format!("{prefix}{}_{}", snake(service.name()), snake(method.name()))
}

fn snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_ascii_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(char::is_ascii_lowercase);
            if i > 0 && (prev_lower || (next_lower && chars[i - 1].is_ascii_uppercase())) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Why a method cannot be a tool, if it cannot.
fn importable(method: &MethodDescriptor) -> Result<(), String> {
    if method.is_client_streaming() {
        return Err(if method.is_server_streaming() {
            "bidirectional streaming: a tool call sends one request".into()
        } else {
            "client streaming: a tool call sends one request".into()
        });
    }
    let input = method.input();
    check::messages(&input).map_err(|why| format!("its request: {why}"))?;
    check::messages(&method.output()).map_err(|why| format!("its answer: {why}"))?;
    if schema::non_object_well_known(input.full_name()) {
        return Err(format!(
            "its request {} is not a JSON object in the proto3 JSON mapping",
            input.full_name()
        ));
    }
    Ok(())
}

/// The tool of `method`.
fn build(
    service: &Arc<Service>,
    id: &str,
    method: &MethodDescriptor,
) -> Result<(Tool, Arc<Method>), String> {
    let service_descriptor = method.parent_service();
    let file = service_descriptor.parent_file_descriptor_proto();
    let streaming = method.is_server_streaming();
    let description = schema::comment(file, method.path()).unwrap_or_else(|| {
        format!(
            "Calls the gRPC method {} ({} → {}{}).",
            full_name(method),
            method.input().full_name(),
            if streaming { "stream of " } else { "" },
            method.output().full_name()
        )
    });
    let input = schema::message_schema(&method.input(), Direction::Input);
    let mut output = schema::message_schema(&method.output(), Direction::Output);
    for (side, schema) in [("request", &input), ("answer", &output)] {
        let bytes = schema.to_string().len();
        if bytes > MAX_SCHEMA_BYTES {
            return Err(format!(
                "the schema of its {side} is {bytes} bytes, more than {MAX_SCHEMA_BYTES}"
            ));
        }
    }
    if streaming {
        let defs = output.as_object_mut().and_then(|o| o.remove("$defs"));
        let mut wrapped = json!({
            "type": "object",
            "properties": {"messages": {"type": "array", "items": output}},
            "required": ["messages"]
        });
        if let Some(defs) = defs {
            wrapped["$defs"] = defs;
        }
        output = wrapped;
    }
    let level = method
        .method_descriptor_proto()
        .options
        .as_ref()
        .map(|o| o.idempotency_level());
    let annotations = ToolAnnotations {
        read_only_hint: Some(level == Some(IdempotencyLevel::NoSideEffects)),
        idempotent_hint: Some(matches!(
            level,
            Some(IdempotencyLevel::NoSideEffects | IdempotencyLevel::Idempotent)
        )),
        open_world_hint: Some(true),
        ..ToolAnnotations::default()
    };
    let package = method.parent_service().package_name().to_owned();
    let mut tags: Vec<String> = vec!["grpc".into(), method.parent_service().name().to_owned()];
    if streaming {
        tags.push("streaming".into());
    }
    if !package.is_empty() {
        tags.push(package);
    }
    let tool = Tool::builder(id)
        .title(format!(
            "{}.{}",
            method.parent_service().name(),
            method.name()
        ))
        .description(description)
        .input_schema(input)
        .output_schema(output)
        .annotations(annotations)
        .tags(tags)
        .build()
        .map_err(|e| e.to_string())?;
    let backend = Method::new(service.clone(), id.to_owned(), method.clone())?;
    Ok((tool, Arc::new(backend)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_snake_case() {
        assert_eq!(snake("SayHello"), "say_hello");
        assert_eq!(snake("Echo"), "echo");
        assert_eq!(snake("GetHTTPStatus"), "get_http_status");
        assert_eq!(snake("V2Thing"), "v2_thing");
        assert_eq!(snake("already_snake"), "already_snake");
    }
}
