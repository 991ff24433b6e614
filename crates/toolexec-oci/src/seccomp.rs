//! The seccomp profile put in every container's spec: everything allowed
//! but a deny-list of kernel attack surface and escape tools, which fail
//! with `EPERM`.

use serde_json::{Value, json};

use crate::config::OciFlavor;

/// Syscalls no unit needs: namespace and mount games, tracing, kernel
/// modules and kexec, BPF and perf, keyrings, userfaultfd, io_uring,
/// cross-process memory access, clock and system administration.
pub const DENIED_SYSCALLS: &[&str] = &[
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "quotactl",
    "iopl",
    "ioperm",
    "vhangup",
];

const CLONE_NEWUSER: u64 = 0x1000_0000;
const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

/// The `linux.seccomp` object of the spec.
///
/// runc: clone3 answers ENOSYS (its flags are in memory seccomp cannot
/// read), so libc falls back to clone, where CLONE_NEWUSER is checked.
/// runsc applies the profile in its own kernel and (this version, measured)
/// answers clone3 with EPERM whatever `errnoRet` says, which breaks every
/// thread start; there the rule is left out and gVisor's clone3 is what
/// the unit gets (user namespaces stay inside the sandbox kernel).
pub(crate) fn profile(flavor: OciFlavor) -> Value {
    let mut rules = vec![
        json!({"names": DENIED_SYSCALLS, "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM}),
        json!({"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
             "args": [{"index": 0, "value": CLONE_NEWUSER, "valueTwo": CLONE_NEWUSER, "op": "SCMP_CMP_MASKED_EQ"}]}),
    ];
    if flavor == OciFlavor::Runc {
        rules.push(json!({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS}));
    }
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": architectures(),
        "syscalls": rules,
    })
}

/// The ABIs the filter covers: the native one and the compat ABIs the
/// kernel also accepts, so 32-bit syscall numbers are no way around it.
fn architectures() -> Vec<&'static str> {
    if cfg!(target_arch = "x86_64") {
        vec!["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    } else if cfg!(target_arch = "aarch64") {
        vec!["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]
    } else {
        Vec::new()
    }
}
