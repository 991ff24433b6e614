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
    tx: SyncSender<Vec<u8>>,
    stats: Arc<AuditStats>,
    record_arguments: bool,
    max_argument_bytes: usize,
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
            size: file.metadata().map(|m| m.len()).unwrap_or(0),
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
        })
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
            args_digest: call.arguments.map(redact::digest),
            args: call
                .arguments
                .filter(|_| self.record_arguments)
                .map(|a| redact::redacted_text(a, self.max_argument_bytes)),
            outcome: call.error.map_or("ok", |e| e.code().as_str()),
            limit,
            duration_ms: call.duration.as_secs_f64() * 1e3,
            trace_id: current_trace().map(|t| t.trace_id().to_owned()),
        };
        let Ok(mut line) = serde_json::to_vec(&entry) else {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        line.push(b'\n');
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
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
    size: u64,
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    stats: Arc<AuditStats>,
    last_warning: Option<Instant>,
}

impl Writer {
    fn run(mut self, rx: Receiver<Vec<u8>>) {
        while let Ok(line) = rx.recv() {
            if let Err(e) = self.append(&line) {
                self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                self.warn(&e);
            } else {
                self.stats.written.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        let file = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(open_log(&self.path)?),
        };
        // One write for the whole line: a short write (a full disk) is
        // trimmed back so the file never holds half a record.
        match file.write(line) {
            Ok(n) if n == line.len() => {
                self.size += n as u64;
                Ok(())
            }
            Ok(n) => {
                let _ = file.set_len(self.size);
                Err(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    format!("short write ({n} of {} bytes)", line.len()),
                ))
            }
            Err(e) => Err(e),
        }
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file = None;
        let name = |i: usize| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{i}"));
            PathBuf::from(p)
        };
        if self.keep == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            for i in (1..self.keep).rev() {
                let from = name(i);
                if from.exists() {
                    std::fs::rename(&from, name(i + 1))?;
                }
            }
            std::fs::rename(&self.path, name(1))?;
        }
        self.file = Some(open_log(&self.path)?);
        self.size = 0;
        Ok(())
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
