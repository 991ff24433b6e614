//! Measurement hooks for the benchmarks.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rquickjs::Context;
use tokio_util::sync::CancellationToken;
use toolexec::Exec;

use super::abort::AbortFlag;
use super::run::{install, new_runtime};
use super::state::{JsState, Shared, SharedProgress};
use crate::CodeLimits;
use crate::allow::AllowList;

/// Memory one idle execution context holds: a runtime, a full context and
/// the installed `tools`/`console` globals, before any script runs. Builds
/// `n` of them at once and returns the average per context of (bytes the
/// QuickJS allocator holds, growth of the process's resident set), so shared
/// one-off costs do not count. For the benchmarks.
pub fn idle_context_bytes(exec: &Exec, n: usize) -> (usize, usize) {
    fn rss() -> usize {
        // Linux: resident pages are the second field of /proc/self/statm.
        std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| {
                s.split_whitespace()
                    .nth(1)
                    .and_then(|p| p.parse::<usize>().ok())
            })
            .map_or(0, |pages| pages * 4096)
    }
    let n = n.max(1);
    let handle = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut keep = Vec::with_capacity(n);
    let mut total = 0;
    let rss_before = rss();
    for _ in 0..n {
        let abort = Arc::new(AbortFlag::default());
        let deadline = Instant::now() + Duration::from_secs(3600);
        let (rt, meter) = new_runtime(1 << 20, &abort, deadline).expect("runtime");
        let context = Context::full(&rt).expect("context");
        let (tx, _rx) = std::sync::mpsc::channel();
        let limits = CodeLimits::default();
        let shared = Rc::new(Shared {
            tools: Arc::new(exec.clone()),
            handle: handle.handle().clone(),
            allow: AllowList::new(&limits.allowed_tools),
            limits,
            deadline,
            abort,
            cancel: CancellationToken::new(),
            tx,
            progress: SharedProgress::default(),
            in_flight: Cell::new(0),
        });
        context.with(|ctx| {
            let js = Rc::new(RefCell::new(JsState::default()));
            install(&ctx, &shared, &js).expect("install");
        });
        total += meter.used();
        keep.push((context, rt, shared));
    }
    let rss_after = rss();
    drop(keep);
    (total / n, rss_after.saturating_sub(rss_before) / n)
}
