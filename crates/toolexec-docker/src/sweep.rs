//! Containers left behind by a process that died (killed mid-run, or exited
//! while a removal was pending) are found by their owner label and removed.

use std::collections::HashMap;
use std::sync::OnceLock;

use bollard::Docker;
use bollard::query_parameters::ListContainersOptionsBuilder;

use crate::cleanup::{is_not_found, remove_raw};

/// The label naming the process that owns a container:
/// `<boot id>.<pid namespace>.<pid>.<start time>` (see [`owner_id`]).
pub const OWNER_LABEL: &str = "toolexec.owner";

/// The label every container of this runtime carries.
pub const RUNTIME_LABEL: &str = "toolexec.runtime";

/// This process's owner id, as set in the [`OWNER_LABEL`] of its
/// containers: boot id, pid namespace inode, pid and start time (clock
/// ticks since boot), so that a reused pid is not mistaken for the owner.
///
/// ```
/// let id = toolexec_docker::owner_id();
/// assert_eq!(id.split('.').count(), 4);
/// assert_eq!(id.split('.').nth(2), Some(std::process::id().to_string().as_str()));
/// ```
pub fn owner_id() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| {
        let pid = std::process::id();
        format!(
            "{}.{}.{pid}.{}",
            boot_id(),
            pid_namespace(),
            start_time(pid).unwrap_or_default()
        )
    })
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().replace('.', ""))
        .unwrap_or_default()
}

fn pid_namespace() -> String {
    // "pid:[4026531836]" → "4026531836"
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|p| {
            let p = p.to_string_lossy().into_owned();
            Some(p.strip_prefix("pid:[")?.strip_suffix(']')?.to_owned())
        })
        .unwrap_or_default()
}

/// Field 22 of `/proc/<pid>/stat`: start time in clock ticks since boot.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and ')': skip past the
    // last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the owner `label` is a process that no longer exists. `false`
/// when it cannot be told: another boot (or host) or pid namespace, or a
/// label that is not an owner id.
pub(crate) fn owner_is_dead(label: &str) -> bool {
    let parts: Vec<&str> = label.split('.').collect();
    let [boot, pidns, pid, start] = parts[..] else {
        return false;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    if boot.is_empty() || boot != boot_id() || pidns.is_empty() || pidns != pid_namespace() {
        return false;
    }
    start_time(pid) != Some(start)
}

/// Removes this runtime's containers whose owner process is dead; the
/// number removed.
pub(crate) async fn sweep(docker: &Docker) -> Result<usize, bollard::errors::Error> {
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![format!("{RUNTIME_LABEL}=docker"), OWNER_LABEL.to_owned()],
    )]);
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    let mut removed = 0;
    for container in docker.list_containers(Some(options)).await? {
        let (Some(id), Some(labels)) = (container.id, container.labels) else {
            continue;
        };
        if !labels.get(OWNER_LABEL).is_some_and(|o| owner_is_dead(o)) {
            continue;
        }
        match remove_raw(docker, &id).await {
            Ok(()) => removed += 1,
            Err(e) if is_not_found(&e) => {}
            Err(e) => tracing::warn!("docker sweep: removing container {id}: {e}"),
        }
    }
    Ok(removed)
}

/// Removes per-run channel directories (`<base>/toolexec-docker-<pid>-<time>-<n>`,
/// hex) whose process no longer exists; the number removed.
pub(crate) fn sweep_channel_dirs(base: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("toolexec-docker-"))
            .and_then(run_dir_pid)
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists()
            && std::fs::remove_dir_all(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

/// The owner pid of a run directory name `<pid>-<time>-<n>` (all hex).
fn run_dir_pid(rest: &str) -> Option<u32> {
    let parts: Vec<&str> = rest.split('-').collect();
    let [pid, time, n] = parts[..] else {
        return None;
    };
    u64::from_str_radix(time, 16).ok()?;
    u64::from_str_radix(n, 16).ok()?;
    u32::from_str_radix(pid, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_told_apart() {
        let me = owner_id();
        assert!(!owner_is_dead(me), "{me}");
        assert_eq!(run_dir_pid("1a2b-18ea04f6c5e2f8d8-0"), Some(0x1a2b));
        for name in ["drop-123", "cg-1-2", "1-2", "1-2-3-4", "x-1-2", ""] {
            assert_eq!(run_dir_pid(name), None, "{name}");
        }
        let parts: Vec<&str> = me.split('.').collect();
        // A child that has exited: its pid is free (or reused with another
        // start time).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let dead = format!("{}.{}.{pid}.{}", parts[0], parts[1], parts[3]);
        assert!(owner_is_dead(&dead));
        // Our pid with another start time is a reused pid: dead.
        let reused = format!("{}.{}.{}.1", parts[0], parts[1], parts[2]);
        assert!(owner_is_dead(&reused));
        // Unknown boot or namespace, and garbage: never swept.
        for unknown in [
            format!("otherboot.{}.{pid}.1", parts[1]),
            format!("{}.1.{pid}.1", parts[0]),
            "garbage".into(),
            "a.b.c.d".into(),
            String::new(),
        ] {
            assert!(!owner_is_dead(&unknown), "{unknown}");
        }
    }
}
