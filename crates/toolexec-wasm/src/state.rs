//! Per-run store state: WASI, the memory limiter, the tool ABI state and
//! the reason a run was stopped.

use serde_json::Value;
use toolexec_runtime::ToolHost;
use wasmtime::ResourceLimiter;

use crate::engine::{CORE_INSTANCES_PER_STORE, MEMORIES_PER_STORE, TABLES_PER_STORE};
use crate::output::Output;

/// Why the host stopped a unit. Set in the store before trapping, so the
/// outcome does not depend on how the trap was wrapped on its way out.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum Fault {
    /// Linear memory (or tables) past the limit.
    #[error("memory limit of {limit} bytes exceeded (asked for {asked} bytes)")]
    Memory {
        /// The limit.
        limit: u64,
        /// What the unit asked for, in total.
        asked: u64,
    },
    /// Table elements past the limit.
    #[error("table limit of {limit} elements exceeded (asked for {asked})")]
    Table {
        /// The limit.
        limit: usize,
        /// What the unit asked for, in total.
        asked: usize,
    },
    /// The tool-call budget is spent.
    #[error("tool-call budget of {max} calls is spent")]
    ToolBudget {
        /// The budget.
        max: usize,
    },
    /// The unit broke the tool ABI (bad pointer, length, JSON).
    #[error("{0}")]
    Abi(String),
    /// The wall-clock deadline passed.
    #[error("wall-time limit of {ms} ms exceeded")]
    Deadline {
        /// The limit in milliseconds.
        ms: u128,
    },
    /// The caller cancelled the run.
    #[error("cancelled")]
    Cancelled,
}

/// Memory and table accounting for one store (all its memories and tables).
pub(crate) struct Limiter {
    /// Bytes of linear memory the store may hold.
    pub memory_limit: u64,
    /// Table elements the store may hold.
    pub table_limit: usize,
    memory_used: u64,
    table_used: usize,
    /// The fault recorded when a limit was hit.
    pub fault: Option<Fault>,
}

impl Limiter {
    pub(crate) fn new(memory_limit: u64, table_limit: usize) -> Self {
        Limiter {
            memory_limit,
            table_limit,
            memory_used: 0,
            table_used: 0,
            fault: None,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let grow = desired.saturating_sub(current) as u64;
        let asked = self.memory_used.saturating_add(grow);
        if asked > self.memory_limit {
            let fault = Fault::Memory {
                limit: self.memory_limit,
                asked,
            };
            self.fault = Some(fault.clone());
            return Err(wasmtime::Error::new(fault));
        }
        self.memory_used = asked;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        // The pool slot is smaller than the request: past the limit too.
        let fault = Fault::Memory {
            limit: self.memory_limit,
            asked: self.memory_used,
        };
        self.fault = Some(fault.clone());
        Err(wasmtime::Error::new(fault).context(error.to_string()))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let asked = self
            .table_used
            .saturating_add(desired.saturating_sub(current));
        if asked > self.table_limit {
            let fault = Fault::Table {
                limit: self.table_limit,
                asked,
            };
            self.fault = Some(fault.clone());
            return Err(wasmtime::Error::new(fault));
        }
        self.table_used = asked;
        Ok(true)
    }

    // One store holds one pool slot: it may use that slot's share of the
    // pool and no more (see `engine::build`).
    fn instances(&self) -> usize {
        CORE_INSTANCES_PER_STORE as usize
    }

    fn tables(&self) -> usize {
        TABLES_PER_STORE as usize
    }

    fn memories(&self) -> usize {
        MEMORIES_PER_STORE as usize
    }
}

/// What the store holds for one run. `W` is the WASI context: preview 1
/// for core modules, preview 2 for components.
pub(crate) struct HostState<W> {
    /// WASI (no preopens, no network, no env).
    pub wasi: W,
    /// Memory and table limits.
    pub limiter: Limiter,
    /// The tool host (budget, allowlist, log).
    pub host: ToolHost,
    /// The unit's input as JSON bytes.
    pub input: Vec<u8>,
    /// The last tool result or error, as JSON bytes.
    pub pending: Vec<u8>,
    /// The value the unit set with `output`.
    pub output: Option<Value>,
    /// Stdout and stderr.
    pub stdio: Output,
    /// Largest JSON message accepted or produced.
    pub max_message: usize,
    /// Why the host stopped the unit, when it did.
    pub fault: Option<Fault>,
}

impl<W> HostState<W> {
    /// Records `fault` and returns it as the trap to raise.
    pub(crate) fn fail(&mut self, fault: Fault) -> wasmtime::Error {
        self.fault = Some(fault.clone());
        wasmtime::Error::new(fault)
    }

    /// The fault from the ABI, the limiter or the epoch callback.
    pub(crate) fn take_fault(&mut self) -> Option<Fault> {
        self.fault.take().or_else(|| self.limiter.fault.take())
    }
}
