//! [`DiskCache`]: vectors by cache key in an append-only log file with per-record checksums.
//!
//! Layout: a 16-byte header (`FRSHVEC1`, format version u32 LE, 4 reserved bytes), then records
//!
//! ```text
//! payload_len u32 LE | key [u8; 32] | payload (f32 LE × dim) | checksum [u8; 16]
//! ```
//!
//! where checksum = the first 16 bytes of blake3(payload_len ‖ key ‖ payload). Records are only
//! ever appended; the last record for a key wins. Opening scans the file, verifies every
//! checksum, builds an in-memory index (key → offset, ~70 bytes of RAM per entry) and truncates a
//! torn tail (a write cut short by SIGKILL or power loss), so a crash loses at most the batch being
//! written and never corrupts what was there. A batch is one `write` of all its records followed
//! by `fdatasync`; reads verify the checksum again.
//!
//! Why not a B-tree (redb): these records are write-once and ~1.6 KB each; redb stored them at
//! ~5.3 KB per entry (100k entries: 515 MiB, compaction did not help), this log at ~1.6 KB.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use freshet_core::embed::{EmbedError, VectorCache};

use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"FRSHVEC1";
const VERSION: u32 = 1;
const HEADER_LEN: u64 = 16;
const KEY_LEN: usize = 32;
const SUM_LEN: usize = 16;
/// Bytes of a record besides its payload.
const OVERHEAD: usize = 4 + KEY_LEN + SUM_LEN;
/// Largest payload accepted (a 262144-dimensional vector); guards the scan against garbage.
const MAX_PAYLOAD: u32 = 1 << 20;

/// Where a record's payload lies.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Offset of the record (its length field).
    offset: u64,
    payload_len: u32,
}

/// A persistent, crash-safe [`VectorCache`] (see the module docs for the format).
///
/// One process at a time: the file is locked (`flock`) while open, and a second open, in the
/// same or another process, fails with a clear error.
pub struct DiskCache {
    file: File,
    path: PathBuf,
    index: HashMap<[u8; 32], Slot>,
    /// End of the last valid record: where the next batch goes.
    end: u64,
}

impl std::fmt::Debug for DiskCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskCache")
            .field("path", &self.path)
            .field("entries", &self.index.len())
            .field("bytes", &self.end)
            .finish_non_exhaustive()
    }
}

fn checksum(len: &[u8], key: &[u8], payload: &[u8]) -> [u8; SUM_LEN] {
    let mut h = blake3::Hasher::new();
    h.update(len);
    h.update(key);
    h.update(payload);
    let mut out = [0; SUM_LEN];
    out.copy_from_slice(&h.finalize().as_bytes()[..SUM_LEN]);
    out
}

impl DiskCache {
    /// Opens the cache file at `path`, creating it (and its parent directories) if needed, and
    /// repairs a torn tail left by a crash.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let err = |reason: String| Error::Cache {
            path: path.clone(),
            reason,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| err(format!("cannot create {}: {e}", parent.display())))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| err(format!("cannot open: {e}")))?;
        // SAFETY: flock on a valid, owned descriptor; no memory is involved.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(err(format!(
                "{} (locked by another DiskCache in this or another process): {}",
                crate::error::CACHE_IN_USE,
                std::io::Error::last_os_error()
            )));
        }
        let size = file
            .metadata()
            .map_err(|e| err(format!("cannot stat: {e}")))?
            .len();
        let mut cache = DiskCache {
            file,
            path: path.clone(),
            index: HashMap::new(),
            end: HEADER_LEN,
        };
        if size < HEADER_LEN {
            // New (or cut short before its header was complete, which means it held nothing).
            let mut header = [0u8; HEADER_LEN as usize];
            header[..8].copy_from_slice(MAGIC);
            header[8..12].copy_from_slice(&VERSION.to_le_bytes());
            cache.file.set_len(0).map_err(|e| err(e.to_string()))?;
            cache
                .file
                .write_all_at(&header, 0)
                .and_then(|_| cache.file.sync_all())
                .map_err(|e| err(format!("cannot write the header: {e}")))?;
            if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                // Make the new file's directory entry durable (best effort).
                let _ = File::open(dir).and_then(|d| d.sync_all());
            }
            return Ok(cache);
        }
        cache.scan(size)?;
        Ok(cache)
    }

    /// Reads every record, builds the index, truncates an invalid tail.
    fn scan(&mut self, size: u64) -> Result<()> {
        let mut r = BufReader::with_capacity(1 << 20, &self.file);
        let mut header = [0u8; HEADER_LEN as usize];
        r.read_exact(&mut header).map_err(|e| self.err(e))?;
        if &header[..8] != MAGIC {
            return Err(self.err("not a freshet vector cache (bad magic)"));
        }
        let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(self.err(format!(
                "format version {version}, this build reads {VERSION}"
            )));
        }
        let mut pos = HEADER_LEN;
        let mut buf = Vec::new();
        let mut bad = None;
        while pos < size {
            let mut len_b = [0u8; 4];
            if size - pos < OVERHEAD as u64 || r.read_exact(&mut len_b).is_err() {
                bad = Some("a truncated record");
                break;
            }
            let len = u32::from_le_bytes(len_b);
            if len > MAX_PAYLOAD || len % 4 != 0 {
                bad = Some("an invalid record length");
                break;
            }
            let rec_len = OVERHEAD as u64 + len as u64;
            if size - pos < rec_len {
                bad = Some("a truncated record");
                break;
            }
            buf.resize(rec_len as usize - 4, 0);
            if r.read_exact(&mut buf).is_err() {
                bad = Some("a truncated record");
                break;
            }
            let (key, rest) = buf.split_at(KEY_LEN);
            let (payload, sum) = rest.split_at(len as usize);
            if checksum(&len_b, key, payload) != sum {
                bad = Some("a checksum mismatch");
                break;
            }
            let key: [u8; 32] = key.try_into().expect("32 bytes");
            self.index.insert(
                key,
                Slot {
                    offset: pos,
                    payload_len: len,
                },
            );
            pos += rec_len;
        }
        drop(r);
        if let Some(why) = bad {
            tracing::warn!(path = %self.path.display(), valid_bytes = pos, dropped_bytes = size - pos,
                entries = self.index.len(), "vector cache: {why}; truncating the file after the last valid record");
            self.file
                .set_len(pos)
                .and_then(|_| self.file.sync_all())
                .map_err(|e| self.err(format!("cannot truncate the invalid tail: {e}")))?;
        }
        self.end = pos;
        Ok(())
    }

    /// Number of stored vectors.
    pub fn len(&self) -> u64 {
        self.index.len() as u64
    }

    /// Whether no vector is stored.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The cache file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the file in bytes.
    pub fn file_len(&self) -> u64 {
        self.end
    }

    fn read(&self, key: &[u8; 32], slot: Slot, buf: &mut Vec<u8>) -> Result<Vec<f32>> {
        buf.resize(OVERHEAD + slot.payload_len as usize, 0);
        self.file
            .read_exact_at(buf, slot.offset)
            .map_err(|e| self.err(format!("read at {}: {e}", slot.offset)))?;
        let (len_b, rest) = buf.split_at(4);
        let (k, rest) = rest.split_at(KEY_LEN);
        let (payload, sum) = rest.split_at(slot.payload_len as usize);
        if len_b != slot.payload_len.to_le_bytes() || k != key || checksum(len_b, k, payload) != sum
        {
            return Err(self.err(format!(
                "the record at {} changed on disk (checksum mismatch)",
                slot.offset
            )));
        }
        Ok(payload
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// Looks up `keys`; `None` for a miss.
    pub fn get(&self, keys: &[[u8; 32]]) -> Result<Vec<Option<Vec<f32>>>> {
        let mut buf = Vec::new();
        keys.iter()
            .map(|k| match self.index.get(k) {
                Some(&slot) => self.read(k, slot, &mut buf).map(Some),
                None => Ok(None),
            })
            .collect()
    }

    /// Appends `entries` (one write, then `fdatasync`: durable when this returns). A key that is
    /// already stored with the same vector is skipped; with another vector, the new one wins.
    pub fn put(&mut self, entries: &[([u8; 32], Vec<f32>)]) -> Result<()> {
        let mut out = Vec::new();
        let mut added = Vec::with_capacity(entries.len());
        let mut buf = Vec::new();
        let mut in_batch: HashMap<[u8; 32], usize> = HashMap::new();
        for (key, v) in entries {
            let payload_len = u32::try_from(v.len() * 4)
                .ok()
                .filter(|l| *l <= MAX_PAYLOAD)
                .ok_or_else(|| {
                    self.err(format!("a {}-dimensional vector is too large", v.len()))
                })?;
            if !in_batch.contains_key(key) {
                if let Some(&slot) = self.index.get(key) {
                    let same = slot.payload_len == payload_len
                        && self.read(key, slot, &mut buf).is_ok_and(|old| {
                            old.iter().zip(v).all(|(a, b)| a.to_bits() == b.to_bits())
                        });
                    if same {
                        continue;
                    }
                }
            }
            let offset = self.end + out.len() as u64;
            let len_b = payload_len.to_le_bytes();
            let start = out.len();
            out.extend_from_slice(&len_b);
            out.extend_from_slice(key);
            out.extend(v.iter().flat_map(|x| x.to_le_bytes()));
            let sum = checksum(&len_b, key, &out[start + 4 + KEY_LEN..]);
            out.extend_from_slice(&sum);
            in_batch.insert(*key, added.len());
            added.push((
                *key,
                Slot {
                    offset,
                    payload_len,
                },
            ));
        }
        if out.is_empty() {
            return Ok(());
        }
        if let Err(e) = self
            .file
            .write_all_at(&out, self.end)
            .and_then(|_| self.file.sync_data())
        {
            // Leave no partial batch behind (best effort: the next open would drop it anyway).
            let _ = self.file.set_len(self.end);
            return Err(self.err(format!("append failed: {e}")));
        }
        self.end += out.len() as u64;
        self.index.extend(added);
        Ok(())
    }

    fn err(&self, e: impl std::fmt::Display) -> Error {
        Error::Cache {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }
}

impl VectorCache for DiskCache {
    fn get_many(&self, keys: &[[u8; 32]]) -> Result<Vec<Option<Vec<f32>>>, EmbedError> {
        Ok(self.get(keys)?)
    }

    fn put_many(&mut self, entries: &[([u8; 32], Vec<f32>)]) -> Result<(), EmbedError> {
        Ok(self.put(entries)?)
    }
}

mod compact;

pub use compact::Compaction;

#[cfg(test)]
pub(crate) mod tests;
