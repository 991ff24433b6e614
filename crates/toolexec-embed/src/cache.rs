//! [`CachedEmbedder`]: vectors of passages already embedded, kept on disk.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use toolexec::Error;
use toolexec::search::Embedder;

use crate::model::hex;

/// Bytes of a passage's key.
const KEY: usize = 32;
/// The first bytes of a cache file, then the vector length (`u32` LE).
const MAGIC: [u8; 4] = *b"TXV1";
/// Bytes before the first record.
const HEADER: usize = 8;

/// An [`Embedder`] in front of another that remembers every vector it got,
/// in memory and in one append-only file per model under a cache
/// directory (`<dir>/<model id>.vectors`: records of a 32-byte SHA-256 of
/// the passage then the vector's `f32`s, little-endian). Restarting with
/// the same tools re-embeds nothing; a changed description re-embeds that
/// tool only. A record cut short by a crash is ignored when the file is
/// read; a cache that cannot be written is logged once and the vectors stay
/// in memory.
pub struct CachedEmbedder<E> {
    inner: E,
    path: PathBuf,
    state: Mutex<State>,
}

struct State {
    known: HashMap<[u8; KEY], Vec<f32>>,
    file: Option<File>,
    warned: bool,
}

impl<E: Embedder> CachedEmbedder<E> {
    /// `inner` with the cache of its model under `dir` (created if
    /// missing; read now).
    pub fn new(inner: E, dir: &Path) -> Self {
        let path = dir.join(format!("{}.vectors", sanitize(inner.model_id())));
        let known = read_records(&path).unwrap_or_default();
        CachedEmbedder {
            inner,
            path,
            state: Mutex::new(State {
                known,
                file: None,
                warned: false,
            }),
        }
    }

    /// The cache file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Vectors in the cache.
    pub fn cached(&self) -> usize {
        self.state.lock().known.len()
    }
}

impl<E: Embedder> Embedder for CachedEmbedder<E> {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn embed(&self, passages: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        let keys: Vec<[u8; KEY]> = passages.iter().map(|p| key(p)).collect();
        let missing: Vec<usize> = {
            let state = self.state.lock();
            (0..passages.len())
                .filter(|&i| !state.known.contains_key(&keys[i]))
                .collect()
        };
        if !missing.is_empty() {
            let texts: Vec<&str> = missing.iter().map(|&i| passages[i]).collect();
            let vectors = self.inner.embed(&texts)?;
            let mut state = self.state.lock();
            let dim = vectors.first().map_or(0, Vec::len);
            let mut bytes = Vec::new();
            for (&i, vector) in missing.iter().zip(vectors) {
                bytes.extend_from_slice(&keys[i]);
                for x in &vector {
                    bytes.extend_from_slice(&x.to_le_bytes());
                }
                state.known.insert(keys[i], vector);
            }
            self.append(&mut state, dim, &bytes);
        }
        let state = self.state.lock();
        Ok(keys
            .iter()
            .map(|k| state.known.get(k).cloned().unwrap_or_default())
            .collect())
    }

    /// Queries go to the model every time: cached, every query anyone
    /// typed would grow the file without bound.
    fn embed_query(&self, passages: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        self.inner.embed_query(passages)
    }
}

impl<E: Embedder> CachedEmbedder<E> {
    /// Appends whole records in one write (the file is opened in append
    /// mode, so concurrent writers do not interleave within a record).
    fn append(&self, state: &mut State, dim: usize, bytes: &[u8]) {
        let result = (|| -> std::io::Result<()> {
            if state.file.is_none() {
                if let Some(dir) = self.path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                let file = open_for_append(&self.path, dim)?;
                state.file = Some(file);
            }
            state.file.as_mut().map_or(Ok(()), |f| f.write_all(bytes))
        })();
        if let Err(e) = result
            && !state.warned
        {
            state.warned = true;
            tracing::warn!(path = %self.path.display(), error = %e, "embedding cache not written; vectors stay in memory");
        }
    }
}

/// The cache file ready for appending records of `dim` components: a
/// file of another format or length starts over; a partial last record (a
/// crash mid-write) is cut off, so later records stay aligned.
fn open_for_append(path: &Path, dim: usize) -> std::io::Result<File> {
    let record = KEY + 4 * dim;
    let valid = std::fs::read(path).ok().and_then(|bytes| {
        let header = bytes.get(..HEADER)?;
        let file_dim = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        (header[..4] == MAGIC && file_dim == dim)
            .then(|| HEADER + (bytes.len() - HEADER) / record * record)
    });
    match valid {
        Some(len) => {
            OpenOptions::new()
                .write(true)
                .open(path)?
                .set_len(len as u64)?;
        }
        None => {
            let mut header = MAGIC.to_vec();
            header.extend_from_slice(&(dim as u32).to_le_bytes());
            std::fs::write(path, header)?;
        }
    }
    OpenOptions::new().append(true).open(path)
}

fn key(passage: &str) -> [u8; KEY] {
    Sha256::digest(passage.as_bytes()).into()
}

/// The records of a cache file (after its header: [`MAGIC`] and the
/// vector length); a trailing partial record, as a crash mid-write leaves,
/// is dropped, and a file of another format is ignored (and rewritten).
fn read_records(path: &Path) -> Option<HashMap<[u8; KEY], Vec<f32>>> {
    let mut bytes = Vec::new();
    File::open(path).ok()?.read_to_end(&mut bytes).ok()?;
    let header = bytes.get(..HEADER)?;
    if header[..4] != MAGIC {
        return None;
    }
    let dim = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if dim == 0 {
        return None;
    }
    let record = KEY + 4 * dim;
    let body = &bytes[HEADER..];
    let mut known = HashMap::with_capacity(body.len() / record);
    for chunk in body.chunks_exact(record) {
        let mut k = [0u8; KEY];
        k.copy_from_slice(&chunk[..KEY]);
        let vector = chunk[KEY..]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        known.insert(k, vector);
    }
    Some(known)
}

fn sanitize(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() { hex(&key(id)[..8]) } else { s }
}
