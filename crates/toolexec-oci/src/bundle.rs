//! One run's bundle and container, removed whatever way the run ends.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::OciError;
use crate::cgroup::RunCgroup;
use crate::config::OciFlavor;

static NEXT_RUN: AtomicU64 = AtomicU64::new(0);

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
    /// Creates the bundle directory `<work_dir>/<id>`.
    pub(crate) fn create(
        flavor: OciFlavor,
        binary: &Path,
        state_dir: &Path,
        work_dir: &Path,
        id: &str,
    ) -> Result<Self, OciError> {
        let bundle = work_dir.join(id);
        std::fs::create_dir_all(&bundle).map_err(|e| {
            OciError::setup(format!("cannot create bundle {}: {e}", bundle.display()))
        })?;
        std::fs::create_dir_all(state_dir).map_err(|e| {
            OciError::setup(format!(
                "cannot create state dir {}: {e}",
                state_dir.display()
            ))
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
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            inner.cleanup();
        }
    }
}

impl Inner {
    fn cleanup(self) {
        let force = match self.flavor {
            OciFlavor::Runc => "-f",
            OciFlavor::Runsc => "-force",
        };
        let _ = Command::new(&self.binary)
            .arg("--root")
            .arg(&self.state_dir)
            .args(["delete", force, &self.id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
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
