//! Components: WASI preview 2 and the `toolexec:tools/host` interface.

use serde_json::Value;
use toolexec::ErrorCode;
use wasmtime::component::{Component, InstancePre, Linker, ResourceTable, Type, Val};
use wasmtime::{Engine, Store, StoreContextMut};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::exec::Ended;
use crate::runtime::{invalid, one_line};
use crate::state::{Fault, HostState};

/// The host interface components import.
pub const INTERFACE: &str = "toolexec:tools/host";

/// WASI preview 2 state of one run.
pub(crate) struct P2Ctx {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl P2Ctx {
    pub(crate) fn new(ctx: WasiCtx) -> Self {
        P2Ctx {
            ctx,
            table: ResourceTable::new(),
        }
    }
}

/// Store state of components.
pub(crate) type CompData = HostState<P2Ctx>;

/// A component pre-linked against WASI and `toolexec:tools/host`.
pub(crate) type ComponentPre = InstancePre<CompData>;

impl WasiView for CompData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi.ctx,
            table: &mut self.wasi.table,
        }
    }
}

/// The component linker of a runtime.
#[derive(Clone)]
pub(crate) struct ComponentLinker(Linker<CompData>);

impl ComponentLinker {
    /// WASI preview 2 plus `toolexec:tools/host`.
    pub(crate) fn new(engine: &Engine) -> wasmtime::Result<Self> {
        let mut linker = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        let mut host = linker.instance(INTERFACE)?;
        host.func_wrap("input", |store: StoreContextMut<'_, CompData>, (): ()| {
            Ok((String::from_utf8_lossy(&store.data().input).into_owned(),))
        })?;
        host.func_wrap_async(
            "call",
            |mut store: StoreContextMut<'_, CompData>, (id, args): (String, String)| {
                Box::new(async move { call(&mut store, id, args).await.map(|r| (r,)) })
            },
        )?;
        host.func_wrap(
            "output",
            |mut store: StoreContextMut<'_, CompData>, (value,): (String,)| {
                check_size(&mut store, "output", value.len())?;
                match serde_json::from_str::<Value>(&value) {
                    Ok(value) => {
                        store.data_mut().output = Some(value);
                        Ok(())
                    }
                    Err(e) => Err(store.data_mut().fail(Fault::Abi(format!(
                        "{INTERFACE}.output: the value is not valid JSON: {e}"
                    )))),
                }
            },
        )?;
        host.func_wrap(
            "log",
            |mut store: StoreContextMut<'_, CompData>, (message,): (String,)| {
                check_size(&mut store, "log", message.len())?;
                let stdio = store.data().stdio.clone();
                stdio
                    .write(
                        crate::output::Stream::Stderr,
                        format!("{message}\n").as_bytes(),
                    )
                    .map_err(wasmtime::Error::new)
            },
        )?;
        Ok(ComponentLinker(linker))
    }

    /// Compiles and pre-links a component.
    pub(crate) fn prepare(&self, engine: &Engine, bytes: &[u8]) -> Result<ComponentPre, String> {
        let component = Component::new(engine, bytes)
            .map_err(|e| format!("invalid component: {}", one_line(&e)))?;
        self.0
            .instantiate_pre(&component)
            .map_err(|e| format!("cannot link component: {}", one_line(&e)))
    }
}

fn check_size(
    store: &mut StoreContextMut<'_, CompData>,
    func: &str,
    len: usize,
) -> wasmtime::Result<()> {
    let max = store.data().max_message;
    if len > max {
        return Err(store.data_mut().fail(Fault::Abi(format!(
            "{INTERFACE}.{func}: {len} bytes is over the limit of {max} bytes"
        ))));
    }
    Ok(())
}

/// `call(id, args) -> result<string, string>`: JSON result, or the error
/// body as JSON. A spent budget traps.
async fn call(
    store: &mut StoreContextMut<'_, CompData>,
    id: String,
    args: String,
) -> wasmtime::Result<Result<String, String>> {
    check_size(store, "call", id.len().saturating_add(args.len()))?;
    let args = match serde_json::from_str::<Value>(&args) {
        Ok(args) => args,
        Err(e) => {
            let body = invalid("args", &format!("not valid JSON: {e}"));
            return Ok(Err(serde_json::to_string(&body).unwrap_or_default()));
        }
    };
    let host = store.data().host.clone();
    match host.call(&id, args).await.map_err(|e| e.to_body()) {
        Ok(value) => Ok(Ok(value.to_string())),
        Err(e) => {
            if e.code == ErrorCode::LimitExceeded
                && e.details.as_ref().and_then(|d| d.get("limit")) == Some(&"tool_calls".into())
                && host.budget_exhausted()
            {
                let fault = Fault::ToolBudget {
                    max: host.max_tool_calls(),
                };
                return Err(store.data_mut().fail(fault));
            }
            Ok(Err(serde_json::to_string(&e).unwrap_or_default()))
        }
    }
}

/// Instantiates a component and calls its entry: `entry` (default `run`),
/// or `interface#func` for a function of an exported interface (e.g.
/// `wasi:cli/run@0.2.0#run`). The entry takes nothing and returns nothing
/// or a `result` (an error is a failure).
pub(crate) async fn run(
    store: &mut Store<CompData>,
    pre: &ComponentPre,
    entry: Option<&str>,
) -> Ended {
    let instance = match pre.instantiate_async(&mut *store).await {
        Ok(instance) => instance,
        Err(e) => return Ended::Error(e),
    };
    let name = entry.unwrap_or("run");
    let index = match name.split_once('#') {
        Some((interface, func)) => instance
            .get_export_index(&mut *store, None, interface)
            .and_then(|i| instance.get_export_index(&mut *store, Some(&i), func)),
        None => instance.get_export_index(&mut *store, None, name),
    };
    let Some(func) = index.and_then(|i| instance.get_func(&mut *store, i)) else {
        return Ended::BadEntry(format!("the component exports no function {name:?}"));
    };
    let ty = func.ty(&*store);
    if ty.params().len() != 0 {
        return Ended::BadEntry(format!("{name:?} must take no parameters"));
    }
    let results: Vec<Type> = ty.results().collect();
    let mut out = match results.as_slice() {
        [] => Vec::new(),
        [Type::Result(_)] => vec![Val::Bool(false)],
        _ => return Ended::BadEntry(format!("{name:?} must return nothing or a result")),
    };
    if let Err(e) = func.call_async(&mut *store, &[], &mut out).await {
        return Ended::Error(e);
    }
    match out.first() {
        Some(Val::Result(Err(_))) => Ended::Returned(Some(1)),
        _ => Ended::Returned(None),
    }
}
