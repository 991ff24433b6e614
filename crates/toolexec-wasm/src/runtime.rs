//! [`WasmRuntime`]: units as wasmtime instances.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::Semaphore;
use toolexec::{Availability, BoxFuture, ErrorBody, ErrorCode};
use toolexec_runtime::{
    Enforcement, LimitKind, NetworkPolicy, Profile, RunContext, RunOutcome, RunRequest, RunStatus,
    Runtime, RuntimeDescriptor, RuntimeLimits, Unit, UnitKind, WasmCode, WasmUnit,
};
use wasmtime::{Engine, Linker, Store, UpdateDeadline};

use crate::WasmConfig;
use crate::cache::Lru;
use crate::code::{self, CodeKind};
use crate::component::{self, ComponentPre};
use crate::engine::{self, Ticker};
use crate::exec;
use crate::output::Output;
use crate::state::{Fault, HostState, Limiter};

/// Store state of core modules (WASI preview 1).
pub(crate) type CoreData = HostState<wasmtime_wasi::p1::WasiP1Ctx>;

/// Compiled code, pre-linked for fast instantiation.
pub(crate) enum Compiled {
    /// A core module.
    Module(wasmtime::InstancePre<CoreData>),
    /// A component.
    Component(ComponentPre),
}

/// Runs [`Unit::Wasm`] units (core modules and components, binary or text)
/// in wasmtime, in-process, with no access to the host but what WASI
/// gives without preopens or sockets (args, clocks, random, capped
/// stdout/stderr) and the `toolexec` tool-call import.
///
/// - wall time: epoch interruption (a ticker thread) plus a host timer;
/// - CPU: fuel, [`WasmConfig::fuel_per_cpu_second`] per second of `cpu_time`;
/// - memory: a `ResourceLimiter` over all linear memories, inside
///   pooling-allocator slots of [`WasmConfig::max_memory_bytes`];
/// - output: capped in-memory stdout/stderr; tools: the run's `ToolHost`.
///
/// Compiled code is cached by content hash (LRU) with its instance
/// pre-linked, so a repeated unit only instantiates from the pool.
///
/// ```
/// use toolexec_runtime::{Profile, RunRequest, Runtimes, ProfileMap, Unit, WasmCode, WasmUnit};
/// use toolexec_wasm::{WasmConfig, WasmRuntime};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let mut runtimes = Runtimes::new(ProfileMap::default());
/// runtimes.register(WasmRuntime::new(WasmConfig { pool_instances: 2, ..WasmConfig::default() }));
/// let wat = r#"(module
///   (import "toolexec" "output" (func $output (param i32 i32)))
///   (memory (export "memory") 1)
///   (data (i32.const 0) "42")
///   (func (export "run") (call $output (i32.const 0) (i32.const 2))))"#;
/// let unit = Unit::Wasm(WasmUnit { code: WasmCode::Wat(wat.into()), entry: None, input: None, args: vec![] });
/// let outcome = runtimes.run(RunRequest::new(unit, Profile::Hardened), None, Default::default()).await;
/// assert!(outcome.is_ok(), "{outcome:?}");
/// assert_eq!(outcome.value, Some(serde_json::json!(42)));
/// # }
/// ```
pub struct WasmRuntime {
    config: WasmConfig,
    inner: Result<Inner, String>,
}

struct Inner {
    engine: Engine,
    linker: Linker<CoreData>,
    components: component::ComponentLinker,
    cache: Lru<Compiled>,
    slots: Arc<Semaphore>,
    ticker: Ticker,
}

impl std::fmt::Debug for WasmRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmRuntime")
            .field("config", &self.config)
            .field("available", &self.inner.is_ok())
            .finish()
    }
}

impl Default for WasmRuntime {
    fn default() -> Self {
        WasmRuntime::new(WasmConfig::default())
    }
}

impl WasmRuntime {
    /// The runtime name.
    pub const NAME: &'static str = "wasm";

    /// What the WASM runtime is: the one source of its name, isolation,
    /// profile and unit kinds.
    pub const DESCRIPTOR: RuntimeDescriptor = RuntimeDescriptor {
        name: Self::NAME,
        isolation: "wasmtime: in-process WebAssembly with fuel, epoch deadlines, memory limits, WASI without preopens or sockets",
        max_profile: Profile::Hardened,
        unit_kinds: &[UnitKind::Wasm],
    };

    /// A runtime with its engine, linkers, pool and epoch ticker. Never
    /// fails: if the engine cannot be built, the runtime reports itself
    /// unavailable with the reason.
    pub fn new(config: WasmConfig) -> Self {
        let inner = config
            .validate()
            .map_err(|e| e.to_string())
            .and_then(|()| Inner::build(&config).map_err(|e| format!("wasmtime: {e:#}")));
        WasmRuntime { config, inner }
    }

    /// The configuration.
    pub fn config(&self) -> &WasmConfig {
        &self.config
    }

    /// Compiled units in the cache.
    pub fn cached(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| i.cache.len())
    }

    /// Compiles (or finds in the cache) `code` without running it, so the
    /// first run of a unit is as fast as the next.
    pub async fn precompile(&self, code: &WasmCode) -> Result<(), ErrorBody> {
        let inner = self.inner.as_ref().map_err(|why| unavailable(why))?;
        self.compiled(inner, code).await.map(drop)
    }

    /// Instantiates `code` (compiled or from the cache) in a fresh store
    /// from the pool and drops it, without calling any export. For
    /// measuring instantiation; components are instantiated the same way.
    pub async fn instantiate(&self, code: &WasmCode) -> Result<(), ErrorBody> {
        let inner = self.inner.as_ref().map_err(|why| unavailable(why))?;
        let compiled = self.compiled(inner, code).await?;
        let _permit = inner
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| internal("the instance pool is closed"))?;
        let limits = RuntimeLimits::default();
        let stdio = Output::new(limits.max_output_bytes, None);
        let ctx = RunContext {
            host: toolexec_runtime::ToolHost::without_tools(&limits),
            cancel: toolexec::CancellationToken::new(),
            output: None,
        };
        let result = match &*compiled {
            Compiled::Module(pre) => {
                let wasi = exec::wasi_builder(&stdio, &[]).build_p1();
                let state = self.host_state(wasi, &limits, &ctx.host, Vec::new(), &stdio);
                let mut store = self.store(inner, state, &limits, &ctx);
                pre.instantiate_async(&mut store).await.map(drop)
            }
            Compiled::Component(pre) => {
                let wasi = component::P2Ctx::new(exec::wasi_builder(&stdio, &[]).build());
                let state = self.host_state(wasi, &limits, &ctx.host, Vec::new(), &stdio);
                let mut store = self.store(inner, state, &limits, &ctx);
                pre.instantiate_async(&mut store).await.map(drop)
            }
        };
        result.map_err(|e| internal(&one_line(&e)))
    }

    async fn compiled(&self, inner: &Inner, code: &WasmCode) -> Result<Arc<Compiled>, ErrorBody> {
        let size = code::size(code);
        if size > self.config.max_code_bytes {
            return Err(invalid(
                "unit.code",
                &format!(
                    "{size} bytes is over the limit of {} bytes",
                    self.config.max_code_bytes
                ),
            ));
        }
        let key = code::hash(code);
        if let Some(hit) = inner.cache.get(&key) {
            return Ok(hit);
        }
        let (engine, linker, components) = (
            inner.engine.clone(),
            inner.linker.clone(),
            inner.components.clone(),
        );
        let code = code.clone();
        let compiled = tokio::task::spawn_blocking(move || {
            let (bytes, kind) = code::to_binary(&code)?;
            match kind {
                CodeKind::Module => {
                    let module = wasmtime::Module::new(&engine, &bytes)
                        .map_err(|e| format!("invalid module: {}", one_line(&e)))?;
                    let pre = linker
                        .instantiate_pre(&module)
                        .map_err(|e| format!("cannot link module: {}", one_line(&e)))?;
                    Ok(Compiled::Module(pre))
                }
                CodeKind::Component => components.prepare(&engine, &bytes).map(Compiled::Component),
            }
        })
        .await
        .map_err(|e| internal(&format!("compilation task failed: {e}")))?
        .map_err(|msg: String| invalid("unit.code", &msg))?;
        let compiled = Arc::new(compiled);
        inner.cache.insert(key, compiled.clone());
        Ok(compiled)
    }

    /// How each limit is enforced for `limits`.
    fn enforcement(&self, limits: &RuntimeLimits) -> Vec<Enforcement> {
        let c = &self.config;
        let mut e = vec![Enforcement::by(
            LimitKind::WallTime,
            format!(
                "wasmtime epoch interruption (tick {} ms) and host timer",
                c.epoch_tick.as_secs_f64() * 1000.0
            ),
        )];
        e.push(match limits.cpu_time {
            Some(cpu) => Enforcement::by(
                LimitKind::CpuTime,
                format!(
                    "wasmtime fuel: {} units ({} per CPU-second; counts executed wasm operators, not measured CPU time)",
                    fuel_for(cpu, c),
                    c.fuel_per_cpu_second
                ),
            ),
            None => Enforcement::not_enforced(LimitKind::CpuTime, "no cpu_time limit was set"),
        });
        let memory = memory_limit(limits, c);
        e.push(Enforcement::by(
            LimitKind::Memory,
            format!(
                "wasmtime ResourceLimiter: {memory} bytes of linear memory in pooling-allocator slots of {} bytes",
                c.max_memory_bytes
            ),
        ));
        e.push(Enforcement::by(
            LimitKind::Output,
            "capped in-memory WASI stdout/stderr",
        ));
        e.push(Enforcement::by(
            LimitKind::ToolCalls,
            "host ToolHost budget via the toolexec import",
        ));
        e.push(Enforcement::by(
            LimitKind::Processes,
            "no such capability in WASI (no process or thread API)",
        ));
        e.push(Enforcement::by(
            LimitKind::Network,
            "no such capability in WASI without sockets",
        ));
        e.push(Enforcement::by(
            LimitKind::Disk,
            "no such capability in WASI without preopened directories",
        ));
        e
    }

    async fn run_unit(&self, request: RunRequest, ctx: RunContext) -> RunOutcome {
        let started = Instant::now();
        let mut outcome = self.run_inner(&request, &ctx, started).await;
        outcome.tool_calls = ctx.host.take_tool_calls();
        outcome.enforcement = self.enforcement(&request.limits);
        outcome.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        outcome
    }

    async fn run_inner(
        &self,
        request: &RunRequest,
        ctx: &RunContext,
        started: Instant,
    ) -> RunOutcome {
        let error = |error| RunOutcome::new(Self::NAME, RunStatus::Error { error });
        let inner = match &self.inner {
            Ok(inner) => inner,
            Err(why) => return error(unavailable(why)),
        };
        let Unit::Wasm(unit) = &request.unit else {
            return error(invalid(
                "unit.kind",
                &format!(
                    "runtime wasm does not run {} units",
                    request.unit.kind().as_str()
                ),
            ));
        };
        let limits = &request.limits;
        if let Err(e) = limits.validate() {
            return error(e.to_body());
        }
        if let NetworkPolicy::Allow { hosts } = &limits.network {
            return error(invalid(
                "limits.network",
                &format!(
                    "wasm units have no network (WASI without sockets), so a host allowlist \
                     ({}) cannot be granted; use network off or another runtime",
                    hosts.join(", ")
                ),
            ));
        }
        let input = match unit_input(unit, self.config.max_message_bytes) {
            Ok(input) => input,
            Err(e) => return error(e),
        };
        let deadline = tokio::time::Instant::from_std(started + limits.wall_time);
        let compiled = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => return RunOutcome::new(Self::NAME, RunStatus::Cancelled),
            _ = tokio::time::sleep_until(deadline) => return wall_exceeded(limits, "while compiling"),
            compiled = self.compiled(inner, &unit.code) => match compiled {
                Ok(compiled) => compiled,
                Err(e) => return error(e),
            },
        };
        let _permit = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => return RunOutcome::new(Self::NAME, RunStatus::Cancelled),
            _ = tokio::time::sleep_until(deadline) => return wall_exceeded(limits, "waiting for a free instance slot"),
            permit = inner.slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return error(internal("the instance pool is closed")),
            },
        };
        let stdio = Output::new(limits.max_output_bytes, ctx.output.clone());
        let entry = unit.entry.as_deref();
        let run = async {
            match &*compiled {
                Compiled::Module(pre) => {
                    let wasi = exec::wasi_builder(&stdio, &unit.args).build_p1();
                    let state = self.host_state(wasi, limits, &ctx.host, input, &stdio);
                    let mut store = self.store(inner, state, limits, ctx);
                    let ended = exec::run_module(&mut store, pre, entry).await;
                    (
                        ended,
                        store.data_mut().take_fault(),
                        store.data_mut().output.take(),
                    )
                }
                Compiled::Component(pre) => {
                    let wasi =
                        component::P2Ctx::new(exec::wasi_builder(&stdio, &unit.args).build());
                    let state = self.host_state(wasi, limits, &ctx.host, input, &stdio);
                    let mut store = self.store(inner, state, limits, ctx);
                    let ended = component::run(&mut store, pre, entry).await;
                    (
                        ended,
                        store.data_mut().take_fault(),
                        store.data_mut().output.take(),
                    )
                }
            }
        };
        let (status, exit_code, value) = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => (RunStatus::Cancelled, None, None),
            _ = tokio::time::sleep_until(deadline) => (wall_exceeded(limits, "").status, None, None),
            (ended, fault, value) = run => {
                let (status, code) = exec::status(ended, fault, stdio.overflowed(), limits);
                (status, code, value)
            }
        };
        let (stdout, stderr) = stdio.contents();
        let mut outcome = RunOutcome::new(Self::NAME, status);
        outcome.value = value;
        outcome.exit_code = exit_code;
        outcome.stdout = stdout;
        outcome.stderr = stderr;
        outcome
    }

    /// The store state of one run.
    fn host_state<W>(
        &self,
        wasi: W,
        limits: &RuntimeLimits,
        host: &toolexec_runtime::ToolHost,
        input: Vec<u8>,
        stdio: &Output,
    ) -> HostState<W> {
        HostState {
            wasi,
            limiter: Limiter::new(
                memory_limit(limits, &self.config),
                self.config.max_table_elements,
            ),
            host: host.clone(),
            input,
            pending: Vec::new(),
            output: None,
            stdio: stdio.clone(),
            max_message: self.config.max_message_bytes,
            fault: None,
        }
    }

    /// A store with fuel, the epoch deadline check and the limiter.
    fn store<W: Send + 'static>(
        &self,
        inner: &Inner,
        state: HostState<W>,
        limits: &RuntimeLimits,
        ctx: &RunContext,
    ) -> Store<HostState<W>> {
        let mut store = Store::new(&inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        let fuel = limits
            .cpu_time
            .map_or(u64::MAX, |cpu| fuel_for(cpu, &self.config));
        // Fuel is enabled in the engine's config, so this cannot fail.
        let _ = store.set_fuel(fuel);
        let deadline = Instant::now() + limits.wall_time;
        let wall_ms = limits.wall_time.as_millis();
        let cancel = ctx.cancel.clone();
        // The epoch advances for as long as this store lives: the callback
        // owns the hold.
        let ticking = inner.ticker.hold();
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |mut s| {
            let _ = &ticking;
            let fault = if cancel.is_cancelled() {
                Fault::Cancelled
            } else if Instant::now() >= deadline {
                Fault::Deadline { ms: wall_ms }
            } else {
                return Ok(UpdateDeadline::Yield(1));
            };
            Err(s.data_mut().fail(fault))
        });
        store
    }
}

impl Inner {
    fn build(config: &WasmConfig) -> wasmtime::Result<Inner> {
        let engine = engine::build(config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s: &mut CoreData| &mut s.wasi)?;
        crate::abi::add_to_linker(&mut linker)?;
        let components = component::ComponentLinker::new(&engine)?;
        let ticker = Ticker::start(&engine, config)?;
        Ok(Inner {
            cache: Lru::new(config.cache_entries),
            slots: Arc::new(Semaphore::new(config.pool_instances as usize)),
            engine,
            linker,
            components,
            ticker,
        })
    }
}

impl Runtime for WasmRuntime {
    fn name(&self) -> &str {
        Self::DESCRIPTOR.name
    }

    fn isolation(&self) -> &str {
        Self::DESCRIPTOR.isolation
    }

    fn max_profile(&self) -> Profile {
        Self::DESCRIPTOR.max_profile
    }

    fn unit_kinds(&self) -> &[UnitKind] {
        Self::DESCRIPTOR.unit_kinds
    }

    fn availability(&self) -> Availability {
        match &self.inner {
            Ok(_) => Availability::Available,
            Err(reason) => Availability::Unavailable {
                reason: reason.clone(),
            },
        }
    }

    fn run<'a>(&'a self, request: RunRequest, ctx: RunContext) -> BoxFuture<'a, RunOutcome> {
        Box::pin(self.run_unit(request, ctx))
    }
}

/// Fuel for `cpu` at the configured rate.
fn fuel_for(cpu: std::time::Duration, config: &WasmConfig) -> u64 {
    let fuel = cpu.as_secs_f64() * config.fuel_per_cpu_second as f64;
    if fuel >= u64::MAX as f64 {
        u64::MAX
    } else {
        fuel.max(1.0) as u64
    }
}

/// The store's memory limit: the run's, capped at the pool slot size.
fn memory_limit(limits: &RuntimeLimits, config: &WasmConfig) -> u64 {
    limits
        .memory_bytes
        .map_or(config.max_memory_bytes, |m| m.min(config.max_memory_bytes))
}

/// The unit's input as JSON bytes (`null` when absent).
fn unit_input(unit: &WasmUnit, max: usize) -> Result<Vec<u8>, ErrorBody> {
    let input = serde_json::to_vec(unit.input.as_ref().unwrap_or(&Value::Null))
        .map_err(|e| invalid("unit.input", &e.to_string()))?;
    if input.len() > max {
        return Err(invalid(
            "unit.input",
            &format!("{} bytes is over the limit of {max} bytes", input.len()),
        ));
    }
    Ok(input)
}

fn wall_exceeded(limits: &RuntimeLimits, when: &str) -> RunOutcome {
    let mut message = format!(
        "wall-time limit of {} ms exceeded",
        limits.wall_time.as_millis()
    );
    if !when.is_empty() {
        message = format!("{message} {when}");
    }
    RunOutcome::new(
        WasmRuntime::NAME,
        RunStatus::LimitExceeded {
            limit: LimitKind::WallTime,
            message,
        },
    )
}

/// An `invalid_request` naming the failing field.
pub(crate) fn invalid(field: &str, message: &str) -> ErrorBody {
    toolexec::Error::invalid_request(field, message).to_body()
}

fn unavailable(why: &str) -> ErrorBody {
    toolexec::Error::backend_unavailable("wasm runtime", why).to_body()
}

fn internal(message: &str) -> ErrorBody {
    ErrorBody {
        code: ErrorCode::ExecutionFailed,
        message: format!("execution_failed: wasm runtime: {message}"),
        details: None,
    }
}

/// An error on one line (wasmtime errors carry context on several).
pub(crate) fn one_line(e: &wasmtime::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}
