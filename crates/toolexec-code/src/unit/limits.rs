//! Mapping between code-mode limits and runtime limits, used on both sides
//! of a script run as a unit so they agree.

use std::time::Duration;

use toolexec_runtime::RuntimeLimits;

use crate::CodeLimits;

/// Wall time a hardened run gets on top of the script's timeout: sandbox
/// start, worker start and the engine's own grace period. The worker
/// subtracts it again, so the script's own deadline fires first and the
/// outcome names the timeout precisely.
pub(crate) const STARTUP_MARGIN: Duration = Duration::from_millis(1500);

/// Memory a hardened run's worker process gets on top of the script's
/// JavaScript heap: the worker binary, its threads' stacks and the
/// allocator's arenas.
pub(crate) const PROCESS_MEMORY_OVERHEAD: u64 = 192 << 20;

/// The sandbox limits for a script with `limits`: wall time plus a 1.5 s
/// startup margin, memory plus 192 MiB for the worker process, the same
/// tool budget, allowlist and output limit, no network, at most 16
/// processes (the worker needs a few threads).
///
/// ```
/// use toolexec_code::{CodeLimits, code_limits_from_runtime, runtime_limits_from_code};
/// let limits = CodeLimits { max_tool_calls: 7, ..CodeLimits::default() };
/// let back = code_limits_from_runtime(&runtime_limits_from_code(&limits));
/// assert_eq!(back, limits);
/// ```
pub fn runtime_limits_from_code(limits: &CodeLimits) -> RuntimeLimits {
    RuntimeLimits {
        wall_time: limits.timeout.saturating_add(STARTUP_MARGIN),
        cpu_time: Some(limits.timeout.saturating_add(STARTUP_MARGIN)),
        memory_bytes: Some((limits.memory_bytes as u64).saturating_add(PROCESS_MEMORY_OVERHEAD)),
        max_processes: Some(16),
        max_output_bytes: limits.max_output_bytes,
        disk_bytes: Some(1 << 20),
        max_tool_calls: limits.max_tool_calls,
        allowed_tools: limits.allowed_tools.clone(),
        ..RuntimeLimits::default()
    }
}

/// The code-mode limits a sandboxed worker applies for `limits`: the
/// inverse of [`runtime_limits_from_code`] (defaults where the sandbox
/// limits say nothing). The stack limit is always the default.
pub fn code_limits_from_runtime(limits: &RuntimeLimits) -> CodeLimits {
    let defaults = CodeLimits::default();
    let timeout = limits
        .wall_time
        .checked_sub(STARTUP_MARGIN)
        .filter(|t| !t.is_zero())
        .unwrap_or(limits.wall_time / 2);
    let memory_bytes = match limits.memory_bytes {
        Some(m) => m
            .checked_sub(PROCESS_MEMORY_OVERHEAD)
            .filter(|m| *m >= 1 << 20)
            .map_or(1 << 20, |m| usize::try_from(m).unwrap_or(usize::MAX)),
        None => defaults.memory_bytes,
    };
    CodeLimits {
        timeout: timeout.max(Duration::from_millis(1)),
        memory_bytes,
        max_tool_calls: limits.max_tool_calls,
        max_output_bytes: limits.max_output_bytes,
        allowed_tools: limits.allowed_tools.clone(),
        max_stack_bytes: defaults.max_stack_bytes,
    }
}

/// The engine's limits for a unit run under `limits`:
/// [`code_limits_from_runtime`] with the allowlist left to the run's host,
/// which enforces it and logs the refused calls.
pub(crate) fn engine_limits(limits: &RuntimeLimits) -> CodeLimits {
    let mut code = code_limits_from_runtime(limits);
    code.allowed_tools.clear();
    code
}
