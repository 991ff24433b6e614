//! The counting allocator that enforces the memory limit.
//!
//! QuickJS's own `JS_SetMemoryLimit` makes an allocation fail with a
//! catchable `InternalError: out of memory`, so a script could catch it and
//! carry on. This allocator enforces the limit itself and, on the first
//! refusal, raises the execution's abort flag, which the interrupt handler
//! turns into an uncatchable stop: passing the memory limit is terminal.
//! It refuses nothing until it is armed, after the engine is built, and
//! nothing after it is disarmed, before the engine is torn down.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use rquickjs::allocator::{Allocator, RustAllocator};

use super::abort::{Abort, AbortFlag};

/// Bytes of bookkeeping `RustAllocator` adds before each block.
const HEADER: usize = 8;

/// Usage counters shared between the allocator and the host.
#[derive(Debug)]
pub(crate) struct MemoryMeter {
    used: Cell<usize>,
    /// The limit, while armed (`None`: every allocation is admitted).
    limit: Cell<Option<usize>>,
}

impl MemoryMeter {
    /// A meter that is not armed: neither the limit nor the starvation of a
    /// stopping execution applies. A failed allocation while the engine is
    /// built is not survivable: if `JS_NewRuntime2`'s first one fails,
    /// rquickjs 0.14 writes through the NULL runtime before checking it (a
    /// segfault), and QuickJS's cleanup of a half-built context is not safe
    /// either (`JS_NewContextRaw` frees a context still linked in the GC
    /// list). So the meter is armed with [`Self::arm`] only once the
    /// runtime, context and globals exist, and disarmed with
    /// [`Self::disarm`] before they are torn down.
    pub(crate) fn new() -> Rc<Self> {
        Rc::new(MemoryMeter {
            used: Cell::new(0),
            limit: Cell::new(None),
        })
    }

    /// Arms the limit (and the refusal of every allocation once the
    /// execution is stopping).
    pub(crate) fn arm(&self, limit: usize) {
        self.limit.set(Some(limit));
    }

    /// Admits every allocation again (for the teardown).
    pub(crate) fn disarm(&self) {
        self.limit.set(None);
    }

    /// Bytes currently allocated by the runtime (including headers).
    pub(crate) fn used(&self) -> usize {
        self.used.get()
    }

    fn add(&self, n: usize) {
        self.used.set(self.used.get() + n);
    }

    fn sub(&self, n: usize) {
        self.used.set(self.used.get().saturating_sub(n));
    }
}

/// Wraps `RustAllocator`, counting every block and refusing any allocation
/// that would pass the limit.
pub(crate) struct LimitedAllocator {
    meter: Rc<MemoryMeter>,
    abort: Arc<AbortFlag>,
}

impl LimitedAllocator {
    pub(crate) fn new(meter: Rc<MemoryMeter>, abort: Arc<AbortFlag>) -> Self {
        LimitedAllocator { meter, abort }
    }

    fn admit(&self, extra: usize) -> bool {
        // Not armed: the engine is being built or torn down, where a failed
        // allocation is not survivable (see [`MemoryMeter::new`]), even if
        // the caller's timer has already raised the abort flag.
        let Some(limit) = self.meter.limit.get() else {
            return true;
        };
        // Once the execution is stopping, starve it: every operation that
        // allocates fails at once, so even a script stuck in expensive
        // native operations (copying huge strings, say) reaches QuickJS's
        // next interrupt check quickly.
        if self.abort.is_raised() {
            return false;
        }
        let ok = self
            .meter
            .used()
            .checked_add(extra)
            .is_some_and(|total| total <= limit);
        if !ok {
            self.abort.raise(Abort::Memory);
        }
        ok
    }
}

fn rounded(size: usize) -> usize {
    size.div_ceil(8).saturating_mul(8).saturating_add(HEADER)
}

// SAFETY: every block comes from `RustAllocator` and is returned to it;
// the wrapper only counts and may refuse (returning null, which QuickJS
// handles as an allocation failure).
unsafe impl Allocator for LimitedAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !self.admit(rounded(size)) {
            return std::ptr::null_mut();
        }
        let p = RustAllocator.alloc(size);
        if !p.is_null() {
            // SAFETY: `p` was just returned by `RustAllocator`.
            self.meter
                .add(unsafe { RustAllocator::usable_size(p) } + HEADER);
        }
        p
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        let Some(total) = count.checked_mul(size) else {
            return std::ptr::null_mut();
        };
        if !self.admit(rounded(total)) {
            return std::ptr::null_mut();
        }
        let p = RustAllocator.calloc(count, size);
        if !p.is_null() {
            // SAFETY: as above.
            self.meter
                .add(unsafe { RustAllocator::usable_size(p) } + HEADER);
        }
        p
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        // SAFETY: the caller passes a block from this allocator.
        let n = unsafe { RustAllocator::usable_size(ptr) } + HEADER;
        self.meter.sub(n);
        unsafe { RustAllocator.dealloc(ptr) };
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        // SAFETY: the caller passes a block from this allocator.
        let old = unsafe { RustAllocator::usable_size(ptr) } + HEADER;
        let new = rounded(new_size);
        if new > old && !self.admit(new - old) {
            return std::ptr::null_mut();
        }
        let p = unsafe { RustAllocator.realloc(ptr, new_size) };
        if !p.is_null() {
            self.meter.sub(old);
            // SAFETY: `p` was just returned by `RustAllocator`.
            self.meter
                .add(unsafe { RustAllocator::usable_size(p) } + HEADER);
        }
        p
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: the caller passes a block from this allocator.
        unsafe { RustAllocator::usable_size(ptr) }
    }
}
