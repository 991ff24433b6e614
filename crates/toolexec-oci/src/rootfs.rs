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
            let root = dir
                .canonicalize()
                .map_err(|e| OciError::rootfs(dir, e.to_string()))?;
            check_tmp(&root)?;
            Ok(root)
        }
        RootfsSource::Tarball(tarball) => {
            let root = unpack_cached(tarball, cache_dir)?;
            check_tmp(&root)?;
            Ok(root)
        }
    }
}

/// The root's `/tmp`, when present, must be writable by everyone: runc
/// gives the `/tmp` tmpfs the mode of the directory it covers (whatever
/// the mount's `mode=`), so a `0755` one would leave the unit, which runs
/// as an unprivileged user, without its scratch space.
fn check_tmp(root: &Path) -> Result<(), OciError> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = root.join("tmp");
    match std::fs::symlink_metadata(&tmp) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(OciError::rootfs(&tmp, e.to_string())),
        Ok(meta) if !meta.is_dir() => Err(OciError::rootfs(&tmp, "not a directory")),
        Ok(meta) if meta.permissions().mode() & 0o777 != 0o777 => Err(OciError::rootfs(
            &tmp,
            format!(
                "mode {:o}: the runtime gives the /tmp tmpfs this mode, so the unit could not \
                 write its scratch space; make it 1777 (or remove it)",
                meta.permissions().mode() & 0o7777
            ),
        )),
        Ok(_) => Ok(()),
    }
}

/// Distinguishes concurrent unpacks within one process.
static NEXT_UNPACK: AtomicU64 = AtomicU64::new(0);

fn unpack_cached(tarball: &Path, cache_dir: &Path) -> Result<PathBuf, OciError> {
    // Checked before anything in it is trusted: whoever could write the
    // cache would choose the container's root.
    OciError::private_dir("runtime.cache_dir", cache_dir)?;
    let digest = sha256_file(tarball)?;
    let target = cache_dir.join(&digest);
    if target.is_dir() {
        return Ok(target);
    }
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
    if let Err(e) = unpack(tarball, &partial) {
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

/// Permission bits never unpacked: setuid, setgid (the sticky bit stays:
/// a root's `/tmp` needs it, and it grants nothing).
const STRIPPED_MODE_BITS: u32 = 0o6000;

/// Unpacks `tarball` into `dst` (an empty directory): permissions kept
/// but for [`STRIPPED_MODE_BITS`], files owned by this process's user,
/// no extended attributes, and no device nodes or FIFOs (skipped).
/// A setuid binary in the cache would be a way to root for anyone who
/// can reach it on the host; inside the container, `noNewPrivileges`
/// already ignores the bits.
fn unpack(tarball: &Path, dst: &Path) -> std::io::Result<()> {
    let file = File::open(tarball)?;
    let mut archive = tar::Archive::new(file);
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(false);
    archive.set_mask(STRIPPED_MODE_BITS);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    let dst = dst.canonicalize()?;
    // As `Archive::unpack` does: directories last, deepest first, so a
    // read-only directory never blocks what goes into it.
    let mut directories = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        match entry.header().entry_type() {
            tar::EntryType::Block | tar::EntryType::Char | tar::EntryType::Fifo => {
                tracing::debug!(path = ?entry.path_bytes(), "rootfs: device or FIFO entry skipped");
            }
            tar::EntryType::Directory => directories.push(entry),
            // `unpack_in` refuses entries that would land outside `dst`
            // (`..`, absolute paths, links followed out of the tree).
            _ => {
                entry.unpack_in(&dst)?;
            }
        }
    }
    directories.sort_by(|a, b| b.path_bytes().cmp(&a.path_bytes()));
    for mut dir in directories {
        dir.unpack_in(&dst)?;
    }
    Ok(())
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

    /// A root whose `/tmp` the unit could not write is refused, naming the
    /// path and the mode; a missing `/tmp` or a 1777 one is fine.
    #[test]
    fn a_root_with_a_private_tmp_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let base =
            std::env::temp_dir().join(format!("toolexec-oci-tmpmode-{}", std::process::id()));
        let root = base.join("root");
        std::fs::create_dir_all(&root).unwrap();
        let source = RootfsSource::Dir(root.clone());
        assert!(resolve(&source, &base).is_ok(), "no /tmp at all");
        std::fs::create_dir(root.join("tmp")).unwrap();
        std::fs::set_permissions(root.join("tmp"), PermissionsExt::from_mode(0o755)).unwrap();
        let err = resolve(&source, &base).unwrap_err().to_string();
        assert!(err.contains("tmp") && err.contains("755"), "{err}");
        std::fs::set_permissions(root.join("tmp"), PermissionsExt::from_mode(0o1777)).unwrap();
        assert!(resolve(&source, &base).is_ok());
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Issue 10, defect 6: setuid, setgid and sticky bits are not
    /// unpacked, nor are device nodes or FIFOs; ordinary permissions are.
    #[test]
    fn privileged_bits_and_devices_are_not_unpacked() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("toolexec-oci-suid-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let tarball = base.join("root.tar");
        let mut builder = tar::Builder::new(File::create(&tarball).unwrap());
        let mut add = |path: &str, kind: tar::EntryType, mode: u32, body: &[u8]| {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(kind);
            header.set_size(body.len() as u64);
            header.set_mode(mode);
            if matches!(kind, tar::EntryType::Char | tar::EntryType::Block) {
                header.set_device_major(1).unwrap();
                header.set_device_minor(3).unwrap();
            }
            header.set_cksum();
            builder.append_data(&mut header, path, body).unwrap();
        };
        add("bin/", tar::EntryType::Directory, 0o755, b"");
        add("bin/su", tar::EntryType::Regular, 0o4755, b"#!/bin/sh\n");
        add("bin/sg", tar::EntryType::Regular, 0o2711, b"#!/bin/sh\n");
        add("bin/plain", tar::EntryType::Regular, 0o750, b"#!/bin/sh\n");
        add("shared/", tar::EntryType::Directory, 0o3775, b"");
        add("dev/", tar::EntryType::Directory, 0o755, b"");
        add("dev/mem", tar::EntryType::Char, 0o666, b"");
        add("dev/sda", tar::EntryType::Block, 0o666, b"");
        add("dev/pipe", tar::EntryType::Fifo, 0o666, b"");
        builder.into_inner().unwrap();
        let root = unpack_cached(&tarball, &base.join("cache")).unwrap();
        let mode = |p: &str| {
            std::fs::symlink_metadata(root.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("bin/su"), 0o755);
        assert_eq!(mode("bin/sg"), 0o711);
        assert_eq!(mode("bin/plain"), 0o750);
        assert_eq!(mode("shared"), 0o1775);
        for gone in ["dev/mem", "dev/sda", "dev/pipe"] {
            assert!(
                std::fs::symlink_metadata(root.join(gone)).is_err(),
                "{gone} was unpacked"
            );
        }
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// A cache directory someone else controls is refused before anything
    /// in it is used, naming the setting and the path.
    #[test]
    fn foreign_cache_is_refused() {
        if toolexec_sandbox::channel_socket::euid() != 0 {
            return;
        }
        let base = std::env::temp_dir().join(format!("toolexec-oci-fcache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let tarball = base.join("root.tar");
        let mut builder = tar::Builder::new(File::create(&tarball).unwrap());
        let mut header = tar::Header::new_gnu();
        header.set_size(3);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, "f", &b"abc"[..]).unwrap();
        builder.into_inner().unwrap();
        // The attacker's cache, with a root of their choosing already in
        // place under the tarball's digest.
        let cache = base.join("cache");
        std::fs::create_dir(&cache).unwrap();
        let planted = cache.join(sha256_file(&tarball).unwrap());
        std::fs::create_dir(&planted).unwrap();
        for p in [&cache, &planted] {
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
        }
        let e = unpack_cached(&tarball, &cache).unwrap_err();
        let body = e.to_body();
        assert_eq!(body.code.as_str(), "backend_unavailable", "{e}");
        let details = body.details.unwrap();
        assert_eq!(details["field"], "runtime.cache_dir", "{e}");
        assert_eq!(details["path"], cache.display().to_string(), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }

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
