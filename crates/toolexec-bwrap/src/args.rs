//! The bubblewrap command line: namespaces, the minimal read-only
//! filesystem, the scratch tmpfs, environment and seccomp descriptors.

use std::ffi::OsString;
use std::path::Path;

/// Where the init helper is mounted inside the sandbox.
pub const INIT_PATH: &str = "/run/toolexec/init";
/// Where the script worker is mounted inside the sandbox.
pub const WORKER_PATH: &str = "/run/toolexec/worker";
/// The `PATH` units see.
pub const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
/// Host system directories mirrored read-only (or as the symlinks they are).
const SYSTEM_DIRS: &[&str] = &["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"];
/// The only files of the host's `/etc` a unit sees: what the dynamic
/// loader and `/usr/bin/*` alternatives need.
const ETC_FILES: &[&str] = &["/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/alternatives"];
/// `/proc` files that leak host state, covered with `/dev/null` (the list
/// runc and Docker mask; `kcore` and friends only where the host has them).
const PROC_MASKED_FILES: &[&str] = &[
    "/proc/kcore",
    "/proc/interrupts",
    "/proc/keys",
    "/proc/key-users",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/kallsyms",
];
/// `/proc` directories covered with an empty read-only tmpfs.
const PROC_MASKED_DIRS: &[&str] = &["/proc/acpi", "/proc/asound", "/proc/scsi"];

/// The sandbox's shape, independent of the unit.
#[derive(Debug, Clone, Default)]
pub(crate) struct SandboxShape {
    /// Descriptor (`O_PATH`) of the init helper, bound at [`INIT_PATH`]:
    /// a descriptor, not a path, so an unprivileged bwrap can bind a
    /// binary under a directory only root may traverse.
    pub init_fd: Option<i32>,
    /// Descriptor of the script worker, bound at [`WORKER_PATH`].
    pub worker_fd: Option<i32>,
    /// Size of `/tmp` in bytes.
    pub tmp_bytes: Option<u64>,
    /// Descriptors holding seccomp programs.
    pub seccomp_fds: Vec<i32>,
}

fn push(args: &mut Vec<OsString>, items: &[&str]) {
    args.extend(items.iter().map(OsString::from));
}

/// Everything before the environment and the command.
pub(crate) fn base_args(shape: &SandboxShape) -> Vec<OsString> {
    let mut args = Vec::new();
    push(
        &mut args,
        &[
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--hostname",
            "sandbox",
        ],
    );
    for dir in SYSTEM_DIRS {
        let path = Path::new(dir);
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(path) {
                    args.push("--symlink".into());
                    args.push(target.into_os_string());
                    args.push(dir.into());
                }
            }
            Ok(meta) if meta.is_dir() => push(&mut args, &["--ro-bind", dir, dir]),
            _ => {}
        }
    }
    push(&mut args, &["--dir", "/etc"]);
    for file in ETC_FILES {
        push(&mut args, &["--ro-bind-try", file, file]);
    }
    push(&mut args, &["--proc", "/proc"]);
    proc_masks(&mut args);
    push(&mut args, &["--dev", "/dev"]);
    // The two writable places, each a tmpfs of the disk limit's size:
    // /tmp, and /dev/shm for POSIX shared memory. /dev itself (bwrap's
    // tmpfs with the device nodes) is remounted read-only below: writing
    // a device node is still allowed on a read-only mount.
    for dir in ["/tmp", "/dev/shm"] {
        if let Some(bytes) = shape.tmp_bytes {
            // tmpfs treats size=0 as unlimited: never pass 0.
            push(&mut args, &["--size", &bytes.max(4096).to_string()]);
        }
        push(&mut args, &["--tmpfs", dir]);
    }
    push(&mut args, &["--remount-ro", "/dev"]);
    for (fd, path) in [(shape.init_fd, INIT_PATH), (shape.worker_fd, WORKER_PATH)] {
        if let Some(fd) = fd {
            push(&mut args, &["--ro-bind-fd", &fd.to_string(), path]);
        }
    }
    // The root tmpfs bwrap builds stays read-only; /tmp is its own mount.
    push(&mut args, &["--remount-ro", "/"]);
    for fd in &shape.seccomp_fds {
        push(&mut args, &["--add-seccomp-fd", &fd.to_string()]);
    }
    args
}

/// `/proc` hardened the way runc and Docker do it: leak-prone files and
/// directories covered, then the whole procfs remounted read-only, so
/// `/proc/sys`, `/proc/sysrq-trigger`, `/proc/irq`, `/proc/bus` and every
/// process's files are read-only even for a unit that is root in its
/// namespace. (bwrap covers a few of these itself, but only when it can
/// write them, which it cannot as an unprivileged user.)
fn proc_masks(args: &mut Vec<OsString>) {
    for file in PROC_MASKED_FILES {
        if Path::new(file).exists() {
            push(args, &["--ro-bind", "/dev/null", file]);
        }
    }
    for dir in PROC_MASKED_DIRS {
        if Path::new(dir).is_dir() {
            push(args, &["--tmpfs", dir, "--remount-ro", dir]);
        }
    }
    push(args, &["--remount-ro", "/proc"]);
}

/// `--chdir`, the clean environment and the command after `--`.
pub(crate) fn unit_args(cwd: &str, env: &[(String, String)], argv: &[String]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--chdir".into(), cwd.into(), "--clearenv".into()];
    for (k, v) in env {
        args.extend(["--setenv".into(), k.into(), v.into()]);
    }
    args.push("--".into());
    args.extend(argv.iter().map(OsString::from));
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_has_no_host_etc_and_a_sized_tmp() {
        let shape = SandboxShape {
            tmp_bytes: Some(0),
            seccomp_fds: vec![4, 5],
            ..SandboxShape::default()
        };
        let args: Vec<String> = base_args(&shape)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let joined = args.join(" ");
        assert!(joined.contains("--unshare-all"));
        assert!(joined.contains("--size 4096 --tmpfs /tmp"), "{joined}");
        assert!(
            joined.contains(
                "--dev /dev --size 4096 --tmpfs /tmp --size 4096 --tmpfs /dev/shm --remount-ro /dev"
            ),
            "{joined}"
        );
        assert!(joined.contains("--add-seccomp-fd 4 --add-seccomp-fd 5"));
        assert!(
            !args
                .windows(2)
                .any(|w| w[0] == "--ro-bind" && w[1] == "/etc")
        );
        assert!(!joined.contains("shadow"));
        assert!(joined.contains("--proc /proc"), "{joined}");
        assert!(joined.contains("--remount-ro /proc --dev /dev"), "{joined}");
    }

    #[test]
    fn helpers_are_bound_by_descriptor() {
        let shape = SandboxShape {
            init_fd: Some(7),
            worker_fd: Some(8),
            ..SandboxShape::default()
        };
        let joined = base_args(&shape)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            joined.contains(&format!("--ro-bind-fd 7 {INIT_PATH}")),
            "{joined}"
        );
        assert!(
            joined.contains(&format!("--ro-bind-fd 8 {WORKER_PATH}")),
            "{joined}"
        );
    }

    #[test]
    fn unit_args_end_with_the_command() {
        let args = unit_args(
            "/tmp",
            &[("A".into(), "b c".into())],
            &["echo".into(), "--".into()],
        );
        let args: Vec<_> = args.into_iter().map(|a| a.into_string().unwrap()).collect();
        assert_eq!(
            args,
            [
                "--chdir",
                "/tmp",
                "--clearenv",
                "--setenv",
                "A",
                "b c",
                "--",
                "echo",
                "--"
            ]
        );
    }
}
