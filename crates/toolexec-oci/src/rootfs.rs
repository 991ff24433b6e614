//! Root filesystems: a directory used in place, or a tarball unpacked once
//! into a cache keyed by its SHA-256.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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

/// Distinguishes concurrent unpacks within one process.
static NEXT_UNPACK: AtomicU64 = AtomicU64::new(0);

fn unpack_cached(tarball: &Path, cache_dir: &Path) -> Result<PathBuf, OciError> {
    let digest = sha256_file(tarball)?;
    let target = cache_dir.join(&digest);
    if target.is_dir() {
        return Ok(target);
    }
    std::fs::create_dir_all(cache_dir).map_err(|e| OciError::rootfs(cache_dir, e.to_string()))?;
    // Unpack beside the target, then rename: a crash midway never leaves a
    // half-unpacked root under the final name. Each unpack has a scratch
    // directory of its own (process and counter), so concurrent first uses
    // never touch each other's trees.
    let partial = cache_dir.join(format!(
        ".{digest}.{}.{}.partial",
        std::process::id(),
        NEXT_UNPACK.fetch_add(1, Ordering::Relaxed)
    ));
    // A leftover of this name is from a crashed process with the same pid.
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir(&partial).map_err(|e| OciError::rootfs(&partial, e.to_string()))?;
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
    // `rename` of a directory onto a non-empty one fails: if another
    // unpack won the race, its complete tree stays and ours goes.
    match std::fs::rename(&partial, &target) {
        Ok(()) => Ok(target),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Concurrent first uses of one tarball all get the same complete
    /// tree, and no scratch directory is left.
    #[test]
    fn concurrent_first_unpacks_agree() {
        let base = std::env::temp_dir().join(format!("toolexec-oci-unpack-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let tarball = base.join("root.tar");
        let mut builder = tar::Builder::new(File::create(&tarball).unwrap());
        for i in 0..200 {
            let body = format!("file {i}\n").repeat(50);
            let mut header = tar::Header::new_gnu();
            header.set_size(body.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder
                .append_data(&mut header, format!("d{}/f{i}", i % 7), body.as_bytes())
                .unwrap();
        }
        builder.into_inner().unwrap();
        let cache = base.join("cache");
        let roots: Vec<PathBuf> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..8)
                .map(|_| s.spawn(|| unpack_cached(&tarball, &cache).unwrap()))
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert!(roots.iter().all(|r| r == &roots[0]), "{roots:?}");
        for i in 0..200 {
            let text = std::fs::read_to_string(roots[0].join(format!("d{}/f{i}", i % 7))).unwrap();
            assert_eq!(text, format!("file {i}\n").repeat(50));
        }
        let names: Vec<String> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
