//! What to run: a script and its [`CodeLimits`].

use std::time::Duration;

/// Limits of one code execution. Every field is explicit; [`Default`] gives
/// the documented defaults.
///
/// ```
/// use std::time::Duration;
/// let limits = toolexec_code::CodeLimits {
///     timeout: Duration::from_secs(5),
///     allowed_tools: vec!["math:*".into(), "text:case".into()],
///     ..Default::default()
/// };
/// assert_eq!(limits.max_tool_calls, 100);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeLimits {
    /// Wall time of the whole execution, from the call to
    /// [`CodeEngine::execute`](crate::CodeEngine::execute) (so time spent waiting for a free worker
    /// counts) until the result is ready, including time the script spends
    /// awaiting tools. Default 30 s.
    pub timeout: Duration,
    /// Most memory the script's JavaScript heap may use, in bytes: every
    /// allocation of its QuickJS runtime, including the ~200 KB the engine
    /// and the globals take before the script starts (a smaller limit ends
    /// the execution before it starts). Default 64 MiB.
    pub memory_bytes: usize,
    /// Most tool calls (`tools.run` and the typed proxies, allowed or not).
    /// Default 100.
    pub max_tool_calls: usize,
    /// Most bytes of captured console output plus the result's JSON.
    /// Default 1 MiB.
    pub max_output_bytes: usize,
    /// Tools the script may call: exact ids (`"math:add"`) or globs where `*`
    /// matches any run of characters and `?` one character (`"math:*"`,
    /// `"*:*"`). A pattern matches a call if it matches the id as written or
    /// its `namespace:name` part. Empty: every tool. Search and describe only
    /// show allowed tools.
    pub allowed_tools: Vec<String>,
    /// Most native stack the interpreter may use, in bytes. Default 1 MiB
    /// (QuickJS's own default); clamped to 64 KiB..=8 MiB (workers have
    /// 16 MiB stacks).
    pub max_stack_bytes: usize,
}

impl Default for CodeLimits {
    fn default() -> Self {
        CodeLimits {
            timeout: Duration::from_secs(30),
            memory_bytes: 64 << 20,
            max_tool_calls: 100,
            max_output_bytes: 1 << 20,
            allowed_tools: Vec::new(),
            max_stack_bytes: 1 << 20,
        }
    }
}

/// One script to execute, with its limits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CodeRequest {
    /// The script: the body of an `async` function.
    pub code: String,
    /// Its limits.
    pub limits: CodeLimits,
}

impl CodeRequest {
    /// A request with default limits.
    ///
    /// ```
    /// let req = toolexec_code::CodeRequest::new("return 1 + 1");
    /// assert_eq!(req.limits, toolexec_code::CodeLimits::default());
    /// ```
    pub fn new(code: impl Into<String>) -> Self {
        CodeRequest {
            code: code.into(),
            limits: CodeLimits::default(),
        }
    }

    /// Replaces the limits.
    #[must_use]
    pub fn with_limits(mut self, limits: CodeLimits) -> Self {
        self.limits = limits;
        self
    }
}
