//! Compaction: a new cache file holding only the entries a caller keeps (the texts still
//! indexed), written beside the old one, synced, and renamed over it. The records kept are
//! copied byte for byte (each checksum checked on the way); an entry overwritten by a later
//! record for its key leaves with the rest of the dead weight.
//!
//! The new file is locked before it replaces the old one, so the path is never unlocked while
//! the cache is open. A failure before the rename leaves the old file as it was (the partial new
//! one is removed); a crash leaves at most a stale `*.compact` file, removed by the next
//! compaction.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;

use super::{checksum, DiskCache, Slot, HEADER_LEN, KEY_LEN, MAGIC, OVERHEAD, VERSION};
use crate::error::Result;

/// What one compaction did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compaction {
    pub entries_before: u64,
    pub entries_after: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

impl Compaction {
    /// Entries dropped.
    pub fn dropped(&self) -> u64 {
        self.entries_before - self.entries_after
    }
}

/// Bytes written to the new file at a time.
const WRITE_CHUNK: usize = 8 << 20;

impl DiskCache {
    /// Keeps only the entries whose key `keep` accepts (see the module docs). On success the
    /// cache reads and appends to the new file.
    pub fn compact(&mut self, keep: impl Fn(&[u8; 32]) -> bool) -> Result<Compaction> {
        let before = Compaction {
            entries_before: self.len(),
            bytes_before: self.end,
            ..Compaction::default()
        };
        let tmp = self.compact_path();
        match self.write_compacted(&tmp, &keep) {
            Ok((file, index, end)) => {
                if let Err(e) = std::fs::rename(&tmp, &self.path) {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(self.err(format!("cannot replace the cache file: {e}")));
                }
                if let Some(dir) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    File::open(dir)
                        .and_then(|d| d.sync_all())
                        .map_err(|e| self.err(format!("cannot sync {}: {e}", dir.display())))?;
                }
                // The old file (and its lock) goes; the new one is locked already.
                self.file = file;
                self.index = index;
                self.end = end;
                Ok(Compaction {
                    entries_after: self.len(),
                    bytes_after: end,
                    ..before
                })
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// What [`DiskCache::compact`] with `keep` would do, without doing it.
    pub fn plan(&self, keep: impl Fn(&[u8; 32]) -> bool) -> Compaction {
        let kept = self.index.iter().filter(|(k, _)| keep(k));
        let (entries, bytes) = kept.fold((0u64, HEADER_LEN), |(n, b), (_, s)| {
            (n + 1, b + (OVERHEAD + s.payload_len as usize) as u64)
        });
        Compaction {
            entries_before: self.len(),
            entries_after: entries,
            bytes_before: self.end,
            bytes_after: bytes,
        }
    }

    /// Where a compaction writes the new file: beside the cache, `.compact` appended.
    fn compact_path(&self) -> PathBuf {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".compact");
        self.path.with_file_name(name)
    }

    /// Writes the kept records to `tmp` (locked, synced): the file, its index and its end.
    fn write_compacted(
        &self,
        tmp: &PathBuf,
        keep: &impl Fn(&[u8; 32]) -> bool,
    ) -> Result<(File, HashMap<[u8; 32], Slot>, u64)> {
        let _ = std::fs::remove_file(tmp);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(tmp)
            .map_err(|e| self.err(format!("cannot create {}: {e}", tmp.display())))?;
        // SAFETY: flock on a valid, owned descriptor; no memory is involved.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(self.err(format!(
                "cannot lock {}: {}",
                tmp.display(),
                std::io::Error::last_os_error()
            )));
        }
        let mut kept: Vec<(&[u8; 32], Slot)> = self
            .index
            .iter()
            .filter(|(k, _)| keep(k))
            .map(|(k, s)| (k, *s))
            .collect();
        // In the order of the old file: reads sweep it forward.
        kept.sort_by_key(|(_, s)| s.offset);
        let mut out = Vec::with_capacity(WRITE_CHUNK.min(kept.len() * 1600 + 64));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        let mut written = 0u64;
        let mut index = HashMap::with_capacity(kept.len());
        let write = |out: &mut Vec<u8>, written: &mut u64| -> Result<()> {
            file.write_all_at(out, *written)
                .map_err(|e| self.err(format!("cannot write {}: {e}", tmp.display())))?;
            *written += out.len() as u64;
            out.clear();
            Ok(())
        };
        for (key, slot) in kept {
            let start = out.len();
            out.resize(start + OVERHEAD + slot.payload_len as usize, 0);
            self.file
                .read_exact_at(&mut out[start..], slot.offset)
                .map_err(|e| self.err(format!("read at {}: {e}", slot.offset)))?;
            let record = &out[start..];
            let (len_b, rest) = record.split_at(4);
            let (k, rest) = rest.split_at(KEY_LEN);
            let (payload, sum) = rest.split_at(slot.payload_len as usize);
            if k != key || checksum(len_b, k, payload) != sum {
                return Err(self.err(format!(
                    "the record at {} changed on disk (checksum mismatch)",
                    slot.offset
                )));
            }
            index.insert(
                *key,
                Slot {
                    offset: written + start as u64,
                    payload_len: slot.payload_len,
                },
            );
            if out.len() >= WRITE_CHUNK {
                write(&mut out, &mut written)?;
            }
        }
        write(&mut out, &mut written)?;
        debug_assert!(written >= HEADER_LEN);
        file.sync_all()
            .map_err(|e| self.err(format!("cannot sync {}: {e}", tmp.display())))?;
        Ok((file, index, written))
    }
}
