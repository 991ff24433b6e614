//! Per-run cgroups: layout detection (v1, v2, hybrid), limits, the events
//! that classify how a run ended, and cleanup (also on drop).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::verdict::{CgroupEvents, keyed};

/// Which cgroup hierarchy to use and where its controllers are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupLayout {
    /// Unified hierarchy with the `memory`, `pids` and `cpu` controllers
    /// (pure v2, or the `unified` mount of a hybrid when it has them).
    V2 {
        /// The v2 mount.
        root: PathBuf,
    },
    /// Per-controller v1 hierarchies; each is `None` when missing.
    V1 {
        /// The `memory` hierarchy.
        memory: Option<PathBuf>,
        /// The `pids` hierarchy.
        pids: Option<PathBuf>,
        /// The `cpuacct` hierarchy (`cpuacct` or `cpu,cpuacct`).
        cpuacct: Option<PathBuf>,
    },
    /// No usable controller.
    None,
}

impl CgroupLayout {
    /// Detects the layout under `root` (normally `/sys/fs/cgroup`).
    ///
    /// ```
    /// use toolexec_sandbox::cgroup::CgroupLayout;
    /// let layout = CgroupLayout::detect(std::path::Path::new("/nonexistent"));
    /// assert_eq!(layout, CgroupLayout::None);
    /// ```
    pub fn detect(root: &Path) -> CgroupLayout {
        for v2 in [root.to_path_buf(), root.join("unified")] {
            let controllers = fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
            let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
            if has("memory") && has("pids") {
                return CgroupLayout::V2 { root: v2 };
            }
        }
        let dir = |names: &[&str], file: &str| {
            names
                .iter()
                .map(|n| root.join(n))
                .find(|d| d.join(file).is_file())
        };
        let memory = dir(&["memory"], "memory.limit_in_bytes");
        let pids = dir(&["pids"], "cgroup.procs");
        let cpuacct = dir(&["cpuacct", "cpu,cpuacct", "cpuacct,cpu"], "cpuacct.usage");
        if memory.is_none() && pids.is_none() && cpuacct.is_none() {
            return CgroupLayout::None;
        }
        CgroupLayout::V1 {
            memory,
            pids,
            cpuacct,
        }
    }

    /// `cgroup v1`, `cgroup v2` or `none`.
    pub fn label(&self) -> &'static str {
        match self {
            CgroupLayout::V2 { .. } => "cgroup v2",
            CgroupLayout::V1 { .. } => "cgroup v1",
            CgroupLayout::None => "none",
        }
    }
}

/// Makes `layout` ready for runs, once: creates the `toolexec` parent in
/// each controller and, on v2, enables the controllers for it (one write
/// per controller, so one the kernel refuses does not take the others
/// along). Controllers whose parent cannot be made are dropped; the
/// returned reason says why (runs then go without them, on rlimits).
pub fn prepare(layout: &CgroupLayout) -> (CgroupLayout, Option<String>) {
    // The parent may exist (made by another, more privileged user): only
    // making and removing a child shows that runs can have cgroups.
    let mkdir = |dir: &Path| {
        let probe = dir.join(format!("probe-{}", std::process::id()));
        let mut attempts = 0;
        loop {
            fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let made = fs::create_dir(&probe)
                .or_else(|e| match e.kind() {
                    std::io::ErrorKind::AlreadyExists => Ok(()),
                    _ => Err(e),
                })
                .and_then(|()| fs::remove_dir(&probe));
            match made {
                // The parent was removed meanwhile (by whatever cleans up
                // empty cgroups on this machine): made again.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempts < 5 => {
                    attempts += 1;
                }
                other => return other.map_err(|e| format!("{}: {e}", probe.display())),
            }
        }
    };
    match layout {
        CgroupLayout::None => (CgroupLayout::None, None),
        CgroupLayout::V2 { root } => {
            let parent = root.join("toolexec");
            if let Err(why) = mkdir(&parent) {
                return (CgroupLayout::None, Some(why));
            }
            for ctrl in ["memory", "pids", "cpu"] {
                for dir in [root, &parent] {
                    // Best effort: the controller may be delegated already.
                    let _ = write(&dir.join("cgroup.subtree_control"), &format!("+{ctrl}"));
                }
            }
            let enabled =
                fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
            let missing: Vec<&str> = ["memory", "pids"]
                .into_iter()
                .filter(|c| !enabled.split_whitespace().any(|e| e == *c))
                .collect();
            if missing.is_empty() {
                (layout.clone(), None)
            } else {
                let why = format!(
                    "cannot enable the {} controller(s) in {}",
                    missing.join(" and "),
                    parent.display()
                );
                (CgroupLayout::None, Some(why))
            }
        }
        CgroupLayout::V1 {
            memory,
            pids,
            cpuacct,
        } => {
            let mut problems = Vec::new();
            let mut keep = |ctrl: &Option<PathBuf>| {
                let ctrl = ctrl.as_ref()?;
                match mkdir(&ctrl.join("toolexec")) {
                    Ok(()) => Some(ctrl.clone()),
                    Err(why) => {
                        problems.push(why);
                        None
                    }
                }
            };
            let (memory, pids, cpuacct) = (keep(memory), keep(pids), keep(cpuacct));
            let why = (!problems.is_empty()).then(|| problems.join("; "));
            if memory.is_none() && pids.is_none() && cpuacct.is_none() {
                return (CgroupLayout::None, why);
            }
            (
                CgroupLayout::V1 {
                    memory,
                    pids,
                    cpuacct,
                },
                why,
            )
        }
    }
}

/// The limits a run's cgroup gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupLimits {
    /// Memory in bytes (plus swap, where the kernel accounts it).
    pub memory: Option<u64>,
    /// Tasks at once.
    pub pids: Option<u64>,
}

/// One run's cgroup (one directory per controller on v1). Dropping it kills
/// whatever is left inside and removes the directories.
#[derive(Debug)]
pub struct RunCgroup {
    layout: CgroupLayout,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
    dirs: Vec<PathBuf>,
    /// What each limit was set with, for the enforcement report.
    pub memory_mechanism: Option<String>,
    /// See [`RunCgroup::memory_mechanism`].
    pub pids_mechanism: Option<String>,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

impl RunCgroup {
    /// Creates `<controller>/toolexec/bwrap-<unique>` in every available
    /// controller and sets `limits`. The layout should have been through
    /// [`prepare`] (the `toolexec` parents exist, v2 controllers enabled).
    pub fn create(layout: &CgroupLayout, limits: CgroupLimits) -> io::Result<RunCgroup> {
        let name = format!(
            "bwrap-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut cg = RunCgroup {
            layout: layout.clone(),
            memory: None,
            pids: None,
            cpuacct: None,
            dirs: Vec::new(),
            memory_mechanism: None,
            pids_mechanism: None,
        };
        match layout {
            CgroupLayout::None => {}
            CgroupLayout::V2 { root } => {
                let dir = root.join("toolexec").join(&name);
                make_run_dir(&dir)?;
                cg.dirs.push(dir.clone());
                cg.memory = Some(dir.clone());
                cg.pids = Some(dir.clone());
                cg.cpuacct = Some(dir);
            }
            CgroupLayout::V1 {
                memory,
                pids,
                cpuacct,
            } => {
                let mut make = |ctrl: &Option<PathBuf>| -> io::Result<Option<PathBuf>> {
                    let Some(ctrl) = ctrl else { return Ok(None) };
                    let dir = ctrl.join("toolexec").join(&name);
                    make_run_dir(&dir)?;
                    cg.dirs.push(dir.clone());
                    Ok(Some(dir))
                };
                cg.memory = make(memory)?;
                cg.pids = make(pids)?;
                cg.cpuacct = make(cpuacct)?;
            }
        }
        cg.set_limits(limits)?;
        Ok(cg)
    }

    /// Writes `limits` (again): pool entries get theirs when released.
    pub fn set_limits(&mut self, limits: CgroupLimits) -> io::Result<()> {
        let v2 = matches!(self.layout, CgroupLayout::V2 { .. });
        if let (Some(dir), Some(bytes)) = (&self.memory, limits.memory) {
            if v2 {
                write(&dir.join("memory.max"), &bytes.to_string())?;
                let swap = write(&dir.join("memory.swap.max"), "0").is_ok();
                self.memory_mechanism = Some(format!(
                    "cgroup v2 memory.max = {bytes}{}",
                    if swap { ", memory.swap.max = 0" } else { "" }
                ));
            } else {
                write(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
                let memsw = dir.join("memory.memsw.limit_in_bytes");
                let swap = memsw.exists() && write(&memsw, &bytes.to_string()).is_ok();
                self.memory_mechanism = Some(format!(
                    "cgroup v1 memory.limit_in_bytes = {bytes}{}",
                    if swap {
                        " (+ memory.memsw.limit_in_bytes)"
                    } else {
                        ""
                    }
                ));
            }
        }
        if let (Some(dir), Some(n)) = (&self.pids, limits.pids) {
            write(&dir.join("pids.max"), &n.to_string())?;
            self.pids_mechanism = Some(format!(
                "{} pids.max = {n}",
                if v2 { "cgroup v2" } else { "cgroup v1" }
            ));
        }
        Ok(())
    }

    /// Open files the child writes `0` to, to join (see
    /// [`crate::process::ProcessSpec::join_cgroups`]). On v1 that is
    /// `tasks`, not `cgroup.procs`: the forked child has a single thread,
    /// so moving that thread moves the whole process, and a single-thread
    /// move of the writer itself skips the global threadgroup rwsem whose
    /// write lock waits for an RCU grace period (measured: up to 13 ms per
    /// run on this host, on the critical path). v2 only allows moving
    /// whole processes between domain cgroups, so it keeps `cgroup.procs`.
    pub fn join_files(&self) -> io::Result<Vec<File>> {
        let file = match self.layout {
            CgroupLayout::V2 { .. } => "cgroup.procs",
            _ => "tasks",
        };
        self.dirs
            .iter()
            .map(|d| OpenOptions::new().write(true).open(d.join(file)))
            .collect()
    }

    /// Whether the cgroup limits memory.
    pub fn has_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// Whether the cgroup accounts CPU time.
    pub fn has_cpu(&self) -> bool {
        self.cpuacct.is_some()
    }

    /// Reads the counters.
    pub fn events(&self) -> CgroupEvents {
        let v2 = matches!(self.layout, CgroupLayout::V2 { .. });
        let read = |dir: &Option<PathBuf>, file: &str| {
            dir.as_ref()
                .and_then(|d| fs::read_to_string(d.join(file)).ok())
                .unwrap_or_default()
        };
        let oom_kills = if v2 {
            keyed(&read(&self.memory, "memory.events"), "oom_kill")
        } else {
            keyed(&read(&self.memory, "memory.oom_control"), "oom_kill")
        };
        let memory_failcnt = if v2 {
            keyed(&read(&self.memory, "memory.events"), "max")
        } else {
            read(&self.memory, "memory.failcnt")
                .trim()
                .parse()
                .unwrap_or(0)
        };
        let pids_refused = keyed(&read(&self.pids, "pids.events"), "max");
        let cpu = if v2 {
            self.cpuacct.as_ref().map(|_| {
                Duration::from_micros(keyed(&read(&self.cpuacct, "cpu.stat"), "usage_usec"))
            })
        } else {
            read(&self.cpuacct, "cpuacct.usage")
                .trim()
                .parse()
                .ok()
                .map(Duration::from_nanos)
        };
        CgroupEvents {
            oom_kills,
            memory_failcnt,
            pids_refused,
            cpu,
        }
    }

    fn pids_inside(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        for dir in &self.dirs {
            if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
                pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Existing directories, for cleanup only.
    fn adopt(dirs: Vec<PathBuf>) -> RunCgroup {
        RunCgroup {
            layout: CgroupLayout::None,
            memory: None,
            pids: None,
            cpuacct: None,
            dirs,
            memory_mechanism: None,
            pids_mechanism: None,
        }
    }

    /// Kills what is left and removes the directories.
    pub fn cleanup(&mut self) {
        for _ in 0..200 {
            let pids = self.pids_inside();
            if pids.is_empty() {
                break;
            }
            for pid in pids.into_iter().filter(|p| *p > 1) {
                // SAFETY: plain syscall on a pid read from our own cgroup.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        for dir in self.dirs.drain(..) {
            for _ in 0..50 {
                match fs::remove_dir(&dir) {
                    Err(e) if e.kind() == io::ErrorKind::ResourceBusy => {
                        std::thread::sleep(Duration::from_millis(2))
                    }
                    _ => break,
                }
            }
        }
    }
}

impl Drop for RunCgroup {
    /// Hands the directories to the janitor thread, off the run's critical
    /// path: by then bubblewrap is gone, and with it the pid namespace (the
    /// kernel kills every process left in it), so what remains is killing
    /// stragglers and `rmdir`. Without a janitor the cleanup runs here.
    fn drop(&mut self) {
        if self.dirs.is_empty() {
            return;
        }
        if let Err(dirs) = janitor::send(std::mem::take(&mut self.dirs)) {
            RunCgroup::adopt(dirs).cleanup();
        }
    }
}

/// The background thread that empties and removes finished runs' cgroups.
/// Makes a run's cgroup directory; a `toolexec` parent removed since
/// [`prepare`] (by whatever cleans up empty cgroups on the machine) is
/// made again.
fn make_run_dir(dir: &Path) -> io::Result<()> {
    let mut attempts = 0;
    loop {
        match fs::create_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 5 => {
                attempts += 1;
                if let Some(parent) = dir.parent() {
                    let _ = fs::create_dir_all(parent);
                }
            }
            other => {
                return other
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())));
            }
        }
    }
}

mod janitor {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;
    use std::sync::mpsc::{Sender, channel};

    use super::RunCgroup;

    static QUEUE: Mutex<Option<Sender<Vec<PathBuf>>>> = Mutex::new(None);

    /// Queues a run's directories for cleanup; gives them back when no
    /// thread can take them.
    pub(super) fn send(dirs: Vec<PathBuf>) -> Result<(), Vec<PathBuf>> {
        let Ok(mut queue) = QUEUE.lock() else {
            return Err(dirs);
        };
        let dirs = match queue.as_ref() {
            Some(tx) => match tx.send(dirs) {
                Ok(()) => return Ok(()),
                Err(returned) => returned.0,
            },
            None => dirs,
        };
        let (tx, rx) = channel::<Vec<PathBuf>>();
        let parents: Vec<PathBuf> = dirs
            .iter()
            .filter_map(|d| d.parent())
            .map(Path::to_path_buf)
            .collect();
        let started = std::thread::Builder::new()
            .name("toolexec-cgroup-janitor".into())
            .spawn(move || {
                for parent in parents {
                    sweep_stale(&parent);
                }
                for dirs in rx {
                    RunCgroup::adopt(dirs).cleanup();
                }
            });
        if started.is_err() {
            return Err(dirs);
        }
        let sent = tx.send(dirs).map_err(|e| e.0);
        *queue = Some(tx);
        sent
    }

    /// Removes `bwrap-<pid>-<n>` cgroups under `parent` left by processes
    /// that are gone (an exiting process's janitor may not have finished).
    fn sweep_stale(parent: &Path) {
        let Ok(entries) = std::fs::read_dir(parent) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_prefix("bwrap-"))
                .and_then(|n| n.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            let Some(pid) = pid else { continue };
            if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            RunCgroup::adopt(vec![entry.path()]).cleanup();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `toolexec` parent removed after `prepare` (something on the machine
    /// cleaning up empty cgroups) is made again for the next run.
    #[test]
    fn a_run_dir_outlives_its_parent_being_removed() {
        let root = std::env::temp_dir().join(format!(
            "toolexec-cgparent-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let run = root.join("toolexec").join("bwrap-1-1");
        make_run_dir(&run).unwrap();
        assert!(run.is_dir());
        fs::remove_dir_all(&root).unwrap();
        make_run_dir(&run).unwrap();
        assert!(run.is_dir());
        fs::remove_dir_all(&root).unwrap();
    }

    fn tree(files: &[(&str, &str)]) -> PathBuf {
        let root = std::env::temp_dir().join(format!(
            "toolexec-cgtest-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        for (path, content) in files {
            let p = root.join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, content).unwrap();
        }
        fs::create_dir_all(&root).unwrap();
        root
    }

    #[test]
    fn hybrid_without_v2_controllers_is_v1() {
        let root = tree(&[
            ("unified/cgroup.controllers", ""),
            ("memory/memory.limit_in_bytes", "0"),
            ("pids/cgroup.procs", ""),
            ("cpuacct/cpuacct.usage", "0"),
        ]);
        assert_eq!(
            CgroupLayout::detect(&root),
            CgroupLayout::V1 {
                memory: Some(root.join("memory")),
                pids: Some(root.join("pids")),
                cpuacct: Some(root.join("cpuacct")),
            }
        );
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn combined_cpu_cpuacct_is_found() {
        let root = tree(&[("cpu,cpuacct/cpuacct.usage", "0")]);
        assert_eq!(
            CgroupLayout::detect(&root),
            CgroupLayout::V1 {
                memory: None,
                pids: None,
                cpuacct: Some(root.join("cpu,cpuacct")),
            }
        );
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn pure_and_hybrid_v2() {
        let pure = tree(&[("cgroup.controllers", "cpuset cpu io memory pids")]);
        assert_eq!(
            CgroupLayout::detect(&pure),
            CgroupLayout::V2 { root: pure.clone() }
        );
        let hybrid = tree(&[
            ("unified/cgroup.controllers", "memory pids cpu"),
            ("memory/memory.limit_in_bytes", "0"),
        ]);
        assert_eq!(
            CgroupLayout::detect(&hybrid),
            CgroupLayout::V2 {
                root: hybrid.join("unified")
            }
        );
        let empty = tree(&[]);
        assert_eq!(CgroupLayout::detect(&empty), CgroupLayout::None);
        for r in [pure, hybrid, empty] {
            fs::remove_dir_all(r).unwrap();
        }
    }

    #[test]
    fn fake_v1_run_sets_limits_and_reads_events() {
        let root = tree(&[
            ("memory/memory.limit_in_bytes", "0"),
            ("pids/cgroup.procs", ""),
        ]);
        let (layout, problem) = prepare(&CgroupLayout::detect(&root));
        assert_eq!(problem, None);
        assert!(root.join("memory/toolexec").is_dir());
        let limits = CgroupLimits {
            memory: Some(1 << 20),
            pids: Some(7),
        };
        // A plain directory tree is not cgroupfs: the run's files do not
        // exist until written, so writes create them.
        let cg = RunCgroup::create(&layout, limits).unwrap();
        let mem_dir = cg.memory.clone().unwrap();
        assert_eq!(
            fs::read_to_string(mem_dir.join("memory.limit_in_bytes")).unwrap(),
            "1048576"
        );
        let pids_dir = cg.pids.clone().unwrap();
        assert_eq!(fs::read_to_string(pids_dir.join("pids.max")).unwrap(), "7");
        fs::write(
            mem_dir.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .unwrap();
        fs::write(pids_dir.join("pids.events"), "max 5\n").unwrap();
        let events = cg.events();
        assert_eq!(events.oom_kills, 2);
        assert_eq!(events.pids_refused, 5);
        assert_eq!(events.cpu, None);
        assert_eq!(cg.pids_mechanism.as_deref(), Some("cgroup v1 pids.max = 7"));
        let mut cg = cg;
        cg.cleanup();
        drop(cg);
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn controllers_without_a_parent_are_dropped_with_the_reason() {
        // `pids/toolexec` is a file: its parent cannot be made, memory's can.
        let root = tree(&[
            ("memory/memory.limit_in_bytes", "0"),
            ("pids/cgroup.procs", ""),
            ("pids/toolexec", "not a directory"),
        ]);
        let (layout, problem) = prepare(&CgroupLayout::detect(&root));
        assert_eq!(
            layout,
            CgroupLayout::V1 {
                memory: Some(root.join("memory")),
                pids: None,
                cpuacct: None,
            }
        );
        assert!(problem.unwrap().contains("pids/toolexec"));
        let only_pids = tree(&[("pids/cgroup.procs", ""), ("pids/toolexec", "x")]);
        let (layout, problem) = prepare(&CgroupLayout::detect(&only_pids));
        assert_eq!(layout, CgroupLayout::None);
        assert!(problem.is_some());
        // v2 whose controllers cannot be enabled: no cgroups, with why.
        let v2 = tree(&[("cgroup.controllers", "memory pids cpu")]);
        let (layout, problem) = prepare(&CgroupLayout::detect(&v2));
        assert_eq!(layout, CgroupLayout::None);
        assert!(problem.unwrap().contains("controller"));
        for r in [root, only_pids, v2] {
            fs::remove_dir_all(r).unwrap();
        }
    }

    #[test]
    fn key_parsing_tolerates_garbage() {
        assert_eq!(keyed("max 3\n", "max"), 3);
        assert_eq!(keyed("max x\n", "max"), 0);
        assert_eq!(keyed("", "max"), 0);
        assert_eq!(keyed("oom_kill 9", "oom_kill"), 9);
    }
}
