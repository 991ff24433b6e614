//! The seccomp filters handed to bubblewrap (`--add-seccomp-fd`): built
//! with `seccompiler`, serialized as raw BPF into a pipe.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::OwnedFd;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// The shared deny-list ([`super::DENIED`]).
pub use super::DENIED;

/// The namespace flags `clone` may not carry.
const CLONE_NS_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// Errors building a filter.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// `seccompiler` refused the filter or the architecture.
    #[error("seccomp filter: {0}")]
    Build(String),
    /// The pipe to bubblewrap failed.
    #[error("seccomp pipe: {0}")]
    Io(#[from] std::io::Error),
}

fn arch() -> Result<TargetArch, SeccompError> {
    std::env::consts::ARCH
        .try_into()
        .map_err(|e| SeccompError::Build(format!("{e:?}")))
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value)
        .map_err(|e| SeccompError::Build(e.to_string()))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SeccompError> {
    SeccompRule::new(conditions).map_err(|e| SeccompError::Build(e.to_string()))
}

/// The main filter: on x86_64, every x32 system call (number with bit 30
/// set, which no rule below would match) fails with `ENOSYS`; [`DENIED`]
/// and namespace-creating `clone` flags and `personality` changes (other
/// than the query `0xffffffff` and `0`) fail with `EPERM`; everything else
/// is allowed.
pub fn deny_filter() -> Result<BpfProgram, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in DENIED {
        rules.insert(*nr, Vec::new());
    }
    let clone_rules = CLONE_NS_FLAGS
        .iter()
        .map(|f| rule(vec![cond(0, SeccompCmpOp::MaskedEq(*f as u64), *f as u64)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    rules.insert(
        libc::SYS_personality,
        vec![rule(vec![
            cond(0, SeccompCmpOp::Ne, 0)?,
            cond(0, SeccompCmpOp::Ne, 0xffff_ffff)?,
        ])?],
    );
    let mut program = x32_prefix();
    program.extend(compile(rules, SeccompAction::Errno(libc::EPERM as u32))?);
    Ok(program)
}

/// The x32 system-call number bit (`__X32_SYSCALL_BIT`).
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// BPF_LD | BPF_W | BPF_ABS, BPF_JMP | BPF_JEQ | BPF_K, BPF_JMP | BPF_JGE | BPF_K, BPF_RET | BPF_K.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JGE_K: u16 = 0x05 | 0x30;
const BPF_RET_K: u16 = 0x06;
/// `offsetof(struct seccomp_data, nr)` and `arch`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Instructions run before the compiled filter. On x86_64: if the arch is
/// x86_64 and the number has [`X32_SYSCALL_BIT`], return `ENOSYS`;
/// otherwise fall through to the compiled filter (which checks the arch
/// again). Empty elsewhere.
fn x32_prefix() -> Vec<sock_filter> {
    if std::env::consts::ARCH != "x86_64" {
        return Vec::new();
    }
    // EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    vec![
        insn(BPF_LD_W_ABS, 0, 0, DATA_ARCH),
        insn(BPF_JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        insn(BPF_LD_W_ABS, 0, 0, DATA_NR),
        insn(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT),
        insn(
            BPF_RET_K,
            0,
            0,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        ),
    ]
}

/// `clone3` fails with `ENOSYS`: its flags live in memory seccomp cannot
/// inspect, and libc falls back to `clone`, which the main filter checks.
pub fn clone3_filter() -> Result<BpfProgram, SeccompError> {
    let mut rules = BTreeMap::new();
    rules.insert(libc::SYS_clone3, Vec::new());
    compile(rules, SeccompAction::Errno(libc::ENOSYS as u32))
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
) -> Result<BpfProgram, SeccompError> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, arch()?)
        .map_err(|e| SeccompError::Build(e.to_string()))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| SeccompError::Build(e.to_string()))
}

/// The program as raw `sock_filter` bytes, as bubblewrap reads them.
pub fn to_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for insn in program {
        bytes.extend_from_slice(&insn.code.to_ne_bytes());
        bytes.push(insn.jt);
        bytes.push(insn.jf);
        bytes.extend_from_slice(&insn.k.to_ne_bytes());
    }
    bytes
}

/// A pipe's read end holding `bytes` (at most the pipe buffer, 64 KiB),
/// write end closed, for bubblewrap to read.
pub fn pipe_with(bytes: &[u8]) -> Result<OwnedFd, SeccompError> {
    if bytes.len() > 60 * 1024 {
        return Err(SeccompError::Build(format!(
            "program of {} bytes does not fit a pipe",
            bytes.len()
        )));
    }
    let (read, write) = std::io::pipe()?;
    let mut write = write;
    write.write_all(bytes)?;
    drop(write);
    Ok(read.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `program` on a system call the way the kernel does, for the
    /// instructions seccompiler and [`x32_prefix`] emit.
    fn run(program: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u32; 16];
        data[0] = nr;
        data[1] = arch;
        for (i, a) in args.iter().enumerate() {
            data[4 + 2 * i] = *a as u32;
            data[5 + 2 * i] = (*a >> 32) as u32;
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let i = &program[pc];
            pc += 1;
            let class = i.code & 0x07;
            match class {
                0x00 => acc = data[i.k as usize / 4],
                0x04 if i.code & 0xf0 == 0x50 => acc &= i.k,
                0x05 => {
                    let taken = match i.code & 0xf0 {
                        0x00 => {
                            pc += i.k as usize;
                            continue;
                        }
                        0x10 => acc == i.k,
                        0x20 => acc > i.k,
                        0x30 => acc >= i.k,
                        0x40 => acc & i.k != 0,
                        op => panic!("jump op {op:#x}"),
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                0x06 => return i.k,
                _ => panic!("instruction {:#x}", i.code),
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_calls_are_enosys_and_native_rules_still_apply() {
        const ARCH: u32 = 62 | 0x8000_0000 | 0x4000_0000;
        let deny = deny_filter().unwrap();
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let x32 = |nr: i64| X32_SYSCALL_BIT | nr as u32;
        // x32 numbers of denied and allowed calls: all refused.
        assert_eq!(run(&deny, ARCH, x32(libc::SYS_unshare), [0; 6]), enosys);
        assert_eq!(run(&deny, ARCH, x32(libc::SYS_ptrace), [0; 6]), enosys);
        assert_eq!(run(&deny, ARCH, x32(libc::SYS_getpid), [0; 6]), enosys);
        assert_eq!(run(&deny, ARCH, u32::MAX, [0; 6]), enosys);
        // Native calls as before.
        assert_eq!(run(&deny, ARCH, libc::SYS_unshare as u32, [0; 6]), eperm);
        assert_eq!(
            run(&deny, ARCH, libc::SYS_getpid as u32, [0; 6]),
            libc::SECCOMP_RET_ALLOW
        );
        let newuser = libc::CLONE_NEWUSER as u64;
        assert_eq!(
            run(
                &deny,
                ARCH,
                libc::SYS_clone as u32,
                [newuser, 0, 0, 0, 0, 0]
            ),
            eperm
        );
        assert_eq!(
            run(&deny, ARCH, libc::SYS_clone as u32, [0x11, 0, 0, 0, 0, 0]),
            libc::SECCOMP_RET_ALLOW
        );
        // Another arch (i386) still meets seccompiler's kill.
        assert_eq!(
            run(&deny, 3 | 0x4000_0000, 1, [0; 6]),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }

    #[test]
    fn filters_compile_for_this_arch() {
        let deny = deny_filter().unwrap();
        assert!(deny.len() > DENIED.len());
        assert_eq!(to_bytes(&deny).len(), deny.len() * 8);
        let clone3 = clone3_filter().unwrap();
        assert!(!clone3.is_empty());
        let fd = pipe_with(&to_bytes(&clone3)).unwrap();
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut back).unwrap();
        assert_eq!(back, to_bytes(&clone3));
    }
}
