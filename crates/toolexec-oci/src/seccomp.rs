//! The seccomp profile put in every container's spec: everything allowed
//! but the deny-list every sandbox runtime shares
//! ([`toolexec_sandbox::seccomp::DENIED`]), which fails with
//! `EPERM`, plus the namespace-creating `clone`/`clone3` rules of OCI.
//!
//! The spec names system calls; the runtime maps names to numbers and
//! skips, without failing the container, a name it does not know. Under
//! runc such a call stays allowed (measured, runc 1.1.5 on libseccomp
//! 2.5.4: `statmount`, `listmount` and `open_tree_attr` reach the
//! kernel). Under runsc (release 20221219) the names it lacks
//! (`pidfd_getfd`, `mount_setattr`, `statmount`, `listmount`,
//! `open_tree_attr`) are calls its kernel does not implement either: they
//! fail with `ENOSYS`.

use serde_json::{Value, json};
use toolexec_sandbox::seccomp;

use crate::config::OciFlavor;

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
        json!({"names": seccomp::denied_names().collect::<Vec<_>>(),
             "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM}),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The profile denies exactly the shared list, whatever the flavor.
    #[test]
    fn profile_denies_the_shared_list() {
        for flavor in [OciFlavor::Runc, OciFlavor::Runsc] {
            let profile = profile(flavor);
            let names: Vec<&str> = profile["syscalls"][0]["names"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap())
                .collect();
            assert_eq!(names, seccomp::denied_names().collect::<Vec<_>>());
            assert_eq!(profile["syscalls"][0]["errnoRet"], EPERM);
        }
    }
}
