//! The wasmtime engine of a runtime and its epoch ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use wasmtime::{Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};

use crate::WasmConfig;

/// Core instances one store may hold: one run holds one pool slot, and
/// the pool has this many core instances per slot.
pub(crate) const CORE_INSTANCES_PER_STORE: u32 = 4;
/// Linear memories one store may hold (the pool has this many per slot).
pub(crate) const MEMORIES_PER_STORE: u32 = 2;
/// Tables one store may hold (the pool has this many per slot).
pub(crate) const TABLES_PER_STORE: u32 = 4;

/// Builds the engine: fuel, epoch interruption, the component model,
/// and the pooling allocator sized from `config`: `pool_instances` slots,
/// each with the per-store share of core instances, memories and tables.
/// A store (its `ResourceLimiter`) and a component may use no more
/// than one slot's share, so no run can take what the others need.
pub(crate) fn build(config: &WasmConfig) -> wasmtime::Result<Engine> {
    let n = config.pool_instances;
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(n)
        .total_core_instances(n.saturating_mul(CORE_INSTANCES_PER_STORE))
        .total_memories(n.saturating_mul(MEMORIES_PER_STORE))
        .total_tables(n.saturating_mul(TABLES_PER_STORE))
        .max_core_instances_per_component(CORE_INSTANCES_PER_STORE)
        .max_memories_per_component(MEMORIES_PER_STORE)
        .max_tables_per_component(TABLES_PER_STORE)
        .total_stacks(n)
        .max_memory_size(config.max_memory_bytes as usize)
        .table_elements(config.max_table_elements);
    let mut c = Config::new();
    c.consume_fuel(true)
        .epoch_interruption(true)
        .wasm_component_model(true)
        .max_wasm_stack(config.max_wasm_stack)
        .async_stack_size(config.max_wasm_stack + (1 << 20))
        .cranelift_opt_level(OptLevel::Speed)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&c)
}

/// A thread advancing the engine's epoch every tick while any store is
/// running ([`Ticker::hold`]), so running code reaches its deadline check;
/// idle, it sleeps until a store starts (no wake-ups in an idle process).
/// Stops when dropped.
pub(crate) struct Ticker {
    shared: Arc<TickShared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct TickShared {
    /// Stores running, and whether the ticker is to stop.
    state: Mutex<(usize, bool)>,
    wake: Condvar,
    /// Epochs advanced so far.
    ticks: AtomicU64,
}

/// Keeps the ticker ticking while alive: held by each store (in its epoch
/// callback, so for exactly the store's life).
pub(crate) struct Ticking(Arc<TickShared>);

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.state.lock().0 -= 1;
    }
}

impl Ticker {
    /// Starts the thread that ticks `engine` every `config.epoch_tick`
    /// while a store runs.
    pub(crate) fn start(engine: &Engine, config: &WasmConfig) -> std::io::Result<Self> {
        let shared = Arc::new(TickShared::default());
        let (engine, tick, ticker) = (engine.clone(), config.epoch_tick, shared.clone());
        let thread = std::thread::Builder::new()
            .name("toolexec-wasm-epoch".into())
            .spawn(move || {
                let mut state = ticker.state.lock();
                loop {
                    match *state {
                        (_, true) => return,
                        (0, false) => ticker.wake.wait(&mut state),
                        _ => {
                            drop(state);
                            std::thread::sleep(tick);
                            engine.increment_epoch();
                            ticker.ticks.fetch_add(1, Ordering::Relaxed);
                            state = ticker.state.lock();
                        }
                    }
                }
            })?;
        Ok(Ticker {
            shared,
            thread: Some(thread),
        })
    }

    /// Ticks until the returned guard is dropped.
    pub(crate) fn hold(&self) -> Ticking {
        let mut state = self.shared.state.lock();
        state.0 += 1;
        if state.0 == 1 {
            self.shared.wake.notify_one();
        }
        Ticking(self.shared.clone())
    }

    /// Epochs advanced so far.
    #[cfg(test)]
    fn ticks(&self) -> u64 {
        self.shared.ticks.load(Ordering::Relaxed)
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.state.lock().1 = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use toolexec::{CancellationToken, ErrorCode};
    use toolexec_runtime::{
        Profile, RunContext, RunOutcome, RunRequest, RunStatus, Runtime, RuntimeLimits, ToolHost,
        Unit, WasmCode, WasmUnit,
    };

    use super::{CORE_INSTANCES_PER_STORE, MEMORIES_PER_STORE};
    use crate::{WasmConfig, WasmRuntime};

    /// The ticker advances the epoch only while a store holds it.
    #[test]
    fn ticks_only_while_held() {
        use std::time::{Duration, Instant};
        // Waits up to 5 s for `done` (the thread may be scheduled late).
        let eventually = |done: &dyn Fn() -> bool| {
            let until = Instant::now() + Duration::from_secs(5);
            while !done() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(2));
            }
            done()
        };
        let config = WasmConfig {
            epoch_tick: Duration::from_millis(1),
            ..WasmConfig::default()
        };
        let engine = wasmtime::Engine::default();
        let ticker = super::Ticker::start(&engine, &config).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(ticker.ticks(), 0, "idle, the ticker sleeps");
        let held = ticker.hold();
        let second = ticker.hold();
        assert!(
            eventually(&|| ticker.ticks() > 0),
            "a running store gets its ticks"
        );
        drop(held);
        let before = ticker.ticks();
        assert!(
            eventually(&|| ticker.ticks() > before),
            "one store still runs"
        );
        drop(second);
        // At most the tick in flight, then none.
        let settled = || {
            let seen = ticker.ticks();
            std::thread::sleep(Duration::from_millis(20));
            ticker.ticks() == seen
        };
        assert!(eventually(&settled), "no store, no ticks");
    }

    /// A component exporting `run`: `memories` core instances that each
    /// define a memory, `plain` that define nothing, and the one with `run`.
    fn component(memories: u32, plain: u32) -> Unit {
        let mut text = String::from(
            r#"(component (core module $M (memory 1)) (core module $P) (core module $E (func (export "run")))"#,
        );
        for _ in 0..memories {
            text.push_str(" (core instance (instantiate $M))");
        }
        for _ in 0..plain {
            text.push_str(" (core instance (instantiate $P))");
        }
        text.push_str(
            r#" (core instance $e (instantiate $E)) (func (export "run") (canon lift (core func $e "run"))))"#,
        );
        Unit::Wasm(WasmUnit {
            code: WasmCode::Wat(text),
            entry: None,
            input: None,
            args: Vec::new(),
        })
    }

    async fn run(runtime: &WasmRuntime, unit: Unit) -> RunOutcome {
        let limits = RuntimeLimits::default();
        let ctx = RunContext::new(ToolHost::without_tools(&limits), CancellationToken::new());
        let request = RunRequest::new(unit, Profile::Hardened).with_limits(limits);
        runtime.run(request, ctx).await
    }

    fn refusal(outcome: &RunOutcome) -> (ErrorCode, String) {
        match &outcome.status {
            RunStatus::Error { error } => (error.code, error.message.clone()),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// A unit that needs more than one slot's share of the pool is refused
    /// with the limit it exceeds, while units within the share still run,
    /// even on a pool of one slot.
    #[tokio::test]
    async fn a_unit_over_the_per_store_share_is_refused_and_others_run() {
        let runtime = WasmRuntime::new(WasmConfig {
            pool_instances: 1,
            max_memory_bytes: 1 << 20,
            ..WasmConfig::default()
        });
        // At the share: 2 memories, 4 core instances.
        let fits = component(
            MEMORIES_PER_STORE,
            CORE_INSTANCES_PER_STORE - MEMORIES_PER_STORE - 1,
        );
        let cases = [
            (
                component(MEMORIES_PER_STORE + 1, 0),
                format!(
                    "Wasm linear memories, which exceeds the configured maximum of {MEMORIES_PER_STORE}"
                ),
            ),
            (
                component(0, CORE_INSTANCES_PER_STORE),
                format!(
                    "core module instances, which exceeds the configured maximum of {CORE_INSTANCES_PER_STORE}"
                ),
            ),
        ];
        for (unit, expected) in cases {
            // The over-share unit and a unit at the share, at once.
            let (over, ok) = tokio::join!(run(&runtime, unit), run(&runtime, fits.clone()));
            let (code, message) = refusal(&over);
            assert_eq!(code, ErrorCode::InvalidRequest, "{message}");
            assert!(message.contains(&expected), "{message}");
            assert!(ok.is_ok(), "{ok:?}");
        }
        // Nothing leaked: the one slot still serves the share twice over.
        for _ in 0..2 {
            let ok = run(&runtime, fits.clone()).await;
            assert!(ok.is_ok(), "{ok:?}");
        }
    }
}
