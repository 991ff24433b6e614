//! The per-run cgroup (v1) that toolexec owns: memory and pids limits set
//! by toolexec, so the limit binds the whole container (for runsc: the
//! sandbox kernel too) and the counters (OOM kills, refused forks, CPU
//! time) outlive the container.
//!
//! runc nests its own cgroup (`…/<id>/c`) in it and deletes that one when
//! the container ends. v1 counts OOM kills and refused forks only in the
//! cgroup of the task (no propagation to parents), so the nested
//! counters are read while they exist. runsc is pointed at the run's
//! cgroup itself: it joins a pre-created cgroup without changing or
//! deleting it, so gVisor's OOM kills and refused forks stay countable.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::OciError;
use crate::config::OciFlavor;

/// One run's cgroup, below each v1 controller.
#[derive(Debug)]
pub(crate) struct RunCgroup {
    root: PathBuf,
    /// The configured parent, relative to each controller.
    parent: String,
    /// `<parent>/<id>`, relative to each controller.
    rel: String,
}

const OWN_CONTROLLERS: [&str; 3] = ["memory", "pids", "cpuacct"];

impl RunCgroup {
    /// Creates `<root>/<ctrl>/<parent>/<id>` for memory, pids and cpuacct
    /// and writes the limits.
    pub(crate) fn create(
        root: &Path,
        parent: &str,
        id: &str,
        memory: Option<u64>,
        pids: Option<u64>,
    ) -> Result<Self, OciError> {
        check_parent(parent).map_err(OciError::setup)?;
        let cgroup = RunCgroup {
            root: root.to_owned(),
            parent: parent.to_owned(),
            rel: format!("{parent}/{id}"),
        };
        for ctrl in OWN_CONTROLLERS {
            let dir = cgroup.dir(ctrl);
            create_dir(&dir).map_err(|e| {
                // Leave nothing half-made behind.
                cgroup.remove();
                OciError::setup(format!(
                    "cgroup v1 {ctrl}: cannot create {}: {e}",
                    dir.display()
                ))
            })?;
        }
        if let Err(e) = cgroup.write_limits(memory, pids) {
            // A limit the kernel refused: the directories go too.
            cgroup.remove();
            return Err(e);
        }
        Ok(cgroup)
    }

    fn write_limits(&self, memory: Option<u64>, pids: Option<u64>) -> Result<(), OciError> {
        if let Some(bytes) = memory {
            self.write("memory", "memory.limit_in_bytes", &bytes.to_string())?;
            // Without swap accounting the limit is RAM only; with it, swap
            // must not extend it.
            if self
                .dir("memory")
                .join("memory.memsw.limit_in_bytes")
                .exists()
            {
                self.write("memory", "memory.memsw.limit_in_bytes", &bytes.to_string())?;
            }
        }
        if let Some(max) = pids {
            self.write("pids", "pids.max", &max.to_string())?;
        }
        Ok(())
    }

    /// The `cgroupsPath` for the container: nested in this cgroup for
    /// runc (which deletes its own), this cgroup itself for runsc (which
    /// joins a pre-created cgroup as it is and leaves it in place).
    pub(crate) fn container_path(&self, flavor: OciFlavor) -> String {
        match flavor {
            OciFlavor::Runc => format!("/{}/c", self.rel),
            OciFlavor::Runsc => format!("/{}", self.rel),
        }
    }

    /// The path shown in enforcement reports.
    pub(crate) fn display(&self, ctrl: &str) -> String {
        self.dir(ctrl).display().to_string()
    }

    fn dir(&self, ctrl: &str) -> PathBuf {
        self.root.join(ctrl).join(&self.rel)
    }

    fn write(&self, ctrl: &str, file: &str, value: &str) -> Result<(), OciError> {
        let path = self.dir(ctrl).join(file);
        std::fs::write(&path, value).map_err(|e| {
            OciError::setup(format!("cannot write {value} to {}: {e}", path.display()))
        })
    }

    /// `file` of this cgroup and of the runtime's nested one (while it
    /// exists), parsed and summed: v1 counts OOM kills and refused forks
    /// in the cgroup of the task, failures in the one whose limit was hit.
    fn sum(&self, ctrl: &str, file: &str, parse: impl Fn(&str) -> Option<u64>) -> u64 {
        let dir = self.dir(ctrl);
        [dir.join(file), dir.join("c").join(file)]
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .filter_map(|t| parse(&t))
            .sum()
    }

    /// Processes the memory cgroup's OOM killer ended.
    pub(crate) fn oom_kills(&self) -> u64 {
        self.sum("memory", "memory.oom_control", |t| field(t, "oom_kill"))
    }

    /// Times the memory (or memory+swap) limit was hit.
    pub(crate) fn memory_failcnt(&self) -> u64 {
        let num = |t: &str| t.trim().parse().ok();
        self.sum("memory", "memory.failcnt", num) + self.sum("memory", "memory.memsw.failcnt", num)
    }

    /// Forks refused by `pids.max`.
    pub(crate) fn pids_refused(&self) -> u64 {
        self.sum("pids", "pids.events", |t| field(t, "max"))
    }

    /// Removes the run's cgroups below every v1 controller (the runtime
    /// creates intermediate directories in controllers toolexec does not
    /// set limits in), killing stragglers first. Best effort, bounded.
    pub(crate) fn remove(&self) {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        let ctrls: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        for ctrl in ctrls {
            let base = ctrl.join(&self.rel);
            if !base.is_dir() {
                continue;
            }
            for dir in [base.join("c"), base.clone()] {
                remove_dir(&dir);
            }
        }
        remove_parents(&self.root, &self.parent);
    }
}

/// Creates `dir` and its parents; retries when a concurrent
/// [`remove_parents`] removes an empty parent in between.
fn create_dir(dir: &Path) -> std::io::Result<()> {
    let mut attempt = 0;
    loop {
        match std::fs::create_dir_all(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempt < 10 => attempt += 1,
            other => return other,
        }
    }
}

/// Removes the configured parent cgroup (each of its path components,
/// deepest first) below every v1 controller where it is empty. Best
/// effort: a parent still holding another run's cgroup stays (`rmdir` of
/// a cgroup with children fails), and so does anything above it.
pub(crate) fn remove_parents(root: &Path, parent: &str) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let parts: Vec<&str> = parent.split('/').filter(|p| !p.is_empty()).collect();
    for ctrl in entries.flatten().map(|e| e.path()) {
        for depth in (1..=parts.len()).rev() {
            let dir = ctrl.join(parts[..depth].join("/"));
            match std::fs::remove_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => break,
            }
        }
    }
}

fn remove_dir(dir: &Path) {
    for attempt in 0..20 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => {
                if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                        // SAFETY: plain syscall on a pid of the run's own cgroup.
                        unsafe {
                            libc::kill(pid, libc::SIGKILL);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(5 * (attempt + 1)));
            }
        }
    }
    tracing::warn!(dir = %dir.display(), "cannot remove run cgroup");
}

fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok()).flatten()
    })
}

/// Whether the cgroup v1 controllers toolexec needs are present and
/// writable here; if not, why.
pub(crate) fn check(root: &Path, parent: &str) -> Result<(), String> {
    check_parent(parent)?;
    for ctrl in OWN_CONTROLLERS {
        let dir = root.join(ctrl);
        if !dir.join("cgroup.procs").exists() {
            return Err(format!(
                "cgroup v1 {ctrl} controller not mounted at {}",
                dir.display()
            ));
        }
        let parent_dir = dir.join(parent);
        let made = create_dir(&parent_dir)
            .map_err(|e| format!("cannot create cgroup {}: {e}", parent_dir.display()));
        if made.is_err() {
            remove_parents(root, parent);
        }
        made?;
    }
    remove_parents(root, parent);
    Ok(())
}

/// The configured parent must stay below each controller: relative,
/// non-empty components, no `.`/`..`, no NUL.
fn check_parent(parent: &str) -> Result<(), String> {
    let bad = parent.is_empty()
        || parent.starts_with('/')
        || parent.contains('\0')
        || parent
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        return Err(format!(
            "cgroup_parent {parent:?} must be a relative path of non-empty components without '.' or '..'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_must_stay_below_the_controller() {
        for bad in [
            "",
            "/abs",
            "a/../../etc",
            "a//b",
            ".",
            "a/./b",
            "a\0b",
            "a/",
        ] {
            assert!(check_parent(bad).is_err(), "{bad:?}");
        }
        for good in ["toolexec-oci", "a/b-c/d"] {
            assert!(check_parent(good).is_ok(), "{good:?}");
        }
    }

    /// A limit the kernel refuses (pids.max above PIDS_MAX) is a typed
    /// error and leaves no cgroup behind.
    #[test]
    fn refused_limit_leaves_no_cgroup() {
        let root = Path::new("/sys/fs/cgroup");
        let parent = format!("toolexec-oci-unit-{}", std::process::id());
        if let Err(why) = check(root, &parent) {
            assert!(std::env::var_os("CI").is_none(), "{why}");
            eprintln!("SKIPPED: refused_limit_leaves_no_cgroup: {why}");
            return;
        }
        let err =
            RunCgroup::create(root, &parent, "run", Some(64 << 20), Some(u64::MAX)).unwrap_err();
        assert!(err.to_string().contains("pids.max"), "{err}");
        for ctrl in OWN_CONTROLLERS {
            let dir = root.join(ctrl).join(&parent);
            assert!(!dir.exists(), "left behind: {}", dir.display());
        }
        // The same with a valid limit works and is removed.
        let ok = RunCgroup::create(root, &parent, "run", Some(64 << 20), Some(8)).unwrap();
        assert_eq!(
            std::fs::read_to_string(ok.dir("pids").join("pids.max"))
                .unwrap()
                .trim(),
            "8"
        );
        ok.remove();
        assert!(!root.join("pids").join(&parent).exists());
    }

    #[test]
    fn remove_parents_removes_only_empty_directories() {
        let root = std::env::temp_dir().join(format!("toolexec-oci-rp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("memory/p/q")).unwrap();
        std::fs::create_dir_all(root.join("pids/p/q/run")).unwrap();
        remove_parents(&root, "p/q");
        assert!(!root.join("memory/p").exists());
        assert!(root.join("pids/p/q/run").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
