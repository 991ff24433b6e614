//! Pipe buffers widened for large messages. A pipe holds 64 KiB by default,
//! so a 1 MiB message crosses it in sixteen hand-offs between its writer
//! and its reader; a gateway in the middle pays them twice (upstream to
//! gateway, gateway to client). A pipe that carried a large message is
//! widened to fit the largest so far (a power of two, at most [`WIDE`]),
//! so that the next crosses it in one write.
//!
//! Each page of a pipe counts against its user's pipe budget
//! (`/proc/sys/fs/pipe-user-pages-soft`, 16,384 pages by default; past it
//! Linux gives that user's new pipes two pages, in every program). So only
//! pipes that carried a large message are widened, one process widens its
//! pipes by at most [`BUDGET_PAGES`] in all, and after the first refusal
//! it stops trying.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The widest a pipe is made: Linux's ceiling for a process without
/// `CAP_SYS_RESOURCE` (`/proc/sys/fs/pipe-max-size`, 1 MiB by default).
const WIDE: usize = 1 << 20;
/// A pipe's size before it is widened (Linux's default).
const DEFAULT: usize = 64 * 1024;
/// The most pages this process adds to its pipes, over all of them: a
/// quarter of the default per-user budget.
const BUDGET_PAGES: usize = 4096;
const PAGE: usize = 4096;

/// Pages added to this process's pipes so far.
static SPENT: AtomicUsize = AtomicUsize::new(0);
/// Set once the kernel refused: no further attempts.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// A pipe to widen when large messages cross it.
#[derive(Debug, Default)]
pub(crate) struct Widen {
    /// `None` when not a pipe this may widen. Its owner keeps it open.
    fd: Option<RawFd>,
    /// Its size as far as known.
    size: usize,
}

impl Widen {
    /// The pipe `fd`, which the widener's owner holds open for as long as
    /// it holds the widener; nothing, if `fd` is not a pipe.
    pub(crate) fn pipe(fd: RawFd) -> Self {
        Widen {
            fd: is_fifo(fd).then_some(fd),
            size: DEFAULT,
        }
    }

    /// A message of `len` bytes crossed the pipe: widens it to fit the
    /// next such message whole, when it does not yet. Best effort: over
    /// this process's share of the budget, once the kernel refused, or on
    /// a system other than Linux, the pipe keeps its size.
    pub(crate) fn fit(&mut self, len: usize) {
        let Some(fd) = self.fd else {
            return;
        };
        let want = len.next_power_of_two().min(WIDE);
        if want <= self.size || REFUSED.load(Ordering::Relaxed) {
            return;
        }
        let pages = (want - self.size) / PAGE;
        if SPENT.fetch_add(pages, Ordering::Relaxed) + pages > BUDGET_PAGES {
            SPENT.fetch_sub(pages, Ordering::Relaxed);
            return;
        }
        match set_size(fd, want) {
            Ok(size) => {
                tracing::debug!(fd, size, "widened a pipe that carried a large message");
                self.size = size;
            }
            Err(e) => {
                SPENT.fetch_sub(pages, Ordering::Relaxed);
                REFUSED.store(true, Ordering::Relaxed);
                tracing::debug!(fd, error = %e, "a pipe could not be widened; not trying again");
                self.fd = None;
            }
        }
    }
}

#[cfg(target_os = "linux")]
fn set_size(fd: RawFd, size: usize) -> std::io::Result<usize> {
    let size = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fd` is open (see `Widen::pipe`); F_SETPIPE_SZ only resizes
    // the pipe's buffer, or fails.
    let set = unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, size) };
    usize::try_from(set).map_err(|_| std::io::Error::last_os_error())
}

#[cfg(not(target_os = "linux"))]
fn set_size(_: RawFd, _: usize) -> std::io::Result<usize> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// Whether `fd` is an open pipe (FIFO).
fn is_fifo(fd: RawFd) -> bool {
    // SAFETY: fstat writes into `stat` only, and fails on a closed fd.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::fstat(fd, &mut stat) } == 0;
    ok && (stat.st_mode & libc::S_IFMT) == libc::S_IFIFO
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// Only a pipe is ever widened: a device or a file is left alone.
    #[test]
    fn only_pipes_are_widened() {
        let (rx, tx) = std::io::pipe().unwrap();
        assert!(Widen::pipe(rx.as_raw_fd()).fd.is_some());
        assert!(Widen::pipe(tx.as_raw_fd()).fd.is_some());
        let null = std::fs::File::open("/dev/null").unwrap();
        assert!(Widen::pipe(null.as_raw_fd()).fd.is_none());
        let file = std::fs::File::open(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
        assert!(Widen::pipe(file.as_raw_fd()).fd.is_none());
        assert!(Widen::pipe(-1).fd.is_none());
    }
}
