//! The wasmtime engine of a runtime and its epoch ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};

use crate::WasmConfig;

/// Builds the engine: fuel, epoch interruption, the component model,
/// and the pooling allocator sized from `config`.
pub(crate) fn build(config: &WasmConfig) -> wasmtime::Result<Engine> {
    let n = config.pool_instances;
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(n)
        .total_core_instances(n.saturating_mul(4))
        .total_memories(n.saturating_mul(2))
        .total_tables(n.saturating_mul(4))
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

/// A thread advancing the engine's epoch every tick, so running code
/// reaches its deadline check. Stops when dropped.
pub(crate) struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Starts ticking `engine` every `config.epoch_tick`.
    pub(crate) fn start(engine: &Engine, config: &WasmConfig) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (engine, tick, flag) = (engine.clone(), config.epoch_tick, stop.clone());
        let thread = std::thread::Builder::new()
            .name("toolexec-wasm-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    engine.increment_epoch();
                }
            })?;
        Ok(Ticker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
