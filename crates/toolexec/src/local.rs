//! Local tools: async Rust functions registered as tools, with schemas
//! derived from their argument and result types (serde + schemars).

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::backend::{Backend, BoxFuture, Call};
use crate::context::ToolContext;
use crate::docs::ToolDocs;
use crate::error::{Error, ValidationFailure};
use crate::output::ToolOutput;
use crate::schema::Violation;
use crate::tool::{Tool, ToolAnnotations, ToolBuilder};

/// A failure a local tool reports. It becomes `execution_failed` carrying
/// the message (and MCP's `isError: true` at the gateway).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    /// What went wrong, for the caller.
    pub message: String,
    /// Optional structured detail.
    pub data: Option<Value>,
}

impl ToolError {
    /// A failure with a message.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            data: None,
        }
    }

    /// Attaches structured detail.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// From anything printable (`.map_err(ToolError::msg)`).
    pub fn msg(e: impl fmt::Display) -> Self {
        ToolError::new(e.to_string())
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}

impl From<String> for ToolError {
    fn from(s: String) -> Self {
        ToolError::new(s)
    }
}

impl From<&str> for ToolError {
    fn from(s: &str) -> Self {
        ToolError::new(s)
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(e: serde_json::Error) -> Self {
        ToolError::msg(e)
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        ToolError::msg(e)
    }
}

fn tool_failure(tool: &Tool, e: ToolError) -> Error {
    Error::ExecutionFailed {
        tool: tool.id.to_string(),
        message: e.message,
        data: e.data,
        panicked: false,
    }
}

/// An async function usable as a tool. Implemented for
/// `Fn(Args) -> impl Future<Output = Result<R, E>>` and
/// `Fn(Args, ToolContext) -> ...`, where `Args: DeserializeOwned + JsonSchema`,
/// `R: Serialize + JsonSchema` and `E: Into<ToolError>`. The marker `M` only
/// tells the two shapes apart, as in axum.
pub trait Handler<M>: Send + Sync + Sized + 'static {
    /// Input schema and (when the result type has one) output schema.
    fn schemas() -> (Value, Option<Value>);
    /// Wraps the function as a backend.
    fn into_backend(self) -> Arc<dyn Backend>;
}

/// Marker for handlers taking only arguments.
pub struct ArgsOnly<A, R, E>(PhantomData<fn(A) -> (R, E)>);
/// Marker for handlers taking arguments and a [`ToolContext`].
pub struct WithContext<A, R, E>(PhantomData<fn(A) -> (R, E)>);

impl<F, Fut, A, R, E> Handler<ArgsOnly<A, R, E>> for F
where
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    A: DeserializeOwned + JsonSchema + Send + 'static,
    R: Serialize + JsonSchema + 'static,
    E: Into<ToolError> + 'static,
{
    fn schemas() -> (Value, Option<Value>) {
        derived_schemas::<A, R>()
    }

    fn into_backend(self) -> Arc<dyn Backend> {
        Arc::new(FnBackend {
            f: move |a: A, _ctx: ToolContext| self(a),
            _marker: PhantomData::<fn(A) -> (R, E)>,
        })
    }
}

impl<F, Fut, A, R, E> Handler<WithContext<A, R, E>> for F
where
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    A: DeserializeOwned + JsonSchema + Send + 'static,
    R: Serialize + JsonSchema + 'static,
    E: Into<ToolError> + 'static,
{
    fn schemas() -> (Value, Option<Value>) {
        derived_schemas::<A, R>()
    }

    fn into_backend(self) -> Arc<dyn Backend> {
        Arc::new(FnBackend {
            f: self,
            _marker: PhantomData::<fn(A) -> (R, E)>,
        })
    }
}

struct FnBackend<F, M> {
    f: F,
    _marker: PhantomData<M>,
}

impl<F, Fut, A, R, E> Backend for FnBackend<F, fn(A) -> (R, E)>
where
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    A: DeserializeOwned + Send + 'static,
    R: Serialize + 'static,
    E: Into<ToolError> + 'static,
{
    fn kind(&self) -> &str {
        "local"
    }

    fn call<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, Error>> {
        let tool = call.tool;
        let args: A = match serde_json::from_value(call.args) {
            Ok(a) => a,
            Err(e) => {
                return Box::pin(std::future::ready(Err(deserialize_error(tool, &e))));
            }
        };
        let fut = (self.f)(args, call.ctx);
        Box::pin(async move {
            match fut.await {
                Ok(r) => serde_json::to_value(r)
                    .map(ToolOutput::structured)
                    .map_err(|e| {
                        Error::execution_failed(
                            tool.id.to_string(),
                            format!("result could not be serialized: {e}"),
                        )
                    }),
                Err(e) => Err(tool_failure(tool, e.into())),
            }
        })
    }
}

/// The arguments passed the schema (or validation is off) but do not fit the
/// Rust type: report it as an input violation, never a panic.
fn deserialize_error(tool: &Tool, e: &serde_json::Error) -> Error {
    Error::ValidationInput(Box::new(ValidationFailure {
        tool: tool.id.to_string(),
        violations: vec![Violation {
            instance_path: String::new(),
            schema_path: String::new(),
            keyword: "type".into(),
            message: format!("arguments do not match the handler's type: {e}"),
        }],
        truncated: false,
    }))
}

fn derived_schemas<A: JsonSchema, R: JsonSchema>() -> (Value, Option<Value>) {
    let mut input = schemars::schema_for!(A).to_value();
    // `serde_json::Value` arguments derive an unconstrained schema; tool
    // arguments are always an object, so say so.
    if is_unconstrained(&input) {
        input = serde_json::json!({"type": "object"});
    } else if let Some(map) = input.as_object_mut()
        && !map.contains_key("type")
        && !map.contains_key("$ref")
    {
        map.insert("type".into(), "object".into());
    }
    let output = schemars::schema_for!(R).to_value();
    // An unconstrained result schema says nothing: leave it out.
    let output = (!is_unconstrained(&output)).then_some(output);
    (input, output)
}

/// True for `true`, `{}` and schemas with only annotations (`$schema`,
/// `title`, `description`), which accept anything.
fn is_unconstrained(schema: &Value) -> bool {
    match schema {
        Value::Bool(b) => *b,
        Value::Object(map) => map
            .keys()
            .all(|k| matches!(k.as_str(), "$schema" | "title" | "description" | "$id")),
        _ => false,
    }
}

/// Raw JSON handler: arguments as a `Value`, full control of the output
/// (content blocks included). Give it schemas with [`LocalTool::input_schema`]
/// and [`LocalTool::output_schema`].
pub fn raw_handler<F, Fut>(f: F) -> RawHandler<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    RawHandler(f)
}

/// See [`raw_handler`].
pub struct RawHandler<F>(F);

/// Marker for [`RawHandler`].
pub struct Raw;

impl<F, Fut> Handler<Raw> for RawHandler<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    fn schemas() -> (Value, Option<Value>) {
        (serde_json::json!({"type": "object"}), None)
    }

    fn into_backend(self) -> Arc<dyn Backend> {
        Arc::new(RawBackend(self.0))
    }
}

struct RawBackend<F>(F);

impl<F, Fut> Backend for RawBackend<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    fn kind(&self) -> &str {
        "local"
    }

    fn call<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, Error>> {
        let tool = call.tool;
        let fut = (self.0)(call.args, call.ctx);
        Box::pin(async move { fut.await.map_err(|e| tool_failure(tool, e)) })
    }
}

/// A local tool ready to register: definition plus handler.
///
/// ```
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use toolexec::{Catalog, LocalTool, ToolError};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Greet { name: String }
///
/// let catalog = Catalog::new();
/// LocalTool::new("demo:greet", |g: Greet| async move {
///     Ok::<_, ToolError>(format!("hello {}", g.name))
/// })
/// .description("Greets someone")
/// .tags(["demo"])
/// .register(&catalog)
/// .unwrap();
/// assert!(catalog.get("demo:greet").is_ok());
/// ```
#[must_use]
pub struct LocalTool {
    builder: ToolBuilder,
    backend: Arc<dyn Backend>,
}

impl LocalTool {
    /// A tool `id` backed by `handler`; schemas come from its types.
    pub fn new<H, M>(id: &str, handler: H) -> Self
    where
        H: Handler<M>,
    {
        let (input, output) = H::schemas();
        let mut builder = Tool::builder(id).input_schema(input);
        if let Some(o) = output {
            builder = builder.output_schema(o);
        }
        LocalTool {
            builder,
            backend: handler.into_backend(),
        }
    }

    /// What the tool does.
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.builder = self.builder.description(d);
        self
    }

    /// Human title.
    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.builder = self.builder.title(t);
        self
    }

    /// Tags.
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.builder = self.builder.tags(tags);
        self
    }

    /// MCP annotations.
    pub fn annotations(mut self, a: ToolAnnotations) -> Self {
        self.builder = self.builder.annotations(a);
        self
    }

    /// Documentation.
    pub fn docs(mut self, d: ToolDocs) -> Self {
        self.builder = self.builder.docs(d);
        self
    }

    /// Overrides the derived input schema.
    pub fn input_schema(mut self, s: Value) -> Self {
        self.builder = self.builder.input_schema(s);
        self
    }

    /// Overrides the derived output schema.
    pub fn output_schema(mut self, s: Value) -> Self {
        self.builder = self.builder.output_schema(s);
        self
    }

    /// Validates the definition.
    pub fn build(self) -> Result<(Tool, Arc<dyn Backend>), Error> {
        Ok((self.builder.build()?, self.backend))
    }

    /// Builds and registers into `catalog` (failing if the id exists).
    pub fn register(self, catalog: &crate::Catalog) -> Result<(), Error> {
        let (tool, backend) = self.build()?;
        catalog.register(tool, backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use schemars::JsonSchema;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    struct Add {
        a: f64,
        b: f64,
    }

    #[test]
    fn schemas_are_derived_from_types() {
        let (tool, _) = LocalTool::new(
            "m:add",
            |a: Add| async move { Ok::<_, ToolError>(a.a + a.b) },
        )
        .build()
        .unwrap();
        assert_eq!(tool.input_schema["type"], "object");
        assert_eq!(tool.input_schema["required"], json!(["a", "b"]));
        assert_eq!(tool.output_schema.as_ref().unwrap()["type"], "number");
    }

    #[test]
    fn value_handlers_accept_any_object() {
        let (tool, _) = LocalTool::new("m:echo", |v: Value| async move { Ok::<_, ToolError>(v) })
            .build()
            .unwrap();
        assert_eq!(tool.input_schema, json!({"type": "object"}));
        assert!(tool.output_schema.is_none());
    }
}
