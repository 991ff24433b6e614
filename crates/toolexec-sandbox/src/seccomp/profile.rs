//! The shared deny-list rendered as a libseccomp JSON profile: the
//! `linux.seccomp` object of an OCI runtime spec (runc, runsc) and, in the
//! same format, the profile Docker takes as `--security-opt seccomp=`.
//! Everything is allowed but [`super::DENIED`], which fails with `EPERM`,
//! plus the namespace-creating `clone`/`clone3` rules.
//!
//! The profile names system calls; the runtime maps names to numbers and
//! skips, without failing the container, a name it does not know. Under
//! runc such a call stays allowed (measured, runc 1.1.5 on libseccomp
//! 2.5.4: `statmount`, `listmount` and `open_tree_attr` reach the
//! kernel). Under runsc (release 20221219) the names it lacks
//! (`pidfd_getfd`, `mount_setattr`, `statmount`, `listmount`,
//! `open_tree_attr`) are calls its kernel does not implement either: they
//! fail with `ENOSYS`.

use serde_json::{Value, json};

const CLONE_NEWUSER: u64 = 0x1000_0000;
const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

/// How `clone3` is filtered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clone3 {
    /// `ENOSYS`: its flags are in memory seccomp cannot read, so libc falls
    /// back to `clone`, where `CLONE_NEWUSER` is checked (runc, Docker).
    Enosys,
    /// No rule. runsc applies the profile in its own kernel and (release
    /// 20221219, measured) answers `clone3` with `EPERM` whatever
    /// `errnoRet` says, which breaks every thread start; there gVisor's
    /// `clone3` is what the unit gets (user namespaces stay inside the
    /// sandbox kernel).
    Unfiltered,
}

/// The profile: default allow, the deny-list as `EPERM`, `clone` with
/// `CLONE_NEWUSER` as `EPERM`, `clone3` as `clone3` says, for the native
/// ABI and the compat ABIs the kernel also accepts.
pub fn libseccomp_json(clone3: Clone3) -> Value {
    let mut rules = vec![
        json!({"names": super::denied_names().collect::<Vec<_>>(),
             "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM}),
        json!({"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
             "args": [{"index": 0, "value": CLONE_NEWUSER, "valueTwo": CLONE_NEWUSER, "op": "SCMP_CMP_MASKED_EQ"}]}),
    ];
    if clone3 == Clone3::Enosys {
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

    /// The profile denies exactly the shared list, whatever the clone3 rule.
    #[test]
    fn profile_denies_the_shared_list() {
        for clone3 in [Clone3::Enosys, Clone3::Unfiltered] {
            let profile = libseccomp_json(clone3);
            let names: Vec<&str> = profile["syscalls"][0]["names"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap())
                .collect();
            assert_eq!(names, super::super::denied_names().collect::<Vec<_>>());
            assert_eq!(profile["syscalls"][0]["errnoRet"], EPERM);
            let clone3_rules = profile["syscalls"].as_array().unwrap().len() - 2;
            assert_eq!(clone3_rules, usize::from(clone3 == Clone3::Enosys));
        }
    }
}
