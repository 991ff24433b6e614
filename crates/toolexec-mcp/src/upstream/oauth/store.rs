//! The token store of one upstream server: a JSON file readable by its
//! owner only, behind rmcp's [`CredentialStore`].
//!
//! The file holds the client registration (client id, and the secret a
//! dynamic registration returned) and rmcp's [`StoredCredentials`] (access
//! and refresh tokens, granted scopes, issuer), bound to the server's URL: a
//! file written for another URL is ignored, so a changed `url` never sends
//! a token to a new host. A file (or its directory) that others can read or
//! write, or that another user owns, is refused rather than used. Writes go
//! to a new file with mode 0600, synced, then renamed over the old one, so a
//! crash leaves the old file or the new one. Reads are served from memory
//! after the first.

use std::io::Write as _;
use std::os::unix::fs::{
    DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use rmcp::transport::auth::{
    AuthError, CredentialRefreshGuard, CredentialStore, StoredCredentials,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use toolexec::Secret;

/// Version of the file's layout.
const FORMAT: u32 = 1;

/// What the file holds.
#[derive(Clone, Default, Serialize, Deserialize)]
pub(crate) struct Record {
    format: u32,
    /// The MCP endpoint the tokens are for.
    pub(crate) server_url: String,
    /// The client registration used to get them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) client_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) credentials: Option<StoredCredentials>,
    /// The authorization server that issued tokens here (kept when the
    /// tokens are cleared): a later one is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) issuer: Option<String>,
}

impl Record {
    fn new(server_url: &str) -> Record {
        Record {
            format: FORMAT,
            server_url: server_url.to_owned(),
            ..Record::default()
        }
    }
}

/// The token file of one server. Cheap to clone (shared state).
#[derive(Clone)]
pub(crate) struct TokenStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    server_url: String,
    /// The file's content once read (`None`: not read yet), with the
    /// file's modification time then: a file another process rewrote (a
    /// new sign-in) is read again.
    cache: Mutex<Option<(Record, Option<Stamp>)>>,
    /// Held across a token refresh and its save.
    refresh: Arc<Mutex<()>>,
    /// A client registration made by a sign-in in progress, written with
    /// its tokens (so an abandoned sign-in leaves the file as it was).
    pending: parking_lot::Mutex<Option<(String, Option<String>)>>,
}

/// What identifies one version of the file.
type Stamp = (SystemTime, u64, u64);

impl TokenStore {
    pub(crate) fn new(path: PathBuf, server_url: &str) -> TokenStore {
        TokenStore {
            inner: Arc::new(Inner {
                path,
                server_url: server_url.to_owned(),
                cache: Mutex::new(None),
                refresh: Arc::new(Mutex::new(())),
                pending: parking_lot::Mutex::new(None),
            }),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The record, read from the file the first time. A missing file, or
    /// one written for another URL, is an empty record.
    pub(crate) async fn record(&self) -> Result<Record, String> {
        let mut cache = self.inner.cache.lock().await;
        self.current(&mut cache).map(|r| r.clone())
    }

    /// The cached record, read again when the file changed since.
    fn current<'a>(
        &self,
        cache: &'a mut Option<(Record, Option<Stamp>)>,
    ) -> Result<&'a mut Record, String> {
        let modified = modified(&self.inner.path);
        let fresh = matches!(cache.as_ref(), Some((_, seen)) if *seen == modified);
        if !fresh {
            let record = read(&self.inner.path, &self.inner.server_url)?;
            *cache = Some((record, modified));
        }
        match cache {
            Some((record, _)) => Ok(record),
            None => Err("the token file cache is empty".into()),
        }
    }

    /// Changes the record and writes it.
    pub(crate) async fn update(&self, change: impl FnOnce(&mut Record)) -> Result<(), String> {
        let mut cache = self.inner.cache.lock().await;
        let record = self.current(&mut cache)?;
        change(record);
        let written = write(&self.inner.path, record);
        if let Some((_, seen)) = cache.as_mut() {
            *seen = modified(&self.inner.path);
        }
        written
    }

    /// Deletes the file. Returns whether there was one.
    pub(crate) async fn remove(&self) -> Result<bool, String> {
        let mut cache = self.inner.cache.lock().await;
        *cache = None;
        match std::fs::remove_file(&self.inner.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(format!("cannot remove {}: {e}", self.inner.path.display())),
        }
    }

    /// Keeps a registration made by a sign-in in progress, to be written
    /// with its tokens.
    pub(crate) fn set_pending_client(&self, client_id: String, secret: Option<String>) {
        *self.inner.pending.lock() = Some((client_id, secret));
    }

    /// The stored client secret (a pre-registered or dynamically registered
    /// confidential client's).
    pub(crate) async fn client_secret(&self) -> Result<Option<Secret>, String> {
        Ok(self.record().await?.client_secret.map(Secret::new))
    }
}

/// The file's modification time, size and inode (`None`: no file).
fn modified(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len(), meta.ino()))
}

fn store_error(e: String) -> AuthError {
    AuthError::CredentialStoreError(e)
}

#[async_trait]
impl CredentialStore for TokenStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self.record().await.map_err(store_error)?.credentials)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let pending = self
            .inner
            .pending
            .lock()
            .take()
            .filter(|(id, _)| *id == credentials.client_id);
        self.update(|record| {
            if let Some((_, secret)) = pending {
                record.client_secret = secret;
            } else if record.client_id.as_deref() != Some(&credentials.client_id) {
                // Another client's secret must not stay with these tokens.
                record.client_secret = None;
            }
            record.client_id = Some(credentials.client_id.clone());
            if credentials.issuer.is_some() {
                record.issuer = credentials.issuer.clone();
            }
            record.credentials = Some(credentials);
        })
        .await
        .map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.update(|record| record.credentials = None)
            .await
            .map_err(store_error)
    }

    /// One refresh at a time for this file: in this process (a mutex) and
    /// across processes sharing it (an exclusive `flock` on a lock file
    /// beside it), so two gateways never spend the same refresh token
    /// (an authorization server that rotates refresh tokens would revoke
    /// them both). rmcp loads the credentials again under the guard.
    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let guard = self.inner.refresh.clone().lock_owned().await;
        let lock_path = lock_path(&self.inner.path);
        let file = tokio::task::spawn_blocking(move || lock_file(&lock_path))
            .await
            .map_err(|e| store_error(e.to_string()))?
            .map_err(store_error)?;
        Ok(Some(CredentialRefreshGuard::new((guard, file))))
    }
}

/// The lock file of a token file: `.NAME.lock` beside it.
fn lock_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.lock"))
}

/// Opens (creating, mode 0600) and exclusively locks `path`; the lock is
/// released when the file is closed.
fn lock_file(path: &Path) -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd as _;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    loop {
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(file);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("cannot lock {}: {e}", path.display()));
        }
    }
}

/// Refuses a file or directory others may read or write, or that another
/// user owns.
fn check_private(path: &Path, meta: &std::fs::Metadata, allowed: u32) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid {
        return Err(format!(
            "{} belongs to uid {}, not to this user (uid {uid}): refused",
            path.display(),
            meta.uid()
        ));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & !allowed != 0 {
        return Err(format!(
            "{} has mode {mode:04o}, so others can reach the tokens: refused \
             (chmod {allowed:o} it, or remove it and sign in again)",
            path.display()
        ));
    }
    Ok(())
}

fn read(path: &Path, server_url: &str) -> Result<Record, String> {
    if let Some(dir) = path.parent()
        && let Ok(meta) = std::fs::metadata(dir)
    {
        check_private(dir, &meta, 0o700)?;
    }
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Record::new(server_url)),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    check_private(path, &meta, 0o600)?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut file, &mut text)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let record: Record = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{} is not a toolexec token file ({e}): remove it and sign in again",
            path.display()
        )
    })?;
    if record.format != FORMAT {
        return Err(format!(
            "{} has format {}, this toolexec reads {FORMAT}",
            path.display(),
            record.format
        ));
    }
    if record.server_url != server_url {
        tracing::warn!(
            target: "toolexec_mcp::upstream::oauth",
            file = %path.display(),
            "the token file is for {}, not {server_url}: ignored (sign in again)",
            record.server_url
        );
        return Ok(Record::new(server_url));
    }
    Ok(record)
}

fn write(path: &Path, record: &Record) -> Result<(), String> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    check_private(dir, &meta, 0o700)?;
    let text = serde_json::to_vec_pretty(record).map_err(|e| e.to_string())?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("toolexec-token-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[tokio::test]
    async fn round_trip_with_private_modes() {
        let dir = temp_dir("round");
        let path = dir.join("nested").join("server.json");
        let store = TokenStore::new(path.clone(), "https://mcp.example/mcp");
        assert!(store.load().await.unwrap().is_none());
        store
            .save(StoredCredentials::new(
                "client-1".into(),
                None,
                vec!["a".into()],
                Some(1),
            ))
            .await
            .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        // A second store reads what the first wrote.
        let again = TokenStore::new(path.clone(), "https://mcp.example/mcp");
        let loaded = again.load().await.unwrap().unwrap();
        assert_eq!(loaded.client_id, "client-1");
        assert_eq!(loaded.granted_scopes, vec!["a".to_owned()]);
        // Another URL does not see them.
        let other = TokenStore::new(path.clone(), "https://elsewhere.example/mcp");
        assert!(other.load().await.unwrap().is_none());
        assert!(again.remove().await.unwrap());
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn refreshes_are_serialized_across_processes() {
        let dir = temp_dir("lock");
        let path = dir.join("server.json");
        let store = TokenStore::new(path.clone(), "http://127.0.0.1/mcp");
        let guard = store.acquire_refresh_guard().await.unwrap();
        // Another open file description (as another process would have)
        // cannot take the lock while the guard is held.
        use std::os::fd::AsRawFd as _;
        let other = std::fs::File::open(lock_path(&path)).unwrap();
        // SAFETY: flock on a descriptor this test owns.
        let busy = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(busy, -1, "the lock is held");
        drop(guard);
        // SAFETY: as above.
        let free = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(free, 0, "released with the guard");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn wider_modes_are_refused() {
        let dir = temp_dir("modes");
        let path = dir.join("server.json");
        let store = TokenStore::new(path.clone(), "http://127.0.0.1/mcp");
        store
            .save(StoredCredentials::new("c".into(), None, vec![], None))
            .await
            .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let fresh = TokenStore::new(path.clone(), "http://127.0.0.1/mcp");
        let e = fresh.load().await.unwrap_err().to_string();
        assert!(e.contains("mode 0644") && e.contains("refused"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let fresh = TokenStore::new(path.clone(), "http://127.0.0.1/mcp");
        let e = fresh.load().await.unwrap_err().to_string();
        assert!(e.contains("mode 0755"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn another_owner_is_refused() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: another_owner_is_refused: needs root to chown (runs in CI)");
            return;
        }
        let dir = temp_dir("owner");
        let path = dir.join("server.json");
        let store = TokenStore::new(path.clone(), "http://127.0.0.1/mcp");
        store
            .save(StoredCredentials::new("c".into(), None, vec![], None))
            .await
            .unwrap();
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        let fresh = TokenStore::new(path.clone(), "http://127.0.0.1/mcp");
        let e = fresh.load().await.unwrap_err().to_string();
        assert!(e.contains("belongs to uid 65534"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn garbage_is_a_clear_error() {
        let dir = temp_dir("garbage");
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        let path = dir.join("server.json");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .unwrap()
            .write_all(b"{not json")
            .unwrap();
        let store = TokenStore::new(path, "http://127.0.0.1/mcp");
        let e = store.load().await.unwrap_err().to_string();
        assert!(e.contains("not a toolexec token file"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
