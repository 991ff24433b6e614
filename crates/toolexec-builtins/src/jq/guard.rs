//! The per-thread guard that lets a jq filter be stopped from the inside.
//!
//! jaq has no fuel and no interrupt, but it calls back into our code all the
//! time: on every filter node it evaluates (through [`super::Sandbox`]'s
//! `HasLut::lut`) and on every value operation (through [`super::val::SVal`]).
//! Each of those calls runs [`check`], which stops the filter by unwinding
//! (with [`std::panic::resume_unwind`], so no panic hook runs) when
//!
//! - the caller cancelled the call or its time budget ran out,
//! - the worker thread's stack is nearly used up (deep recursion), or
//! - the filter allocated more than its memory budget.
//!
//! The worker catches the unwind and turns it into a tool error. Only the
//! worker thread is ever active; everywhere else the checks do nothing.

use std::cell::{Cell, OnceCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Why a filter was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interrupt {
    /// The caller cancelled, or the time budget ran out.
    Cancelled,
    /// Recursion used up the stack reserve.
    Stack,
    /// The filter allocated more than its budget.
    Memory,
    /// A value nested deeper than [`super::MAX_VALUE_DEPTH`].
    Depth,
    /// A string longer than [`super::MAX_STRING_BYTES`].
    StringSize,
    /// An integer wider than [`super::MAX_INT_BITS`].
    IntSize,
}

impl Interrupt {
    /// A message for the caller.
    pub(crate) fn message(self) -> String {
        use super::{MAX_INT_BITS, MAX_STRING_BYTES, MAX_VALUE_DEPTH, MEMORY_BUDGET};
        match self {
            Interrupt::Cancelled => {
                "the jq filter was stopped: the call was cancelled or ran out of time".into()
            }
            Interrupt::Stack => {
                "the jq filter recursed too deeply (unbounded recursion such as `def f: [f]; f`?)"
                    .into()
            }
            Interrupt::Memory => format!(
                "the jq filter allocated more than its memory budget of {} MiB",
                MEMORY_BUDGET >> 20
            ),
            Interrupt::Depth => {
                format!("the jq filter built a value nested deeper than {MAX_VALUE_DEPTH} levels")
            }
            Interrupt::StringSize => format!(
                "the jq filter built a string longer than {} MiB",
                MAX_STRING_BYTES >> 20
            ),
            Interrupt::IntSize => {
                format!("the jq filter built an integer wider than {MAX_INT_BITS} bits")
            }
        }
    }
}

struct Guard {
    active: Cell<bool>,
    /// Address near the top of the worker's stack.
    stack_base: Cell<usize>,
    /// How many bytes of stack the filter may use before it is stopped.
    stack_limit: Cell<usize>,
    /// Bytes allocated so far (an estimate, never decreasing).
    spent: Cell<usize>,
    cancel: OnceCell<Arc<AtomicBool>>,
}

thread_local! {
    static GUARD: Guard = const {
        Guard {
            active: Cell::new(false),
            stack_base: Cell::new(0),
            stack_limit: Cell::new(0),
            spent: Cell::new(0),
            cancel: OnceCell::new(),
        }
    };
}

#[inline(always)]
fn stack_pointer() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// Arms the guard on the current (worker) thread. Call once, at the top of
/// the thread, before any jq code runs.
pub(crate) fn arm(cancel: Arc<AtomicBool>, stack_limit: usize) {
    GUARD.with(|g| {
        g.stack_base.set(stack_pointer());
        g.stack_limit.set(stack_limit);
        g.spent.set(0);
        let _ = g.cancel.set(cancel);
        g.active.set(true);
    });
}

/// Disarms the guard (before converting results, which must not unwind).
pub(crate) fn disarm() {
    GUARD.with(|g| g.active.set(false));
}

/// Stops the filter.
#[cold]
pub(crate) fn interrupt(why: Interrupt) -> ! {
    std::panic::resume_unwind(Box::new(why))
}

/// Stops the filter if it was cancelled or is about to exhaust its stack.
#[inline]
pub(crate) fn check() {
    GUARD.with(|g| {
        if !g.active.get() {
            return;
        }
        if g.cancel.get().is_some_and(|c| c.load(Ordering::Relaxed)) {
            interrupt(Interrupt::Cancelled);
        }
        // The stack grows down on every platform Rust supports with threads.
        if g.stack_base.get().saturating_sub(stack_pointer()) > g.stack_limit.get() {
            interrupt(Interrupt::Stack);
        }
    });
}

/// Charges `bytes` of allocation to the filter's budget, then [`check`]s.
#[inline]
pub(crate) fn charge(bytes: usize) {
    GUARD.with(|g| {
        if !g.active.get() {
            return;
        }
        let spent = g.spent.get().saturating_add(bytes);
        g.spent.set(spent);
        if spent > super::MEMORY_BUDGET {
            interrupt(Interrupt::Memory);
        }
    });
    check();
}
