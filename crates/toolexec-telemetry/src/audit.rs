//! The audit log: one JSON line per call (time, caller, session, tool,
//! arguments' digest, outcome, duration, backend, the limit that ended it,
//! trace id), appended by a writer thread and rotated by size.
//!
//! A call never waits for the disk: records go through a bounded queue,
//! and a full queue, a full disk or any write error is counted
//! ([`AuditStats`]) and logged at most once a minute. Each record is one
//! `write` to a file opened for appending; a line cut short by a crash is
//! trimmed off when the log is opened again, so every line in the file is
//! a whole record.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

use serde::Serialize;
use toolexec::Error;
use toolexec::telemetry::{CallObserver, CallRecord, Caller, current_trace};

use crate::TelemetryError;
use crate::redact;

/// Where and how to write the audit log.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// The log file; rotated files are `PATH.1` (newest) to `PATH.N`.
    pub path: PathBuf,
    /// Size at which the file is rotated.
    pub max_bytes: u64,
    /// Rotated files kept.
    pub keep: usize,
    /// Record the arguments themselves (secrets redacted, capped at
    /// [`Self::max_argument_bytes`]), not only their digest.
    pub record_arguments: bool,
    /// Cap on recorded argument text.
    pub max_argument_bytes: usize,
    /// Records waiting for the writer before new ones are dropped.
    pub queue: usize,
    /// Key of the arguments' digest (HMAC-SHA-256). Without one the digest
    /// is a plain SHA-256, which a dictionary of likely arguments reverses.
    pub digest_key: Option<toolexec::Secret>,
}

impl AuditOptions {
    /// Defaults for `path`: 100 MiB files, 5 kept, digests only.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        AuditOptions {
            path: path.into(),
            max_bytes: 100 << 20,
            keep: 5,
            record_arguments: false,
            max_argument_bytes: 4096,
            queue: 10_000,
            digest_key: None,
        }
    }
}

/// What the audit log has done, for metrics.
#[derive(Debug, Default)]
pub struct AuditStats {
    /// Records written.
    pub written: AtomicU64,
    /// Records lost: the queue was full or the write failed.
    pub dropped: AtomicU64,
    /// Failed writes (a full disk among them).
    pub write_errors: AtomicU64,
}

/// The audit log, as a [`CallObserver`].
#[derive(Debug)]
pub struct AuditLog {
    tx: SyncSender<Msg>,
    stats: Arc<AuditStats>,
    record_arguments: bool,
    max_argument_bytes: usize,
    digest_key: Option<toolexec::Secret>,
    path: PathBuf,
    /// When a full queue was last logged.
    last_warning: parking_lot::Mutex<Option<Instant>>,
}

/// What the writer thread is sent.
enum Msg {
    Line(Vec<u8>),
    /// Acknowledged once every record sent before it is written.
    Flush(SyncSender<()>),
}

#[derive(Serialize)]
struct Entry<'a> {
    time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    caller: Option<&'a Caller>,
    tool: &'a str,
    backend: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    args_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<String>,
    outcome: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<&'a str>,
    duration_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<String>,
}

impl AuditLog {
    /// Opens (or creates) the log, trims a record cut short by a crash, and
    /// starts the writer thread.
    pub fn open(options: AuditOptions) -> Result<AuditLog, TelemetryError> {
        if options.max_bytes == 0 || options.queue == 0 {
            return Err(TelemetryError::Invalid {
                field: "audit",
                message: "max_bytes and queue must be positive".into(),
            });
        }
        let file = open_log(&options.path).map_err(|source| TelemetryError::Audit {
            path: options.path.display().to_string(),
            source,
        })?;
        let (tx, rx) = sync_channel(options.queue);
        let stats = Arc::new(AuditStats::default());
        let writer = Writer {
            file: Some(file),
            path: options.path.clone(),
            max_bytes: options.max_bytes,
            keep: options.keep,
            stats: stats.clone(),
            last_warning: None,
        };
        std::thread::Builder::new()
            .name("toolexec-audit".into())
            .spawn(move || writer.run(rx))
            .map_err(|source| TelemetryError::Audit {
                path: options.path.display().to_string(),
                source,
            })?;
        Ok(AuditLog {
            tx,
            stats,
            record_arguments: options.record_arguments,
            max_argument_bytes: options.max_argument_bytes,
            digest_key: options.digest_key,
            path: options.path,
            last_warning: parking_lot::Mutex::new(None),
        })
    }

    /// Waits (up to `timeout`) until every record queued so far is written
    /// or counted as dropped.
    pub fn flush(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let (ack, done) = sync_channel(1);
        let mut msg = Msg::Flush(ack);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                    msg = m;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return,
            }
        }
        let _ = done.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }

    fn queue_full(&self) {
        self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        let mut last = self.last_warning.lock();
        let now = Instant::now();
        if last.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60)) {
            *last = Some(now);
            tracing::warn!(
                path = %self.path.display(),
                "audit log: the writer is behind; records dropped (counted in toolexec_audit_records_dropped_total)"
            );
        }
    }

    /// Its counters.
    pub fn stats(&self) -> &Arc<AuditStats> {
        &self.stats
    }
}

impl CallObserver for AuditLog {
    fn wants_arguments(&self) -> bool {
        true
    }

    fn call_finished(&self, call: &CallRecord<'_>) {
        let limit = match call.error {
            Some(Error::LimitExceeded { limit, .. }) => Some(limit.as_str()),
            _ => None,
        };
        let entry = Entry {
            time: now_rfc3339(),
            caller: call.caller,
            tool: call.tool,
            backend: call.backend,
            args_digest: call
                .arguments
                .map(|a| redact::digest(a, self.digest_key.as_ref())),
            args: call
                .arguments
                .filter(|_| self.record_arguments)
                .map(|a| redact::redacted_text(a, self.max_argument_bytes)),
            outcome: call.error.map_or("ok", |e| e.code().as_str()),
            limit,
            duration_ms: call.duration.as_secs_f64() * 1e3,
            trace_id: match call.trace_id {
                Some(id) => Some(format!("{id:032x}")),
                None => current_trace().map(|t| t.trace_id().to_owned()),
            },
        };
        let Ok(mut line) = serde_json::to_vec(&entry) else {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        line.push(b'\n');
        if self.tx.try_send(Msg::Line(line)).is_err() {
            self.queue_full();
        }
    }
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Opens `path` for appending, first cutting off a last line without its
/// newline (a record a crash cut short).
fn open_log(path: &Path) -> std::io::Result<File> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)?;
    let len = file.metadata()?.len();
    if len > 0 && file.metadata()?.is_file() {
        let mut last = [0u8];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            let keep = last_newline(&mut file, len)?;
            file.set_len(keep)?;
            tracing::warn!(path = %path.display(), cut = len - keep, "audit log: trimmed a record cut short");
        }
    }
    Ok(file)
}

/// The length up to and including the last newline before `len` (0 if none).
fn last_newline(file: &mut File, len: u64) -> std::io::Result<u64> {
    const CHUNK: u64 = 64 << 10;
    let mut end = len;
    let mut buf = vec![0u8; CHUNK as usize];
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let n = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|b| *b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

struct Writer {
    file: Option<File>,
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    stats: Arc<AuditStats>,
    last_warning: Option<Instant>,
}

impl Writer {
    fn run(mut self, rx: Receiver<Msg>) {
        while let Ok(msg) = rx.recv() {
            match msg {
                Msg::Line(line) => match self.append(&line) {
                    Ok(()) => {
                        self.stats.written.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                        self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                        // Reopened on the next record: the path may have
                        // been moved or deleted (log rotation by others).
                        self.file = None;
                        self.warn(&e);
                    }
                },
                Msg::Flush(ack) => {
                    let _ = ack.try_send(());
                }
            }
        }
    }

    /// Appends one record under an exclusive lock on the file, so several
    /// processes may share a log: the size is the file's own, rotation is
    /// decided under the lock, and a short write (a full disk) is trimmed
    /// back before anyone else appends.
    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        let max_bytes = self.max_bytes;
        let file = self.current()?;
        file.lock()?;
        let written = (|| {
            let size = file.metadata()?.len();
            if size > 0 && size + line.len() as u64 > max_bytes && file.metadata()?.is_file() {
                return Ok(Some(()));
            }
            match file.write(line) {
                Ok(n) if n == line.len() => Ok(None),
                Ok(n) => {
                    let _ = file.set_len(size);
                    Err(std::io::Error::new(
                        std::io::ErrorKind::StorageFull,
                        format!("short write ({n} of {} bytes)", line.len()),
                    ))
                }
                Err(e) => Err(e),
            }
        })();
        match written {
            Ok(None) => {
                let _ = file.unlock();
                Ok(())
            }
            Ok(Some(())) => {
                // Full: rotate while holding the lock, then write to the new file.
                let rotated = self.rotate();
                if let Some(old) = &self.file {
                    let _ = old.unlock();
                }
                rotated?;
                self.file = None;
                let file = self.current()?;
                file.lock()?;
                let result = file.write_all(line);
                let _ = file.unlock();
                result
            }
            Err(e) => {
                let _ = file.unlock();
                Err(e)
            }
        }
    }

    /// The open log, reopened when another process rotated it away.
    fn current(&mut self) -> std::io::Result<&mut File> {
        use std::os::unix::fs::MetadataExt;
        let stale = match (&self.file, std::fs::metadata(&self.path)) {
            (Some(f), Ok(on_disk)) => f
                .metadata()
                .map(|m| m.ino() != on_disk.ino() || m.dev() != on_disk.dev())
                .unwrap_or(true),
            (Some(_), Err(_)) | (None, _) => true,
        };
        if stale {
            self.file = Some(open_log(&self.path)?);
        }
        Ok(self.file.as_mut().expect("opened above"))
    }

    /// Moves `PATH` to `PATH.1` (and older ones up to `PATH.keep`).
    fn rotate(&mut self) -> std::io::Result<()> {
        let name = |i: usize| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{i}"));
            PathBuf::from(p)
        };
        if self.keep == 0 {
            return std::fs::remove_file(&self.path);
        }
        for i in (1..self.keep).rev() {
            let from = name(i);
            if from.exists() {
                std::fs::rename(&from, name(i + 1))?;
            }
        }
        std::fs::rename(&self.path, name(1))
    }

    fn warn(&mut self, e: &std::io::Error) {
        let now = Instant::now();
        if self
            .last_warning
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
        {
            self.last_warning = Some(now);
            tracing::warn!(
                path = %self.path.display(),
                error = %e,
                dropped = self.stats.dropped.load(Ordering::Relaxed),
                "audit log: a record could not be written (counted in toolexec_audit_records_dropped_total)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records rotate into `PATH.1`…`PATH.keep`, every line whole, none
    /// lost but those rotated past `keep`, and `flush` waits for them.
    #[test]
    fn records_rotate_whole() {
        let dir = std::env::temp_dir().join(format!("toolexec-audit-rot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let mut options = AuditOptions::new(&path);
        options.max_bytes = 2_000;
        options.keep = 2;
        let log = AuditLog::open(options).unwrap();
        let args = serde_json::json!({"q": "x", "token": "t0p"});
        for _ in 0..40 {
            log.call_finished(&CallRecord {
                tool: "demo:echo",
                namespace: "demo",
                backend: "local",
                arguments: Some(&args),
                error: None,
                validation: Duration::ZERO,
                duration: Duration::from_millis(1),
                caller: None,
                trace_id: None,
            });
        }
        log.flush(Duration::from_secs(10));
        assert_eq!(log.stats().written.load(Ordering::Relaxed), 40);
        let mut lines = 0;
        for p in [
            path.clone(),
            dir.join("audit.jsonl.1"),
            dir.join("audit.jsonl.2"),
        ] {
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(
                text.len() <= 2_000,
                "{} is {} bytes",
                p.display(),
                text.len()
            );
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(v["tool"], "demo:echo");
                assert!(!line.contains("t0p"), "arguments are not recorded: {line}");
                lines += 1;
            }
        }
        assert!(
            lines > 0 && lines < 40,
            "older files past keep are gone: {lines}"
        );
        assert!(!dir.join("audit.jsonl.3").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_cut_record_is_trimmed_on_open() {
        let dir = std::env::temp_dir().join(format!("toolexec-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        std::fs::write(&path, b"{\"a\":1}\n{\"b\":").unwrap();
        drop(open_log(&path).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}\n");
        std::fs::write(&path, b"no newline at all").unwrap();
        drop(open_log(&path).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
