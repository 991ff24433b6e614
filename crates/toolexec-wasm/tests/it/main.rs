//! The wasm runtime end to end (WAT and binary modules, the tool channel,
//! every limit), one test binary (one link) for all.

mod hostile;
mod support;
mod units;
