//! # toolexec-wasm
//!
//! The WebAssembly sandbox of toolexec: [`WasmRuntime`] runs
//! [`toolexec_runtime::Unit::Wasm`] units (core modules and components, as
//! binary or text) in wasmtime under the run's limits, with WASI that has
//! no preopened directories, no sockets and no inherited environment, and
//! with tool calls through the `toolexec` import (core modules, see
//! [`abi`]) or the `toolexec:tools/host` interface (components). The ABI
//! is written up in `docs/wasm-abi.md`.
//!
//! Place in the workspace: one runtime of the contract (`toolexec-runtime`);
//! it keeps wasmtime out of every other crate (see ARCHITECTURE.md).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod abi;
mod cache;
mod code;
mod component;
mod config;
mod engine;
mod exec;
mod output;
mod runtime;
mod state;

pub use code::{CodeKind, kind_of};
pub use component::INTERFACE as COMPONENT_INTERFACE;
pub use config::WasmConfig;
pub use runtime::WasmRuntime;
