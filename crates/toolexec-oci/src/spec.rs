//! The OCI runtime spec (`config.json`) of one run.

use std::path::Path;

use serde_json::{Value, json};
use toolexec_runtime::protocol::{CHANNEL_FD, CHANNEL_FD_ENV, CHANNEL_SOCKET_ENV};
use toolexec_runtime::{CommandUnit, RuntimeLimits};
use toolexec_sandbox::rlimits;
use toolexec_sandbox::seccomp::profile::{self, Clone3};

use crate::OciError;
use crate::config::{OciFlavor, ReadOnlyBind};

/// Where the channel socket directory is mounted in socket mode.
pub(crate) const CHANNEL_DIR: &str = "/run/toolexec";
/// The socket's name in [`CHANNEL_DIR`].
pub(crate) const CHANNEL_SOCKET_NAME: &str = "channel.sock";
/// Where the script worker is bound (read-only) inside the container: in
/// the `/tmp` tmpfs, so the runtime never creates a mount point in the
/// host's root filesystem directory.
pub(crate) const WORKER_PATH: &str = "/tmp/.toolexec-worker";
/// Paths hidden from the unit (an empty file or directory over them), as
/// runc's and Docker's defaults: kernel memory, keys, timers and hardware
/// details that leak host state or let a unit act on it.
pub(crate) const MASKED_PATHS: [&str; 11] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
/// Paths the unit sees read-only: `/proc/sys` (sysctls such as
/// `kernel.core_pattern`, host root for whoever writes it) and the other
/// `/proc` entries that act on the host kernel.
pub(crate) const READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];
/// Open descriptors per process.
pub(crate) const NOFILE: u64 = 1024;

/// How the unit reaches the channel.
#[derive(Debug, Clone)]
pub(crate) enum ChannelMode {
    /// Descriptor 3, passed in with `--preserve-fds 1` (runc).
    Fd,
    /// A socket in a host directory bound at [`CHANNEL_DIR`] (runsc).
    Socket(std::path::PathBuf),
}

/// Everything [`build`] needs.
pub(crate) struct SpecInput<'a> {
    pub flavor: OciFlavor,
    pub rootfs: &'a Path,
    pub command: &'a CommandUnit,
    pub limits: &'a RuntimeLimits,
    pub user: (u32, u32),
    pub binds: &'a [ReadOnlyBind],
    pub cgroups_path: String,
    pub channel: ChannelMode,
    /// The script worker on the host, bound at [`WORKER_PATH`].
    pub worker: Option<&'a Path>,
}

/// Checks the unit's fields and builds the spec.
pub(crate) fn build(input: &SpecInput<'_>) -> Result<Value, OciError> {
    let command = input.command;
    command.check().map_err(OciError::refused)?;
    let cwd = command.cwd.as_deref().unwrap_or("/tmp");
    let mut env = vec![
        "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".to_owned(),
        "HOME=/tmp".to_owned(),
    ];
    for (key, value) in &command.env {
        env.retain(|e| !e.starts_with(&format!("{key}=")));
        env.push(format!("{key}={value}"));
    }
    match &input.channel {
        ChannelMode::Fd => env.push(format!("{CHANNEL_FD_ENV}={CHANNEL_FD}")),
        ChannelMode::Socket(_) => env.push(format!(
            "{CHANNEL_SOCKET_ENV}={CHANNEL_DIR}/{CHANNEL_SOCKET_NAME}"
        )),
    }

    let limits = input.limits;
    // The cgroup cpuacct watch decides; RLIMIT_CPU is the backstop.
    let mut container_rlimits = rlimits::for_container(limits, NOFILE);
    rlimits::backstop_cpu(&mut container_rlimits);
    let rlimits: Vec<Value> = container_rlimits
        .iter()
        .map(|r| json!({"type": r.resource.oci_name(), "soft": r.soft, "hard": r.hard}))
        .collect();

    let mut tmp_options = vec![
        "nosuid".to_owned(),
        "nodev".to_owned(),
        "mode=1777".to_owned(),
    ];
    if let Some(disk) = limits.disk_bytes {
        // tmpfs sizes round up to pages; at least one page.
        tmp_options.push(format!("size={}", disk.max(4096)));
    }
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc",
               "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536"]}),
        json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": tmp_options}),
    ];
    if input.flavor == OciFlavor::Runsc {
        // gVisor mounts its own (emulated) sysfs read-write when the spec
        // has none: read-only here. runc gets no /sys at all.
        mounts.push(
            json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
               "options": ["nosuid", "noexec", "nodev", "ro"]}),
        );
    }
    for bind in input.binds {
        if !bind.destination.starts_with('/') || bind.destination.split('/').any(|c| c == "..") {
            return Err(OciError::invalid(
                "binds.destination",
                format!(
                    "{:?} must be an absolute path without '..'",
                    bind.destination
                ),
            ));
        }
        mounts.push(json!({"destination": bind.destination, "type": "bind",
            "source": bind.source, "options": ["rbind", "ro", "nosuid", "nodev"]}));
    }
    if let Some(worker) = input.worker {
        mounts.push(json!({"destination": WORKER_PATH, "type": "bind",
            "source": worker, "options": ["bind", "ro", "nosuid", "nodev"]}));
    }
    if let ChannelMode::Socket(dir) = &input.channel {
        mounts.push(json!({"destination": CHANNEL_DIR, "type": "bind",
            "source": dir, "options": ["bind", "nosuid", "nodev", "noexec"]}));
    }

    let mut namespaces = vec![
        json!({"type": "pid"}),
        json!({"type": "network"}),
        json!({"type": "ipc"}),
        json!({"type": "uts"}),
        json!({"type": "mount"}),
    ];
    if input.flavor == OciFlavor::Runc {
        namespaces.push(json!({"type": "cgroup"}));
    }

    Ok(json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": input.user.0, "gid": input.user.1},
            "args": command.argv,
            "env": env,
            "cwd": cwd,
            "capabilities": {"bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": []},
            "rlimits": rlimits,
            "noNewPrivileges": true,
        },
        "root": {"path": input.rootfs, "readonly": true},
        "hostname": "toolexec",
        "mounts": mounts,
        "linux": {
            "namespaces": namespaces,
            "cgroupsPath": input.cgroups_path,
            "resources": {
                "devices": [{"allow": false, "access": "rwm"}],
                // At most one core; the time limit is RLIMIT_CPU and the
                // host's cpuacct watch.
                "cpu": {"shares": 512, "quota": 100_000, "period": 100_000},
            },
            "maskedPaths": MASKED_PATHS,
            "readonlyPaths": READONLY_PATHS,
            "seccomp": profile::libseccomp_json(match input.flavor {
                OciFlavor::Runc => Clone3::Enosys,
                OciFlavor::Runsc => Clone3::Unfiltered,
            }),
        },
    }))
}
