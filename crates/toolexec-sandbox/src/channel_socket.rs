//! Host-side plumbing the container runtimes (OCI, Docker) share for the
//! channel socket and their run state: private directories that no other
//! local user can create first, swap or write into, and one policy for who
//! may connect to a channel socket.
//!
//! A directory is private when it is a real directory (not a symlink),
//! owned by this process's effective uid and closed to group and others,
//! and every directory above it is owned by root or this uid and writable
//! by no one else (or sticky, like `/tmp`, where the next component is
//! then ours): nobody else can rename it away or plant a symlink in its
//! path.
//!
//! ```
//! use toolexec_sandbox::channel_socket::{PeerPolicy, private_dir};
//!
//! let dir = std::env::temp_dir().join(format!("doc-private-{}", std::process::id()));
//! private_dir(&dir.join("state")).unwrap();
//! let policy = PeerPolicy::current_user();
//! assert_eq!(policy.served_uid(), toolexec_sandbox::channel_socket::euid());
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};

/// How many symlinks a checked path may pass through.
const MAX_SYMLINKS: usize = 8;

/// A directory that is not (or cannot be made) private. The path is the
/// offending one: the directory itself or one of its ancestors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct UnsafeDir {
    /// The offending path.
    pub path: PathBuf,
    /// What is wrong with it.
    pub message: String,
}

impl UnsafeDir {
    fn new(path: &Path, message: impl Into<String>) -> Self {
        UnsafeDir {
            path: path.to_owned(),
            message: message.into(),
        }
    }
}

/// This process's effective uid.
pub fn euid() -> u32 {
    // SAFETY: plain syscall without arguments.
    unsafe { libc::geteuid() }
}

/// Creates `path` (mode 0700, with any missing parents 0700) unless it
/// exists, then checks it is private (see the module docs): a directory
/// of ours that is merely readable by others is tightened to 0700; one
/// that is a symlink, owned by another uid, writable by others, or below
/// a directory someone else controls is refused.
pub fn private_dir(path: &Path) -> Result<(), UnsafeDir> {
    if !path.is_absolute() {
        return Err(UnsafeDir::new(path, "must be an absolute path"));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(UnsafeDir::new(path, "must not contain '.' or '..'"));
    }
    let Some(parent) = path.parent() else {
        return Err(UnsafeDir::new(path, "the root directory is never private"));
    };
    trusted_ancestors(parent, 0)?;
    let me = euid();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            create(path)?;
            lstat(path)?
        }
        Err(e) => return Err(UnsafeDir::new(path, e.to_string())),
    };
    if meta.file_type().is_symlink() {
        return Err(UnsafeDir::new(path, "is a symlink, not a directory"));
    }
    if !meta.is_dir() {
        return Err(UnsafeDir::new(path, "is not a directory"));
    }
    if meta.uid() != me {
        return Err(UnsafeDir::new(
            path,
            format!(
                "owned by uid {}, not by this process's uid {me}",
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(UnsafeDir::new(
            path,
            format!("mode {mode:04o} lets other users write into it"),
        ));
    }
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| UnsafeDir::new(path, e.to_string()))?;
    }
    Ok(())
}

/// Creates the missing directories down to `path`, each 0700.
fn create(path: &Path) -> Result<(), UnsafeDir> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| UnsafeDir::new(path, format!("cannot create: {e}")))?;
    // Parents created just now passed no check yet.
    trusted_ancestors(path.parent().unwrap_or(Path::new("/")), 0)
}

fn lstat(path: &Path) -> Result<std::fs::Metadata, UnsafeDir> {
    std::fs::symlink_metadata(path).map_err(|e| UnsafeDir::new(path, e.to_string()))
}

/// Checks that `dir` and every directory above it can be changed only by
/// root or this uid. Missing components end the walk (the caller creates
/// them as this uid). Symlinks are followed when root or this uid owns
/// them, and their target is checked the same way.
fn trusted_ancestors(dir: &Path, links: usize) -> Result<(), UnsafeDir> {
    let me = euid();
    let mut current = PathBuf::from("/");
    trusted(&current, &lstat(&current)?, me)?;
    for component in dir.components().skip(1) {
        let Component::Normal(name) = component else {
            return Err(UnsafeDir::new(dir, "must be a plain absolute path"));
        };
        current.push(name);
        let meta = match std::fs::symlink_metadata(&current) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(UnsafeDir::new(&current, e.to_string())),
        };
        if meta.file_type().is_symlink() {
            if meta.uid() != 0 && meta.uid() != me {
                return Err(UnsafeDir::new(
                    &current,
                    format!("a symlink owned by uid {}", meta.uid()),
                ));
            }
            if links >= MAX_SYMLINKS {
                return Err(UnsafeDir::new(&current, "too many levels of symlinks"));
            }
            let target = std::fs::canonicalize(&current)
                .map_err(|e| UnsafeDir::new(&current, e.to_string()))?;
            trusted_ancestors(&target, links + 1)?;
            current = target;
            continue;
        }
        trusted(&current, &meta, me)?;
    }
    Ok(())
}

/// A directory only root or `me` can change entries of.
fn trusted(path: &Path, meta: &std::fs::Metadata, me: u32) -> Result<(), UnsafeDir> {
    if !meta.is_dir() {
        return Err(UnsafeDir::new(path, "is not a directory"));
    }
    if meta.uid() != 0 && meta.uid() != me {
        return Err(UnsafeDir::new(
            path,
            format!(
                "owned by uid {}, neither root nor this process's uid {me}",
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode();
    // Sticky (like /tmp): others cannot rename or remove our entries.
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(UnsafeDir::new(
            path,
            format!(
                "mode {:04o} lets other users replace its entries",
                mode & 0o7777
            ),
        ));
    }
    Ok(())
}

/// Who may connect to a channel socket: the kernel's record of the
/// connecting process (`SO_PEERCRED`, taken at `connect`), never anything
/// the peer says. One uid is served: the unit's (Docker, where the unit
/// connects itself) or this process's (runsc, whose gofer connects on the
/// unit's behalf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerPolicy {
    uid: u32,
}

/// A connection [`PeerPolicy`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerRefused {
    /// The peer runs as another uid.
    #[error(
        "channel connection from uid {uid} (pid {pid:?}) refused: only uid {expected} is served"
    )]
    ForeignUid {
        /// The peer's uid.
        uid: u32,
        /// The peer's pid, when the kernel knows it in this namespace.
        pid: Option<i32>,
        /// The uid served.
        expected: u32,
    },
    /// The kernel gave no credentials.
    #[error("channel connection without peer credentials refused: {0}")]
    NoCredentials(String),
}

impl PeerPolicy {
    /// Serves peers running as `uid` (a host uid).
    pub const fn uid(uid: u32) -> Self {
        PeerPolicy { uid }
    }

    /// Serves peers running as this process's effective uid.
    pub fn current_user() -> Self {
        PeerPolicy { uid: euid() }
    }

    /// The uid served.
    pub const fn served_uid(&self) -> u32 {
        self.uid
    }

    /// Whether `stream`'s peer may be served.
    pub fn admit(&self, stream: &UnixStream) -> Result<(), PeerRefused> {
        let cred = stream
            .peer_cred()
            .map_err(|e| PeerRefused::NoCredentials(e.to_string()))?;
        if cred.uid() == self.uid {
            Ok(())
        } else {
            Err(PeerRefused::ForeignUid {
                uid: cred.uid(),
                pid: cred.pid(),
                expected: self.uid,
            })
        }
    }

    /// Accepts the next connection this policy admits; refused ones are
    /// closed unserved and logged. Cancel-safe: the only await is the
    /// listener's `accept`.
    pub async fn accept(&self, listener: &UnixListener) -> std::io::Result<UnixStream> {
        loop {
            let (stream, _) = listener.accept().await?;
            match self.admit(&stream) {
                Ok(()) => return Ok(stream),
                Err(refused) => tracing::warn!("{refused}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("toolexec-private-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn creates_private_directories() {
        let base = scratch("create");
        let dir = base.join("a/b/c");
        private_dir(&dir).unwrap();
        for p in [base.join("a"), base.join("a/b"), dir.clone()] {
            assert_eq!(mode(&p), 0o700, "{}", p.display());
        }
        // Idempotent; a readable directory of ours is tightened.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn refuses_what_others_could_control() {
        let base = scratch("refuse");
        // Writable by others: something may already be planted in it.
        let open = base.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&open).unwrap_err();
        assert_eq!(e.path, open);
        assert!(e.message.contains("0777"), "{e}");
        // Below a directory others can write (not sticky).
        let e = private_dir(&open.join("inner")).unwrap_err();
        assert_eq!(e.path, open, "{e}");
        assert!(!open.join("inner").exists());
        // A symlink, even to a private directory of ours.
        let real = base.join("real");
        private_dir(&real).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = private_dir(&link).unwrap_err();
        assert!(e.message.contains("symlink"), "{e}");
        // A file.
        std::fs::write(base.join("file"), b"").unwrap();
        assert!(private_dir(&base.join("file")).is_err());
        // Relative paths and '..'.
        assert!(private_dir(Path::new("relative/dir")).is_err());
        assert!(private_dir(&base.join("real/../real")).is_err());
        // An own symlink as an ancestor is followed and checked.
        private_dir(&link.join("below")).unwrap();
        assert!(real.join("below").is_dir());
        if euid() == 0 {
            // Another user's directory, and anything below it.
            let foreign = base.join("foreign");
            std::fs::create_dir(&foreign).unwrap();
            std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
            std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o700)).unwrap();
            let e = private_dir(&foreign).unwrap_err();
            assert!(e.message.contains("owned by uid 65534"), "{e}");
            let e = private_dir(&foreign.join("sub")).unwrap_err();
            assert_eq!(e.path, foreign, "{e}");
            // Another user's symlink as an ancestor.
            let theirs = base.join("theirs");
            std::os::unix::fs::symlink(&real, &theirs).unwrap();
            std::os::unix::fs::lchown(&theirs, Some(65534), Some(65534)).unwrap();
            let e = private_dir(&theirs.join("sub")).unwrap_err();
            assert_eq!(e.path, theirs, "{e}");
        }
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn sticky_world_writable_ancestors_are_fine() {
        let base = scratch("sticky");
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o1777)).unwrap();
        private_dir(&base.join("mine")).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }
}
