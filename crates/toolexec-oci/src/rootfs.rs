//! Root filesystems: a directory used in place, or a tarball unpacked once
//! into a cache keyed by its SHA-256.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::OciError;
use crate::config::RootfsSource;

/// The directory to use as the container root for `source`, unpacking a
/// tarball into `cache_dir/<sha256>` the first time it is seen.
pub(crate) fn resolve(source: &RootfsSource, cache_dir: &Path) -> Result<PathBuf, OciError> {
    match source {
        RootfsSource::Dir(dir) => {
            let meta = std::fs::metadata(dir).map_err(|e| OciError::rootfs(dir, e.to_string()))?;
            if !meta.is_dir() {
                return Err(OciError::rootfs(dir, "not a directory"));
            }
            dir.canonicalize()
                .map_err(|e| OciError::rootfs(dir, e.to_string()))
        }
        RootfsSource::Tarball(tarball) => unpack_cached(tarball, cache_dir),
    }
}

fn unpack_cached(tarball: &Path, cache_dir: &Path) -> Result<PathBuf, OciError> {
    let digest = sha256_file(tarball)?;
    let target = cache_dir.join(&digest);
    if target.is_dir() {
        return Ok(target);
    }
    std::fs::create_dir_all(cache_dir).map_err(|e| OciError::rootfs(cache_dir, e.to_string()))?;
    // Unpack beside the target, then rename: a crash midway never leaves a
    // half-unpacked root under the final name.
    let partial = cache_dir.join(format!(".{digest}.{}.partial", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).map_err(|e| OciError::rootfs(&partial, e.to_string()))?;
    let file = File::open(tarball).map_err(|e| OciError::rootfs(tarball, e.to_string()))?;
    let mut archive = tar::Archive::new(file);
    archive.set_preserve_permissions(true);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    // `unpack` refuses entries that would land outside `partial` (`..`,
    // absolute paths, links followed out of the tree).
    if let Err(e) = archive.unpack(&partial) {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(OciError::rootfs(tarball, format!("cannot unpack: {e}")));
    }
    match std::fs::rename(&partial, &target) {
        Ok(()) => Ok(target),
        // Another process unpacked the same tarball first.
        Err(_) if target.is_dir() => {
            let _ = std::fs::remove_dir_all(&partial);
            Ok(target)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&partial);
            Err(OciError::rootfs(&target, e.to_string()))
        }
    }
}

fn sha256_file(path: &Path) -> Result<String, OciError> {
    let mut file = File::open(path).map_err(|e| OciError::rootfs(path, e.to_string()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| OciError::rootfs(path, e.to_string()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
