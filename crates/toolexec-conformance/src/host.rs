//! The host side of the corpus: what units must not reach (a secret in
//! the environment and in a file, a listener, a file outside the
//! sandbox, this process) and what the host sees of a running unit.

use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

/// The environment variable holding [`Host::secret`] in this process.
pub const SECRET_ENV: &str = "TOOLEXEC_CONFORMANCE_SECRET";

const CORE_PATTERN: &str = "/proc/sys/kernel/core_pattern";

const SECRET: &str = "hunter2-conformance-secret";

/// Host-side fixtures, one per runtime under test.
#[derive(Debug)]
pub struct Host {
    dir: PathBuf,
    listener: std::net::TcpListener,
    serial: u32,
    core_pattern: Option<String>,
}

impl Host {
    /// Creates the fixtures: a private directory in the temporary
    /// directory with the secret file and the marker file, a loopback
    /// listener, and the secret in this process's environment.
    pub fn new() -> std::io::Result<Host> {
        static SET: Once = Once::new();
        // SAFETY: set once per process, before any unit of the suite
        // starts; nothing else writes the environment.
        SET.call_once(|| unsafe { std::env::set_var(SECRET_ENV, SECRET) });
        static SERIAL: AtomicU32 = AtomicU32::new(1);
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "toolexec-conformance-{}-{serial}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("secret"), SECRET)?;
        std::fs::write(dir.join("marker"), "untouched")?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        Ok(Host {
            dir,
            listener,
            serial,
            core_pattern: std::fs::read_to_string(CORE_PATTERN).ok(),
        })
    }

    /// The secret units must never see (in this process's environment and
    /// in [`Host::secret_file`]).
    pub fn secret(&self) -> &'static str {
        SECRET
    }

    /// A host file holding the secret.
    pub fn secret_file(&self) -> PathBuf {
        self.dir.join("secret")
    }

    /// A host file holding `untouched`, which units try to overwrite.
    pub fn marker_file(&self) -> PathBuf {
        self.dir.join("marker")
    }

    /// Whether the marker file still holds `untouched`.
    pub fn marker_untouched(&self) -> bool {
        std::fs::read_to_string(self.marker_file()).is_ok_and(|s| s == "untouched")
    }

    /// Whether the host's `kernel.core_pattern` is what it was when the
    /// fixtures were made.
    pub fn core_pattern_unchanged(&self) -> bool {
        std::fs::read_to_string(CORE_PATTERN).ok() == self.core_pattern
    }

    /// This process's pid.
    pub fn pid(&self) -> u32 {
        std::process::id()
    }

    /// The loopback port units try to connect to.
    pub fn port(&self) -> u16 {
        self.listener.local_addr().map_or(0, |a| a.port())
    }

    /// Whether anything connected to [`Host::port`] (drains the queue).
    pub fn was_reached(&self) -> bool {
        let mut reached = false;
        while self.listener.accept().is_ok() {
            reached = true;
        }
        reached
    }

    /// A number no other unit of this process carries on its command line
    /// (`sleep <marker>` units are found on the host by it).
    pub fn marker(&self, case: usize) -> String {
        format!("7{}{:02}{case:02}", std::process::id(), self.serial)
    }

    /// Host processes whose command line contains `marker`.
    pub fn processes_with(marker: &str) -> Vec<HostProcess> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| HostProcess::read(pid, marker))
            .collect()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A host process, as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostProcess {
    /// Host pid.
    pub pid: u32,
    /// Real, effective, saved and filesystem uid.
    pub uids: Vec<u32>,
    /// `/proc/<pid>/comm`.
    pub comm: String,
    /// The command line, arguments joined by spaces.
    pub cmdline: String,
}

impl HostProcess {
    fn read(pid: u32, marker: &str) -> Option<HostProcess> {
        let proc = Path::new("/proc").join(pid.to_string());
        let cmdline = std::fs::read(proc.join("cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !cmdline.contains(marker) {
            return None;
        }
        let status = std::fs::read_to_string(proc.join("status")).ok()?;
        let uids = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .filter_map(|u| u.parse().ok())
            .collect();
        let comm = std::fs::read_to_string(proc.join("comm")).ok()?;
        Some(HostProcess {
            pid,
            uids,
            comm: comm.trim().to_owned(),
            cmdline: cmdline.trim().to_owned(),
        })
    }
}
