//! Temporary directories and ports.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system's temporary directory, removed on
/// drop. Its name holds `tag`, the process id and a counter, so parallel
/// tests and test processes never share one.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `toolexec-<tag>-<pid>-<n>`.
    ///
    /// # Panics
    ///
    /// When the directory cannot be created.
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "toolexec-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `name` in the directory; returns its path.
    ///
    /// # Panics
    ///
    /// When the file cannot be written.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }

    /// Writes `name` readable by its owner only (mode 0600, as secret files
    /// must be); returns its path.
    ///
    /// # Panics
    ///
    /// When the file exists or cannot be written.
    pub fn write_private(&self, name: &str, text: &str) -> PathBuf {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.0.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut file| file.write_all(text.as_bytes()))
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port that was free a moment ago, for a server the test starts
/// next (which binds it itself).
///
/// Taken below the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`), and never the same twice in
/// one process: a port the kernel hands out for `127.0.0.1:0` (another
/// test's server, binding meanwhile) is never one of these, so the server
/// this port is for cannot find it taken, or be mistaken for another. Where
/// no such range is known, a port the kernel picks.
///
/// # Panics
///
/// When no loopback port can be bound.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    /// Ports handed out start here.
    const LOW: u32 = 20_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok());
    if let Some(high) = ephemeral.filter(|&h| h > LOW + 1_000) {
        let span = high - LOW;
        // Where each test process starts, so two at once rarely meet.
        let start = std::process::id().wrapping_mul(7_919) % span;
        for _ in 0..span {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = LOW + (start + n) % span;
            if let Ok(port) = u16::try_from(port)
                && TcpListener::bind(("127.0.0.1", port)).is_ok()
            {
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

/// Starts `cmd` (a fixture server that binds port 0 itself and prints
/// `PORT <n>` as its first stdout line) with stdin piped, so the fixture
/// can exit when this process dies, and returns it with its port.
///
/// # Panics
///
/// When it cannot start or its first line is not `PORT <n>`.
pub fn spawn_printing_port(cmd: &mut std::process::Command) -> (std::process::Child, u16) {
    use std::io::BufRead;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("read the fixture's port");
    let port = line
        .trim()
        .strip_prefix("PORT ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{cmd:?} printed {line:?}, not PORT <n>"));
    (child, port)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ports handed out are distinct, bindable, and (where the kernel says
    /// where its ephemeral range starts) below it, so a server binding
    /// `127.0.0.1:0` meanwhile never gets one.
    #[test]
    fn free_ports_stay_out_of_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        for &port in &ports {
            TcpListener::bind(("127.0.0.1", port)).expect("a handed-out port binds");
        }
        let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok());
        if let Some(low) = low.filter(|&l| u32::from(l) > 21_000) {
            assert!(
                ports.iter().all(|&p| p < low),
                "{ports:?} (ephemeral from {low})"
            );
            let kernel = TcpListener::bind("127.0.0.1:0").unwrap();
            assert!(!ports.contains(&kernel.local_addr().unwrap().port()));
        }
    }
}
