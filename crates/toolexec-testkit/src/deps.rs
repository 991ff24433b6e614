//! External test dependencies (see `scripts/install-test-deps.sh`).

use std::path::{Path, PathBuf};

use crate::skip;

/// The value of `var`, an external test dependency (a path): from the
/// environment, else from the `env.sh` that `scripts/install-test-deps.sh`
/// writes into `$TOOLEXEC_DEPS` (default `~/.cache/toolexec/deps`). Unset,
/// or naming a path that does not exist: [`skip()`] (a failure under `CI`)
/// and `None`.
pub fn dep(test: &str, var: &str) -> Option<String> {
    let value = std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| env_file_value(var));
    let why = match &value {
        None => format!(
            "{var} is not set (run scripts/install-test-deps.sh, then source ~/.cache/toolexec/deps/env.sh)"
        ),
        Some(v) if !Path::new(v).exists() => format!("{var}={v} does not exist"),
        Some(v) => return Some(v.clone()),
    };
    skip(test, why);
    None
}

/// Every dependency in `vars`, or `None` (after [`dep`] said why).
pub fn deps(test: &str, vars: &[&str]) -> Option<Vec<String>> {
    vars.iter().map(|v| dep(test, v)).collect()
}

fn env_file_value(var: &str) -> Option<String> {
    let deps = std::env::var_os("TOOLEXEC_DEPS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/toolexec/deps")))?;
    let text = std::fs::read_to_string(deps.join("env.sh")).ok()?;
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("export ")?;
        let (k, v) = rest.split_once('=')?;
        (k == var).then(|| v.trim_matches('"').to_owned())
    })
}

/// Whether `python3` runs; if not, [`skip()`] (a failure under `CI`).
pub fn python3(test: &str) -> bool {
    let runs = std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_ok_and(|out| out.status.success());
    if !runs {
        skip(test, "python3 not found");
    }
    runs
}
