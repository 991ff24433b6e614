//! Code mode against the real engine and the real worker, one test binary
//! (one link) for these. The tests that count this process's threads or
//! memory, or leave a stuck thread behind (`abandon`, `call_log`, `leak`,
//! `startup`, `stuck`), keep a binary of their own.

mod code_mode;
mod hardened;
mod in_process;
#[path = "../support/mod.rs"]
mod support;
mod typescript;
