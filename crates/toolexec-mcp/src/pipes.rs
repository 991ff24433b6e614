//! Pipe buffers widened for large messages. A pipe holds 64 KiB by default,
//! so a 1 MiB message crosses it in sixteen hand-offs between its writer
//! and its reader; a gateway in the middle pays them twice (upstream to
//! gateway, gateway to client). A pipe that carried one large message is
//! widened to [`WIDE`], so that the next crosses it in one write.
//!
//! Each wide pipe counts 256 pages against its user's pipe budget
//! (`/proc/sys/fs/pipe-user-pages-soft`, 16,384 pages by default; past it
//! Linux gives that user's new pipes two pages), which is why only pipes
//! that carried a large message are widened, not every pipe at spawn.

use std::os::fd::RawFd;

/// What a pipe is widened to: Linux's ceiling for a process without
/// `CAP_SYS_RESOURCE` (`/proc/sys/fs/pipe-max-size`, 1 MiB by default).
#[cfg(target_os = "linux")]
const WIDE: libc::c_int = 1 << 20;

/// A pipe to widen the first time a large message crosses it.
#[derive(Debug, Default)]
pub(crate) struct Widen {
    /// Until widened. The owner of the widener keeps the pipe open.
    fd: Option<RawFd>,
}

impl Widen {
    /// The pipe `fd`, which the widener's owner holds open.
    pub(crate) fn pipe(fd: RawFd) -> Self {
        Widen { fd: Some(fd) }
    }

    /// Widens the pipe, the first time only. Best effort: a file that is
    /// not a pipe, a user over its pipe budget, or a system other than
    /// Linux keeps its size.
    pub(crate) fn once(&mut self) {
        let Some(fd) = self.fd.take() else {
            return;
        };
        #[cfg(target_os = "linux")]
        {
            // SAFETY: `fd` is open (see `pipe`); F_SETPIPE_SZ only resizes
            // the pipe's buffer, or fails.
            let size = unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, WIDE) };
            tracing::debug!(fd, size, "widened a pipe that carried a large message");
        }
        #[cfg(not(target_os = "linux"))]
        let _ = fd;
    }
}
