//! Delete receipts: the proof that a document left the index. One receipt per document whose
//! removal a commit made durable (its last chunk deleted, a delete of a document the index never
//! held, a document removed after a refusal), kept in an append-only log beside the index
//! ([`RECEIPTS_FILE`]) that retrieval never reads.
//!
//! **A receipt exists if and only if its commit does.** The writer appends a commit's receipts,
//! stamped with the opstamp tantivy gives that commit, and syncs them to disk before it commits
//! ([`crate::ChunkIndexWriter::commit_with_receipts`]); the commit's payload carries the same
//! opstamp. So a receipt is never lost after its commit (it was on disk first). A receipt whose
//! commit never happened (a crash or a failed commit in between) has an opstamp above the
//! index's committed one: readers never show it (they read up to the opstamp of the commit they
//! serve), and the writer cuts it off when it opens the index or rolls back, before tantivy can
//! hand out that opstamp again.
//!
//! Each line is `<checksum> <json>`: the first 16 hex digits of the blake3 hash of the JSON. A
//! line cut short by a crash during an append (necessarily the last ones) is a torn tail:
//! readers stop before it and the writer cuts it off. A damaged line followed by a sound one is
//! damage, an error for readers and the writer alike: a record of deletions is never repaired
//! by guessing.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The receipts log, in the index directory.
pub const RECEIPTS_FILE: &str = "freshet_deletes.jsonl";

/// Where the record that asked for a removal was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Why a document left the index.
pub mod cause {
    /// A delete record (a tombstone, an envelope delete, a CDC delete).
    pub const DELETE: &str = "delete";
    /// A record refused (dead-lettered) that named the document: the document leaves both
    /// indexes rather than serve an older version; the receipt's `class` says why.
    pub const REFUSED: &str = "refused";
}

/// One document's durable removal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteReceipt {
    pub doc_id: String,
    /// [`cause::DELETE`] or [`cause::REFUSED`].
    pub cause: String,
    /// The dead-letter class of a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The record that asked for the removal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceRecord>,
    /// That record's timestamp (ms since the Unix epoch), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_timestamp_ms: Option<i64>,
    /// Chunks the commit removed (0: the index held nothing of the document).
    pub chunks_removed: u64,
    /// tantivy's opstamp of the commit that made the removal durable (its payload's
    /// [`crate::CommitPayload::opstamp`]). Set by the writer.
    #[serde(default)]
    pub opstamp: u64,
    /// The pipeline epoch of that commit. Set by the writer.
    #[serde(default)]
    pub epoch: u64,
    /// When that commit was made (ms since the Unix epoch). Set by the writer.
    #[serde(default)]
    pub completed_at_ms: u64,
}

/// A receipt with its place in the log (0-based, stable: the paging cursor).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Numbered {
    pub seq: u64,
    #[serde(flatten)]
    pub receipt: DeleteReceipt,
}

/// Which receipts to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiptQuery {
    /// Only this document's.
    pub doc_id: Option<String>,
    /// Only those completed at or after this time (ms since the Unix epoch).
    pub since_ms: Option<u64>,
    /// Only those after this place in the log (a previous page's last `seq`).
    pub after_seq: Option<u64>,
    /// At most this many (oldest first).
    pub limit: usize,
}

fn checksum(json: &str) -> String {
    blake3::hash(json.as_bytes()).to_hex()[..16].to_string()
}

fn encode(r: &DeleteReceipt) -> Result<String> {
    let json = serde_json::to_string(r).map_err(|e| Error::Payload(e.to_string()))?;
    Ok(format!("{} {json}\n", checksum(&json)))
}

/// A line's receipt, `None` when the line is not sound.
fn decode(line: &[u8]) -> Option<DeleteReceipt> {
    let line = std::str::from_utf8(line).ok()?;
    let (sum, json) = line.split_once(' ')?;
    if sum != checksum(json) {
        return None;
    }
    serde_json::from_str(json).ok()
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { op, path, source }
}

/// The sound receipts of the log at `path`, each with the byte offset after its line, up to
/// the torn tail if there is one. Damage before a sound line is an error.
fn scan(path: &Path) -> Result<Vec<(DeleteReceipt, u64)>> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => f
            .read_to_end(&mut bytes)
            .map_err(io("read delete receipts", path))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("open delete receipts", path)(e)),
    };
    let mut out = Vec::new();
    let mut at = 0usize;
    let mut torn: Option<usize> = None;
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        let end = at + line.len();
        let sound = line
            .ends_with(b"\n")
            .then(|| decode(&line[..line.len() - 1]))
            .flatten();
        match (sound, torn) {
            (Some(r), None) => out.push((r, end as u64)),
            (Some(_), Some(line_no)) => {
                return Err(Error::Payload(format!(
                    "the delete receipts log {} is damaged at line {}: move it aside to keep \
                     it, and restore it from a backup",
                    path.display(),
                    line_no + 1
                )))
            }
            (None, None) => torn = Some(out.len()),
            (None, Some(_)) => {}
        }
        at = end;
    }
    Ok(out)
}

/// Reads the receipts of the commits up to `opstamp` (the commit a reader serves) from the log
/// in `dir` that `query` asks for, oldest first.
pub fn read(dir: &Path, opstamp: u64, query: &ReceiptQuery) -> Result<Vec<Numbered>> {
    let path = dir.join(RECEIPTS_FILE);
    Ok(scan(&path)?
        .into_iter()
        .enumerate()
        .map(|(seq, (receipt, _))| Numbered {
            seq: seq as u64,
            receipt,
        })
        .filter(|n| n.receipt.opstamp <= opstamp)
        .filter(|n| query.after_seq.is_none_or(|a| n.seq > a))
        .filter(|n| {
            query
                .doc_id
                .as_deref()
                .is_none_or(|d| n.receipt.doc_id == d)
        })
        .filter(|n| {
            query
                .since_ms
                .is_none_or(|s| n.receipt.completed_at_ms >= s)
        })
        .take(query.limit)
        .collect())
}

/// The writer's side of the log: appends before each commit, cuts off what no commit covers.
#[derive(Debug)]
pub(crate) struct ReceiptLog {
    path: PathBuf,
}

impl ReceiptLog {
    /// The log in `dir`, cut back to the receipts of commits up to `committed` (the index's
    /// committed opstamp).
    pub(crate) fn open(dir: &Path, committed: u64) -> Result<ReceiptLog> {
        let log = ReceiptLog {
            path: dir.join(RECEIPTS_FILE),
        };
        log.cut_after(committed)?;
        Ok(log)
    }

    /// Drops the receipts of commits after `committed` and any torn tail.
    pub(crate) fn cut_after(&self, committed: u64) -> Result<()> {
        if !self.path.exists() {
            return Ok(());
        }
        let keep = scan(&self.path)?
            .into_iter()
            .take_while(|(r, _)| r.opstamp <= committed)
            .last()
            .map_or(0, |(_, end)| end);
        let len = std::fs::metadata(&self.path)
            .map_err(io("stat delete receipts", &self.path))?
            .len();
        if len != keep {
            tracing::info!(
                path = %self.path.display(),
                dropped_bytes = len - keep,
                "delete receipts of a commit that did not happen cut off"
            );
            let f = OpenOptions::new()
                .write(true)
                .open(&self.path)
                .map_err(io("open delete receipts", &self.path))?;
            f.set_len(keep)
                .map_err(io("truncate delete receipts", &self.path))?;
            f.sync_all()
                .map_err(io("sync delete receipts", &self.path))?;
        }
        Ok(())
    }

    /// Appends `receipts` and syncs them to disk (the directory too when the log is new).
    pub(crate) fn append(&self, receipts: &[DeleteReceipt]) -> Result<()> {
        if receipts.is_empty() {
            return Ok(());
        }
        let mut text = String::new();
        for r in receipts {
            text.push_str(&encode(r)?);
        }
        let new = !self.path.exists();
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(io("open delete receipts", &self.path))?;
        f.write_all(text.as_bytes())
            .map_err(io("append delete receipts", &self.path))?;
        f.sync_data()
            .map_err(io("sync delete receipts", &self.path))?;
        if new {
            if let Some(dir) = self.path.parent() {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io("sync index directory", dir))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "receipts_tests.rs"]
mod tests;
