//! One run's bundle and container, removed whatever way the run ends.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::OciError;
use crate::cgroup::RunCgroup;
use crate::config::OciFlavor;

static NEXT_RUN: AtomicU64 = AtomicU64::new(0);

/// How long the runtime's force delete may take before it is killed.
const DELETE_TIMEOUT: Duration = Duration::from_secs(10);

/// A unique container id: `toolexec-<pid>-<n>-<nanos>`.
pub(crate) fn container_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "toolexec-{}-{}-{nanos:x}",
        std::process::id(),
        NEXT_RUN.fetch_add(1, Ordering::Relaxed)
    )
}

/// Owns a run's bundle directory, its container id and its cgroup.
/// Dropping it (or [`RunGuard::cleanup`]) deletes the container with the
/// runtime's force delete, removes the cgroups and the bundle.
#[derive(Debug)]
pub(crate) struct RunGuard {
    inner: Option<Inner>,
}

#[derive(Debug)]
struct Inner {
    flavor: OciFlavor,
    binary: PathBuf,
    state_dir: PathBuf,
    id: String,
    bundle: PathBuf,
    cgroup: Option<RunCgroup>,
    extra_dir: Option<PathBuf>,
}

impl RunGuard {
    /// Checks that `work_dir` and `state_dir` are private (creating them
    /// if missing), then creates the bundle directory `<work_dir>/<id>`
    /// (0700; one that already exists is an error).
    pub(crate) fn create(
        flavor: OciFlavor,
        binary: &Path,
        state_dir: &Path,
        work_dir: &Path,
        id: &str,
    ) -> Result<Self, OciError> {
        OciError::private_dir("runtime.state_dir", state_dir)?;
        OciError::private_dir("runtime.work_dir", work_dir)?;
        let bundle = work_dir.join(id);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&bundle)
            .map_err(|e| {
                OciError::setup(format!("cannot create bundle {}: {e}", bundle.display()))
            })?;
        Ok(RunGuard {
            inner: Some(Inner {
                flavor,
                binary: binary.to_owned(),
                state_dir: state_dir.to_owned(),
                id: id.to_owned(),
                bundle,
                cgroup: None,
                extra_dir: None,
            }),
        })
    }

    /// The bundle directory.
    pub(crate) fn bundle(&self) -> &Path {
        &self
            .inner
            .as_ref()
            .expect("guard is live until cleanup")
            .bundle
    }

    /// Hands the run's cgroup to the guard.
    pub(crate) fn set_cgroup(&mut self, cgroup: RunCgroup) {
        if let Some(inner) = &mut self.inner {
            inner.cgroup = Some(cgroup);
        }
    }

    /// A further directory removed with the bundle.
    pub(crate) fn set_extra_dir(&mut self, dir: PathBuf) {
        if let Some(inner) = &mut self.inner {
            inner.extra_dir = Some(dir);
        }
    }

    /// The run's cgroup.
    pub(crate) fn cgroup(&self) -> Option<&RunCgroup> {
        self.inner.as_ref().and_then(|i| i.cgroup.as_ref())
    }

    /// Cleans up off the async threads.
    pub(crate) async fn cleanup(mut self) {
        if let Some(inner) = self.inner.take() {
            let _ = tokio::task::spawn_blocking(move || inner.cleanup()).await;
        }
    }
}

impl Drop for RunGuard {
    /// A run dropped before [`RunGuard::cleanup`] (its future was dropped)
    /// is cleaned up on a thread of its own: never blocking an async
    /// worker on the runtime's delete.
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        let slot = std::sync::Arc::new(parking_lot::Mutex::new(Some(inner)));
        let theirs = slot.clone();
        let spawned = std::thread::Builder::new()
            .name("toolexec-oci-cleanup".into())
            .spawn(move || {
                if let Some(inner) = theirs.lock().take() {
                    inner.cleanup();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot spawn a cleanup thread, cleaning up inline: {e}");
            if let Some(inner) = slot.lock().take() {
                inner.cleanup();
            }
        }
    }
}

/// Runs `command` to completion, killing it after `timeout`. `None` when
/// it had to be killed.
fn run_bounded(
    command: &mut Command,
    timeout: Duration,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    let mut child = command.spawn()?;
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

impl Inner {
    fn cleanup(self) {
        let force = match self.flavor {
            OciFlavor::Runc => "-f",
            OciFlavor::Runsc => "-force",
        };
        let mut delete = Command::new(&self.binary);
        delete
            .arg("--root")
            .arg(&self.state_dir)
            .args(["delete", force, &self.id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        match run_bounded(&mut delete, DELETE_TIMEOUT) {
            Ok(Some(_)) => {}
            Ok(None) => tracing::warn!(id = %self.id, "container delete timed out and was killed"),
            Err(e) => tracing::warn!(id = %self.id, "cannot run container delete: {e}"),
        }
        if let Some(cgroup) = &self.cgroup {
            cgroup.remove();
        }
        if let Some(dir) = &self.extra_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Err(e) = std::fs::remove_dir_all(&self.bundle)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(bundle = %self.bundle.display(), "cannot remove bundle: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_command_is_killed_at_the_deadline() {
        let mut sleeper = Command::new("sleep");
        sleeper.arg("60");
        assert_eq!(
            run_bounded(&mut sleeper, Duration::from_millis(100)).unwrap(),
            None
        );
        let mut quick = Command::new("true");
        let status = run_bounded(&mut quick, Duration::from_secs(60)).unwrap();
        assert!(status.is_some_and(|s| s.success()));
    }

    /// Dropping a guard (a run future dropped mid-way) hands the cleanup to
    /// a thread of its own, which runs the runtime's force delete and
    /// removes the bundle.
    /// Writes an executable script through a child `sh`, so no descriptor open
    /// for writing on it ever exists in this process: a fork by a parallel test
    /// would inherit one and make exec fail with ETXTBSY.
    fn write_executable(path: &std::path::Path, script: &str) {
        use std::io::Write;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
            .arg(path)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        assert!(
            child.wait().unwrap().success(),
            "cannot write {}",
            path.display()
        );
    }

    #[test]
    fn drop_cleans_up_off_the_caller() {
        let base = std::env::temp_dir().join(format!("toolexec-oci-drop-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let binary = base.join("fake-runc");
        write_executable(
            &binary,
            "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args\"\n",
        );
        let guard = RunGuard::create(
            OciFlavor::Runc,
            &binary,
            &base.join("state"),
            &base.join("work"),
            "toolexec-test-drop",
        )
        .unwrap();
        let bundle = guard.bundle().to_owned();
        assert!(bundle.is_dir());
        drop(guard);
        let deadline = Instant::now() + Duration::from_secs(30);
        while bundle.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!bundle.exists(), "bundle left behind");
        let args = std::fs::read_to_string(base.join("args")).unwrap();
        assert!(args.contains("delete -f toolexec-test-drop"), "{args}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
