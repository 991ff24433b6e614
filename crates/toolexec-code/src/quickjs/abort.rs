//! The abort flag: why an execution is being stopped, raised once by the
//! caller's timer, the allocator, the host functions or the drop guard, and
//! read by QuickJS's interrupt handler.

use std::sync::atomic::{AtomicU8, Ordering};

/// Why an execution is being stopped, set once (first reason wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Abort {
    None = 0,
    /// The caller dropped the execution future.
    Cancelled = 1,
    Memory = 2,
    ToolCalls = 3,
    Output = 4,
    /// The deadline passed (raised by the caller's timer or the worker).
    Timeout = 5,
}

/// Shared between the worker, the allocator, the interrupt handler and the
/// caller's drop guard.
#[derive(Debug, Default)]
pub(crate) struct AbortFlag(AtomicU8);

impl AbortFlag {
    pub(crate) fn raise(&self, reason: Abort) {
        let _ = self
            .0
            .compare_exchange(0, reason as u8, Ordering::AcqRel, Ordering::Acquire);
    }

    pub(crate) fn get(&self) -> Abort {
        match self.0.load(Ordering::Acquire) {
            1 => Abort::Cancelled,
            2 => Abort::Memory,
            3 => Abort::ToolCalls,
            4 => Abort::Output,
            5 => Abort::Timeout,
            _ => Abort::None,
        }
    }

    pub(crate) fn is_raised(&self) -> bool {
        self.0.load(Ordering::Relaxed) != 0
    }
}
