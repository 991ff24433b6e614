//! Skipping a test that cannot run here, the same way everywhere.

use std::fmt::Display;
use std::io::Write;

/// Whether a missing component fails the test instead of skipping it: when
/// `CI` is set (to anything), every component must be there.
pub fn required() -> bool {
    std::env::var_os("CI").is_some()
}

/// Says that `test` cannot run here and why: prints `SKIPPED: <test>: <why>`
/// on the real standard error (the test harness captures only `print!` and
/// `eprint!`, so the line shows without `--nocapture`), or panics with the
/// same words when the component is [`required`].
///
/// Use [`skip!`] to return from the test as well.
///
/// # Panics
///
/// Under `CI`.
pub fn skip(test: &str, why: impl Display) {
    assert!(!required(), "{test}: {why} (required under CI)");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
}

/// Whether sandbox runtime `runtime` must be available: named in
/// `TOOLEXEC_REQUIRE_RUNTIMES` (a comma list; `scripts/test.sh` names every
/// runtime when it runs as root). Unlike [`required`], `CI` alone does not
/// require a runtime: CI runs the runtime tests again as an unprivileged
/// user, where only bubblewrap can work.
pub fn runtime_required(runtime: &str) -> bool {
    std::env::var("TOOLEXEC_REQUIRE_RUNTIMES")
        .unwrap_or_default()
        .split(',')
        .any(|r| r.trim() == runtime)
}

/// Says that `test` cannot use sandbox runtime `runtime` here and why:
/// prints `SKIPPED: <test>: <runtime>: <why>`, or panics when the runtime
/// is [`runtime_required`].
///
/// # Panics
///
/// When `TOOLEXEC_REQUIRE_RUNTIMES` names `runtime`.
pub fn skip_runtime(test: &str, runtime: &str, why: impl Display) {
    assert!(
        !runtime_required(runtime),
        "{test}: {runtime} is required (TOOLEXEC_REQUIRE_RUNTIMES) but unavailable: {why}"
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {runtime}: {why}");
}

/// [`skip()`], then `return` from the enclosing function (with `$ret` if
/// given).
///
/// ```no_run
/// fn needs_a_tool() {
///     let Some(path) = std::env::var_os("SOME_TOOL_FOR_THIS_TEST") else {
///         toolexec_testkit::skip!("needs_a_tool", "SOME_TOOL_FOR_THIS_TEST is not set");
///     };
///     let _ = path;
/// }
/// needs_a_tool();
/// ```
#[macro_export]
macro_rules! skip {
    ($test:expr, $why:expr) => {{
        $crate::skip($test, $why);
        return;
    }};
    ($test:expr, $why:expr, $ret:expr) => {{
        $crate::skip($test, $why);
        return $ret;
    }};
}
