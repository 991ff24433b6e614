//! The probe units run for what a shell cannot do (system calls by
//! number, threads, raw channel frames), in two builds with one command
//! line: Python for roots with it, a static binary for busybox images.

/// `fixtures/probe.py`, run as `python3 -c PROBE_PY ACTION ARGS...`.
pub const PROBE_PY: &str = include_str!("../fixtures/probe.py");

/// `fixtures/probe.rs`, the source of the static probe (standard library
/// only; build it with `rustc -C target-feature=+crt-static`).
pub const PROBE_RS: &str = include_str!("../fixtures/probe.rs");

/// One channel frame: the 4-byte big-endian length and the JSON.
pub fn frame(json: &serde_json::Value) -> Vec<u8> {
    let body = json.to_string().into_bytes();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

/// Lower-case hex of `bytes` (the probe's `channel` argument).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
