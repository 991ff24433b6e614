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
//!
//! The configured parent is shared by concurrent runs (of this process
//! and others), and a run's cleanup removes it once it is empty. So no
//! runtime ever creates a directory in it: toolexec creates the run's
//! cgroup below *every* mounted hierarchy (cpuset with `cpuset.cpus` and
//! `cpuset.mems` copied from the level above, as a new v1 cpuset starts
//! empty), retrying when a concurrent cleanup removes an empty parent
//! between two of its `mkdir`s. From then on the run's own directory
//! holds the parent in place, and the runtime only adds `c` below it
//! (runc) or joins it as it is (runsc).

use std::path::{Path, PathBuf};
use std::time::Duration;

use toolexec_sandbox::verdict::{CgroupEvents, keyed};

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
    /// Creates `<root>/<hierarchy>/<parent>/<id>` below every mounted
    /// hierarchy (see the module doc) and writes the limits.
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
            let hierarchy = root.join(ctrl);
            create_path(&hierarchy, &cgroup.rel).map_err(|e| {
                // Leave nothing half-made behind.
                cgroup.remove();
                OciError::setup(format!(
                    "cgroup v1 {ctrl}: cannot create {}: {e}",
                    hierarchy.join(&cgroup.rel).display()
                ))
            })?;
        }
        // The rest for the runtime: if one cannot be made here, the
        // runtime's own attempt says why.
        for hierarchy in hierarchies(root) {
            if let Err(e) = create_path(&hierarchy, &cgroup.rel) {
                tracing::warn!(
                    dir = %hierarchy.join(&cgroup.rel).display(),
                    "cannot create run cgroup: {e}"
                );
            }
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
    /// joins a pre-created cgroup as it is and leaves it in place). Either
    /// way the runtime creates nothing in the shared parent.
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

    /// What the run's cgroups counted: OOM kills, memory-limit hits,
    /// refused forks, CPU time (`cpuacct` is hierarchical: the nested
    /// cgroup is counted in this one).
    pub(crate) fn events(&self) -> CgroupEvents {
        let num = |t: &str| t.trim().parse().ok();
        let cpu = std::fs::read_to_string(self.dir("cpuacct").join("cpuacct.usage"))
            .ok()
            .and_then(|t| num(&t))
            .map(Duration::from_nanos);
        CgroupEvents {
            oom_kills: self.sum("memory", "memory.oom_control", |t| {
                Some(keyed(t, "oom_kill"))
            }),
            memory_failcnt: self.sum("memory", "memory.failcnt", num)
                + self.sum("memory", "memory.memsw.failcnt", num),
            pids_refused: self.sum("pids", "pids.events", |t| Some(keyed(t, "max"))),
            cpu,
        }
    }

    /// Removes the run's cgroups below every hierarchy, killing
    /// stragglers first, then the parent where it is empty. Best effort,
    /// bounded.
    pub(crate) fn remove(&self) {
        for hierarchy in hierarchies(&self.root) {
            let base = hierarchy.join(&self.rel);
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

/// The cgroup hierarchies mounted below `root` (each v1 controller, named
/// hierarchies, the v2 one of a hybrid setup): a runtime may put the
/// container in any of them.
fn hierarchies(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("cgroup.procs").exists())
        .collect();
    found.sort();
    found
}

/// How often [`create_path`] starts over after a concurrent
/// [`remove_parents`] removed a directory it had just created. Each
/// removal needs an empty parent, i.e. a cleanup landing in the few
/// microseconds between two `mkdir`s.
const CREATE_ATTEMPTS: usize = 100;

/// Creates `<hierarchy>/<rel>` one level at a time, each new cpuset
/// initialised from the level above; starts over when a concurrent
/// [`remove_parents`] removes an empty level in between.
fn create_path(hierarchy: &Path, rel: &str) -> std::io::Result<()> {
    let mut attempt = 1;
    loop {
        match try_create_path(hierarchy, rel) {
            Err(e) if removed_meanwhile(&e) && attempt < CREATE_ATTEMPTS && hierarchy.is_dir() => {
                attempt += 1;
            }
            other => return other,
        }
    }
}

fn try_create_path(hierarchy: &Path, rel: &str) -> std::io::Result<()> {
    let mut dir = hierarchy.to_owned();
    for part in rel.split('/') {
        let above = dir.clone();
        dir.push(part);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        inherit_cpuset(&above, &dir)?;
    }
    Ok(())
}

/// A level of the path went away under us: `ENOENT`, or `ENODEV` for a
/// file of a cgroup removed while open.
fn removed_meanwhile(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

/// A new v1 cpuset has no CPUs and no memory nodes (unless the level
/// above sets `cgroup.clone_children`), and no task may join it: copy
/// them from the level above. Not a cpuset hierarchy, or already set:
/// nothing to do.
fn inherit_cpuset(above: &Path, dir: &Path) -> std::io::Result<()> {
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let path = dir.join(file);
        let current = match std::fs::read_to_string(&path) {
            Ok(current) => current,
            // Not a cpuset hierarchy, unless the level itself is gone.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir.is_dir() => continue,
            Err(e) => return Err(e),
        };
        if !current.trim().is_empty() {
            continue;
        }
        let value = std::fs::read_to_string(above.join(file))?;
        if !value.trim().is_empty() {
            std::fs::write(&path, value.trim())?;
        }
    }
    Ok(())
}

/// Removes the configured parent cgroup (each of its path components,
/// deepest first) below every hierarchy where it is empty. Best effort: a
/// parent still holding another run's cgroup stays (`rmdir` of a cgroup
/// with children fails), and so does anything above it. A run being set
/// up concurrently recreates what this removes ([`create_path`]).
pub(crate) fn remove_parents(root: &Path, parent: &str) {
    let parts: Vec<&str> = parent.split('/').filter(|p| !p.is_empty()).collect();
    for ctrl in hierarchies(root) {
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
        let made = create_path(&dir, parent)
            .map_err(|e| format!("cannot create cgroup {}: {e}", dir.join(parent).display()));
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
        for hierarchy in hierarchies(root) {
            let dir = hierarchy.join(&parent);
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
        for hierarchy in ["memory", "pids"] {
            std::fs::write(root.join(hierarchy).join("cgroup.procs"), "").unwrap();
        }
        remove_parents(&root, "p/q");
        assert!(!root.join("memory/p").exists());
        assert!(root.join("pids/p/q/run").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The race a full hostile run hit: one run's cleanup removed the
    /// shared, momentarily empty parent in the cpuset hierarchy just after
    /// runc, setting up another run, had created it, and runc failed
    /// reading its `cpuset.cpus`. Here threads set up runs below one
    /// shared parent and clean them up, many times over, each doing after
    /// `create` what runc does with the run's `cgroupsPath`; none may find
    /// a level of its path gone.
    #[test]
    fn concurrent_runs_never_lose_their_parent() {
        const THREADS: usize = 8;
        const CYCLES: usize = 40;
        let root = Path::new("/sys/fs/cgroup");
        let top = format!("toolexec-oci-unit-{}-race", std::process::id());
        let parent = format!("{top}/shared");
        if let Err(why) = check(root, &parent) {
            assert!(std::env::var_os("CI").is_none(), "{why}");
            eprintln!("SKIPPED: concurrent_runs_never_lose_their_parent: {why}");
            return;
        }
        let failures: Vec<String> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let parent = &parent;
                    s.spawn(move || {
                        let mut failures = Vec::new();
                        for cycle in 0..CYCLES {
                            let id = format!("run-{t}-{cycle}");
                            let cgroup =
                                RunCgroup::create(root, parent, &id, Some(64 << 20), Some(8))
                                    .unwrap();
                            let path = cgroup.container_path(OciFlavor::Runc);
                            if let Err(e) = runc_like_setup(root, &path) {
                                failures.push(e);
                            }
                            cgroup.remove();
                        }
                        failures
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        remove_parents(root, &parent);
        assert!(
            failures.is_empty(),
            "{} of {} setups lost a level of their cgroup path: {:?}",
            failures.len(),
            THREADS * CYCLES,
            &failures[..failures.len().min(5)]
        );
        for hierarchy in hierarchies(root) {
            let dir = hierarchy.join(&top);
            assert!(!dir.exists(), "left behind: {}", dir.display());
        }
    }

    /// What runc 1.1 does with `cgroupsPath` in each v1 hierarchy before
    /// the container starts: `mkdir` of every level, existing ones kept;
    /// in cpuset it reads each level's `cpuset.cpus` and `cpuset.mems`
    /// and fills empty ones from the level above (`cpusetEnsureParent`).
    fn runc_like_setup(root: &Path, path: &str) -> Result<(), String> {
        for hierarchy in hierarchies(root) {
            let cpuset = hierarchy.join("cpuset.cpus").exists();
            let mut dir = hierarchy.clone();
            for part in path.trim_start_matches('/').split('/') {
                let above = dir.clone();
                dir.push(part);
                match std::fs::create_dir(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(format!("mkdir {}: {e}", dir.display())),
                }
                if !cpuset {
                    continue;
                }
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let read = |d: &Path| {
                        std::fs::read_to_string(d.join(file))
                            .map_err(|e| format!("read {}: {e}", d.join(file).display()))
                    };
                    if read(&dir)?.trim().is_empty() {
                        let value = read(&above)?;
                        std::fs::write(dir.join(file), value.trim())
                            .map_err(|e| format!("write {}: {e}", dir.join(file).display()))?;
                    }
                }
            }
        }
        Ok(())
    }
}
