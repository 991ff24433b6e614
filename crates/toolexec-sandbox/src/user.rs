//! The unprivileged host identity a sandboxed process takes before exec.

/// An unprivileged host identity for sandboxed processes: supplementary
/// groups cleared, then real, effective and saved gid and uid set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxUser {
    /// Host user id (never 0).
    pub uid: u32,
    /// Host group id (never 0).
    pub gid: u32,
}

impl SandboxUser {
    /// `nobody:nogroup` (65534), the default.
    pub const NOBODY: SandboxUser = SandboxUser {
        uid: 65534,
        gid: 65534,
    };
}

/// Takes `user`'s identity in a forked child before exec: groups, gid,
/// uid (in that order, so each step still has the privilege it needs),
/// then checks that no id is 0 any more.
///
/// # Safety
/// Only between fork and exec (async-signal-safe syscalls only).
pub(crate) unsafe fn become_user(user: SandboxUser) -> std::io::Result<()> {
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: plain syscalls; the caller guarantees the fork context.
    unsafe {
        check(libc::setgroups(0, std::ptr::null()))?;
        check(libc::setresgid(user.gid, user.gid, user.gid))?;
        check(libc::setresuid(user.uid, user.uid, user.uid))?;
        let (mut r, mut e, mut s) = (0, 0, 0);
        check(libc::getresuid(&mut r, &mut e, &mut s))?;
        if r == 0 || e == 0 || s == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EPERM));
        }
    }
    Ok(())
}
