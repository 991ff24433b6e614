//! What the kernel saw of a container's cgroup limits (local daemon,
//! cgroup v1): forks refused by `pids.max` and OOM kills. The Docker API
//! does not report refused forks, and runc deletes the container's cgroup
//! as soon as it exits, so two sources are used:
//!
//! - while it runs, `pids.events` (`max N`), `memory.oom_control`
//!   (`oom_kill N`) and `memory.failcnt` are sampled;
//! - the kernel log (`/dev/kmsg`, opened before the start) keeps the
//!   kernel's own record after the cgroup is gone: `fork rejected by pids
//!   controller in /docker/<id>` and `oom-kill:...task_memcg=/docker/<id>`
//!   name the container's id. It needs `CAP_SYSLOG` (or
//!   `kernel.dmesg_restrict = 0`).

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use toolexec_sandbox::verdict::{CgroupEvents, keyed};

/// Where cgroup v1 controllers are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Kernel log records read after a run, at most.
const MAX_KMSG_RECORDS: usize = 100_000;

/// Observes one container's cgroup.
pub(crate) struct Observer {
    id: String,
    parent: String,
    kmsg: Option<File>,
    pids: Option<PathBuf>,
    memory: Option<PathBuf>,
    seen: CgroupEvents,
}

impl Observer {
    /// Observes container `id` (cgroup parent `parent`, empty: docker's
    /// default). Call before the container starts, so that the kernel log
    /// is read from that point on. `None` when the daemon is not local or
    /// there is no cgroup v1 pids hierarchy.
    pub(crate) fn new(local: bool, id: &str, parent: &str) -> Option<Observer> {
        if !local || !Path::new(CGROUP_ROOT).join("pids").is_dir() || id.len() < 12 {
            return None;
        }
        let kmsg = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .and_then(|mut f| f.seek(SeekFrom::End(0)).map(|_| f))
            .ok();
        Some(Observer {
            id: id.to_owned(),
            parent: parent.to_owned(),
            kmsg,
            pids: None,
            memory: None,
            seen: CgroupEvents::default(),
        })
    }

    /// Whether the kernel log is readable (refusals are then seen even
    /// when the container exits at once).
    pub(crate) fn has_kernel_log(&self) -> bool {
        self.kmsg.is_some()
    }

    /// Samples the cgroup files (while the container runs); what was seen
    /// so far.
    pub(crate) fn sample(&mut self) -> CgroupEvents {
        if self.pids.is_none() {
            self.pids = self.locate("pids");
        }
        if self.memory.is_none() {
            self.memory = self.locate("memory");
        }
        if let Some(dir) = &self.pids
            && let Some(n) = read_keyed(&dir.join("pids.events"), "max")
        {
            self.seen.pids_refused = self.seen.pids_refused.max(n);
        }
        if let Some(dir) = &self.memory {
            if let Some(n) = read_keyed(&dir.join("memory.oom_control"), "oom_kill") {
                self.seen.oom_kills = self.seen.oom_kills.max(n);
            }
            if let Some(n) = read_number(&dir.join("memory.failcnt")) {
                self.seen.memory_failcnt = self.seen.memory_failcnt.max(n);
            }
        }
        self.seen
    }

    /// After the container exited: the samples plus the kernel's log.
    pub(crate) fn finish(mut self) -> CgroupEvents {
        let Some(mut kmsg) = self.kmsg.take() else {
            return self.seen;
        };
        let (mut refused, mut oom) = (0, 0);
        let mut buf = vec![0u8; 8192];
        for _ in 0..MAX_KMSG_RECORDS {
            match kmsg.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let record = String::from_utf8_lossy(&buf[..n]);
                    let (r, o) = classify_record(&record, &self.id);
                    refused += r;
                    oom += o;
                }
                // Records overwritten before we read them: go on.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // WouldBlock: the end of the log.
                Err(_) => break,
            }
        }
        self.seen.pids_refused = self.seen.pids_refused.max(refused);
        self.seen.oom_kills = self.seen.oom_kills.max(oom);
        self.seen
    }

    /// The container's directory under controller `ctrl`: docker's
    /// cgroupfs layout (`<parent or /docker>/<id>`) or systemd's
    /// (`system.slice/docker-<id>.scope`).
    fn locate(&self, ctrl: &str) -> Option<PathBuf> {
        let root = Path::new(CGROUP_ROOT).join(ctrl);
        let parent = match self.parent.trim_matches('/') {
            "" => "docker",
            p => p,
        };
        [
            root.join(parent).join(&self.id),
            root.join(parent).join(format!("docker-{}.scope", self.id)),
            root.join("system.slice")
                .join(format!("docker-{}.scope", self.id)),
        ]
        .into_iter()
        .find(|p| p.is_dir())
    }
}

/// `(refused forks, OOM kills)` that one kernel log record tells about
/// container `id`.
fn classify_record(record: &str, id: &str) -> (u64, u64) {
    // "6,1234,10555522488,-;cgroup: fork rejected by pids controller in /docker/<id>"
    let message = record.split_once(';').map_or(record, |(_, m)| m);
    let names = |m: &str| {
        m.split(['/', ',', ' ', '\n', '=']).any(|w| {
            w == id
                || w.strip_prefix("docker-")
                    .and_then(|w| w.strip_suffix(".scope"))
                    == Some(id)
        })
    };
    if message.contains("fork rejected by pids controller in ") && names(message) {
        (1, 0)
    } else if message.starts_with("oom-kill:") && names(message) {
        (0, 1)
    } else {
        (0, 0)
    }
}

/// `name N` in a flat keyed file, when the file is readable.
fn read_keyed(path: &Path, name: &str) -> Option<u64> {
    Some(keyed(&std::fs::read_to_string(path).ok()?, name))
}

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "68043be24c1d49c7ba878ca70f1ccf06800ef0778c003c302d354cf1d7938ed5";

    #[test]
    fn kernel_records_are_matched_to_their_container() {
        let fork = format!("6,1,2,-;cgroup: fork rejected by pids controller in /docker/{ID}\n");
        assert_eq!(classify_record(&fork, ID), (1, 0));
        let systemd = format!(
            "6,1,2,-;cgroup: fork rejected by pids controller in /system.slice/docker-{ID}.scope\n"
        );
        assert_eq!(classify_record(&systemd, ID), (1, 0));
        let oom = format!(
            "6,1,2,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset={ID},mems_allowed=0,oom_memcg=/docker/{ID},task_memcg=/docker/{ID},task=sh,pid=1,uid=65534\n"
        );
        assert_eq!(classify_record(&oom, ID), (0, 1));
        // Another container, a prefix of the id, unrelated records.
        let other = fork.replace(&ID[..8], "ffffffff");
        assert_eq!(classify_record(&other, ID), (0, 0));
        assert_eq!(classify_record(&fork, &ID[..12]), (0, 0));
        assert_eq!(classify_record("6,1,2,-;eth0: link up\n", ID), (0, 0));
        assert_eq!(classify_record("", ID), (0, 0));
    }

    #[test]
    fn keyed_files_are_parsed() {
        let dir = std::env::temp_dir().join(format!("toolexec-docker-cg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("events");
        std::fs::write(&file, "under_oom 0\noom_kill 3\n").unwrap();
        assert_eq!(read_keyed(&file, "oom_kill"), Some(3));
        assert_eq!(read_keyed(&file, "max"), Some(0));
        std::fs::write(&file, "max garbage\n").unwrap();
        assert_eq!(read_keyed(&file, "max"), Some(0));
        assert_eq!(read_keyed(&dir.join("missing"), "max"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
