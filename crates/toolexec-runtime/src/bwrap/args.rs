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

/// The sandbox's shape, independent of the unit.
#[derive(Debug, Clone, Default)]
pub struct SandboxShape<'a> {
    /// Host path of the init helper, bound at [`INIT_PATH`].
    pub init: Option<&'a Path>,
    /// Host path of the script worker, bound at [`WORKER_PATH`].
    pub worker: Option<&'a Path>,
    /// Size of `/tmp` in bytes.
    pub tmp_bytes: Option<u64>,
    /// Descriptors holding seccomp programs.
    pub seccomp_fds: Vec<i32>,
}

fn push(args: &mut Vec<OsString>, items: &[&str]) {
    args.extend(items.iter().map(OsString::from));
}

/// Everything before the environment and the command.
pub fn base_args(shape: &SandboxShape<'_>) -> Vec<OsString> {
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
    push(&mut args, &["--proc", "/proc", "--dev", "/dev"]);
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
    if let Some(init) = shape.init {
        args.extend(["--ro-bind".into(), init.into(), INIT_PATH.into()]);
    }
    if let Some(worker) = shape.worker {
        args.extend(["--ro-bind".into(), worker.into(), WORKER_PATH.into()]);
    }
    // The root tmpfs bwrap builds stays read-only; /tmp is its own mount.
    push(&mut args, &["--remount-ro", "/"]);
    for fd in &shape.seccomp_fds {
        push(&mut args, &["--add-seccomp-fd", &fd.to_string()]);
    }
    args
}

/// `--chdir`, the clean environment and the command after `--`.
pub fn unit_args(cwd: &str, env: &[(String, String)], argv: &[String]) -> Vec<OsString> {
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
