//! The one seccomp deny-list every sandbox runtime uses: [`bpf`] compiles
//! it to the filter handed to bubblewrap, [`profile`] renders it for the
//! OCI runtimes' `linux.seccomp` and Docker's `--security-opt seccomp=`.
//! A system call added here is denied everywhere.

pub mod bpf;
pub mod profile;

/// The system calls denied with `EPERM` unconditionally, by name and
/// number on this architecture: debugging and inspecting other processes,
/// mounts (old and new API, including `listmount`/`statmount`), new
/// namespaces, kernel modules and kexec, BPF and perf, the keyring,
/// cross-process memory and descriptor access, userfaultfd, handle opens,
/// swap, reboot, the kernel log, accounting, quotas, io_uring, the system
/// clock, fanotify, terminal hangup, and on x86 the I/O ports and LDT.
/// (`clone`/`clone3` with namespace flags are filtered by argument, per
/// runtime.)
pub const DENIED: &[(&str, i64)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("kcmp", libc::SYS_kcmp),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("fsopen", libc::SYS_fsopen),
    ("fsmount", libc::SYS_fsmount),
    ("fsconfig", libc::SYS_fsconfig),
    ("fspick", libc::SYS_fspick),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("open_tree_attr", SYS_OPEN_TREE_ATTR),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("statmount", SYS_STATMOUNT),
    ("listmount", SYS_LISTMOUNT),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("syslog", libc::SYS_syslog),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("settimeofday", libc::SYS_settimeofday),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("vhangup", libc::SYS_vhangup),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    #[cfg(target_arch = "x86_64")]
    ("iopl", libc::SYS_iopl),
    #[cfg(target_arch = "x86_64")]
    ("ioperm", libc::SYS_ioperm),
    #[cfg(target_arch = "x86_64")]
    ("modify_ldt", libc::SYS_modify_ldt),
    #[cfg(target_arch = "x86_64")]
    ("uselib", libc::SYS_uselib),
];

// Newer than the `libc` constants; numbers from 424 on are the same on
// every architecture.
const SYS_STATMOUNT: i64 = 457;
const SYS_LISTMOUNT: i64 = 458;
const SYS_OPEN_TREE_ATTR: i64 = 467;

/// The names of [`DENIED`], for runtimes that take names (OCI).
pub fn denied_names() -> impl Iterator<Item = &'static str> {
    DENIED.iter().map(|(name, _)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_are_unique() {
        let mut names: Vec<_> = denied_names().collect();
        let mut numbers: Vec<_> = DENIED.iter().map(|(_, nr)| *nr).collect();
        names.sort_unstable();
        numbers.sort_unstable();
        let (n, m) = (names.len(), numbers.len());
        names.dedup();
        numbers.dedup();
        assert_eq!((names.len(), numbers.len()), (n, m));
    }
}
