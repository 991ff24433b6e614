//! Host identities for sandboxes when toolexec is root: each sandbox gets
//! a uid (and the same gid) of its own from a reserved range, leased with
//! an exclusive lock file so no two live sandboxes, of this process or of
//! another toolexec on the host, ever share one.
//!
//! A shared identity would let anything else running as it (the host's
//! `nobody`, another sandbox) ptrace, signal or steal descriptors from a
//! sandbox's processes, and share its per-user kernel counters (inotify
//! instances, processes).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use toolexec_sandbox::SandboxUser;
use toolexec_sandbox::channel_socket::private_dir;

/// A range of host uids (and gids, the same numbers) reserved for
/// sandboxes. No account or service on the host may use them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UidRange {
    /// The first uid.
    pub first: u32,
    /// How many.
    pub count: u32,
    /// Where the lease locks live (a private root directory).
    pub lock_dir: PathBuf,
}

impl Default for UidRange {
    /// 65,536 ids from 2,147,000,000: above every range distributions,
    /// systemd or `/etc/subuid` hand out by default, below 2^31 for tools
    /// that read ids as signed.
    fn default() -> Self {
        UidRange {
            first: 2_147_000_000,
            count: 65_536,
            lock_dir: "/run/toolexec/bwrap-uids".into(),
        }
    }
}

impl UidRange {
    /// Checks the range: not empty, no overflow, never uid 0 and never
    /// the shared `nobody` (65534).
    /// The error is `invalid_request` naming `bubblewrap.users`.
    pub fn check(&self) -> Result<(), toolexec::Error> {
        let bad = |message: String| toolexec::Error::invalid_request("bubblewrap.users", message);
        let last = self
            .first
            .checked_add(self.count.saturating_sub(1))
            .filter(|_| self.count > 0)
            .ok_or_else(|| {
                bad(format!(
                    "sandbox uid range {}+{} is empty or overflows",
                    self.first, self.count
                ))
            })?;
        for (id, what) in [(0, "root"), (SandboxUser::NOBODY.uid, "the shared nobody")] {
            if (self.first..=last).contains(&id) {
                return Err(bad(format!(
                    "sandbox uid range {}..={last} contains {id} ({what}); units never run as host uid 0 or a shared user",
                    self.first
                )));
            }
        }
        Ok(())
    }

    /// The last uid of the range.
    pub fn last(&self) -> u32 {
        self.first + (self.count - 1)
    }

    /// A free identity, held until the [`Lease`] is dropped: the lowest
    /// uid whose lock file nobody holds.
    pub fn lease(&self) -> Result<Lease, String> {
        private_dir(&self.lock_dir).map_err(|e| e.to_string())?;
        for uid in self.first..=self.last() {
            if let Some(lock) = try_lock(&self.lock_dir, uid)? {
                return Ok(Lease {
                    user: SandboxUser { uid, gid: uid },
                    _lock: lock,
                });
            }
        }
        Err(format!(
            "all {} sandbox uids from {} are in use",
            self.count, self.first
        ))
    }
}

fn try_lock(dir: &Path, uid: u32) -> Result<Option<File>, String> {
    let path = dir.join(format!("{uid}.lock"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| format!("sandbox uid lock {}: {e}", path.display()))?;
    // SAFETY: plain syscall on a descriptor we own.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(Some(file));
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(None)
    } else {
        Err(format!("sandbox uid lock {}: {err}", path.display()))
    }
}

/// An identity in use by one sandbox; freed on drop.
#[derive(Debug)]
pub struct Lease {
    /// The identity.
    pub user: SandboxUser,
    _lock: File,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(dir: &Path) -> UidRange {
        UidRange {
            first: 3_000_000_000,
            count: 3,
            lock_dir: dir.to_path_buf(),
        }
    }

    #[test]
    fn leases_are_exclusive_and_freed_on_drop() {
        let dir = std::env::temp_dir().join(format!("toolexec-uids-{}", std::process::id()));
        let r = range(&dir);
        let a = r.lease().unwrap();
        let b = r.lease().unwrap();
        let c = r.lease().unwrap();
        let mut uids = vec![a.user.uid, b.user.uid, c.user.uid];
        uids.dedup();
        assert_eq!(uids, [3_000_000_000, 3_000_000_001, 3_000_000_002]);
        assert!(r.lease().unwrap_err().contains("in use"));
        drop(b);
        assert_eq!(r.lease().unwrap().user.uid, 3_000_000_001);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn ranges_with_root_or_nobody_are_refused() {
        let dir = PathBuf::from("/nonexistent");
        let bad = |first, count| UidRange {
            first,
            count,
            lock_dir: dir.clone(),
        };
        assert!(bad(0, 10).check().unwrap_err().to_string().contains("root"));
        assert!(
            bad(65_000, 1000)
                .check()
                .unwrap_err()
                .to_string()
                .contains("nobody")
        );
        assert!(bad(u32::MAX, 2).check().is_err());
        assert!(bad(100_000, 0).check().is_err());
        assert!(UidRange::default().check().is_ok());
    }
}
