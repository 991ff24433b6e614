//! Finding the launcher binaries (`bwrap`, `runc`, `runsc`) a runtime
//! starts.

use std::path::{Path, PathBuf};

/// The search path when `PATH` is unset.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `name` itself when it has a directory part, else the first regular
/// file of that name on `PATH`; `None` when there is none.
///
/// ```
/// let sh = toolexec_sandbox::find_binary("sh".as_ref()).expect("a shell on PATH");
/// assert!(sh.is_absolute() || sh.components().count() > 1);
/// assert!(toolexec_sandbox::find_binary("/no/such/launcher".as_ref()).is_none());
/// ```
pub fn find_binary(name: &Path) -> Option<PathBuf> {
    if name.components().count() > 1 {
        return name.is_file().then(|| name.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
