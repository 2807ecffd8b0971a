//! The changelog: the chunk changes of every durable batch of the pipeline, on a compacted
//! topic, for query replicas that keep their own BM25 index (`docs/replicas.md`).
//!
//! One record per chunk change, keyed by the chunk id: an upsert carries the chunk record the
//! pipeline's tantivy index stores (every stored and indexed field is built from it), a delete
//! is a tombstone (no value). After the pipeline commits a batch it writes a batch marker
//! ([`Marker`], key [`MARKER_KEY`]: compaction keeps the latest), which carries the source
//! offsets the commit covers. A replica applies the changes it has read only at a marker
//! ([`assemble::Assembler`]), so it serves only states the pipeline committed.
//!
//! - [`encode_upsert`], [`encode_delete`], [`encode_marker`] and [`decode`]: records to and
//!   from bytes (round-trip tested); [`mark_batch_end`] and [`ends_batch`], [`durable_at_ms`]:
//!   the headers that let a replica build a batch's segment before its marker and time its lag
//!   from the pipeline's durable commit.
//! - [`assemble`]: changes gathered into the batches a replica commits.
//! - [`config`]: `[replication]`, the topic and its compaction settings.

pub mod assemble;
pub mod config;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::chunk::Chunk;

/// The key of the batch markers (a NUL first: no chunk id starts with one).
pub const MARKER_KEY: &[u8] = b"\0batch";
/// The header naming the record format; a replica refuses records of another.
pub const FORMAT_HEADER: &str = "freshet.changelog.format";
/// The format this build writes and reads.
pub const FORMAT: &str = "1";
/// The header carrying the epoch of the pipeline batch a change belongs to.
pub const EPOCH_HEADER: &str = "freshet.changelog.epoch";
/// The header on the last change record of a batch ([`mark_batch_end`]): every change of the
/// batch is read, so a replica may build their segment while the pipeline commits, before the
/// batch's marker arrives (it still commits only at the marker).
pub const BATCH_END_HEADER: &str = "freshet.changelog.batch_end";
/// The header of a marker saying when the pipeline's commit of the batch was durable (Unix ms):
/// the start of a replica's lag. The marker's own `committed_at_ms` is stamped before the
/// commit, inside the commit's payload.
pub const DURABLE_AT_HEADER: &str = "freshet.changelog.durable_at_ms";

/// Source offsets: topic → partition → next offset to read.
pub type SourceOffsets = BTreeMap<String, BTreeMap<i32, i64>>;

/// A record's headers, as the Kafka connector carries them.
pub type Headers = Vec<(String, Option<Vec<u8>>)>;

/// What the pipeline committed with a batch: written after the commit, so that a marker
/// always stands for a committed state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    /// The pipeline epoch of the commit.
    pub epoch: u64,
    /// The source offsets the commit covers (what `/v1/index/wait` answers for).
    pub source_offsets: SourceOffsets,
    /// When the pipeline committed (Unix ms).
    pub committed_at_ms: u64,
    /// The id binding the pipeline's index to its Milvus collection, which a replica's index
    /// carries too (the replica searches the same collection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_id: Option<String>,
}

/// One changelog record, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The chunk as the pipeline's index stores it.
    Upsert(Box<Chunk>),
    /// The chunk id removed.
    Delete(String),
    /// The end of a committed batch.
    Marker(Marker),
}

/// One record to produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    pub key: Vec<u8>,
    /// `None`: a tombstone.
    pub value: Option<Vec<u8>>,
    pub headers: Headers,
}

/// Why a changelog record cannot be read. A replica stops on one (skipping it would leave its
/// index silently different from the pipeline's).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChangelogError {
    #[error("changelog record without a key")]
    NoKey,
    #[error("changelog record of format {0:?}; this build reads format {FORMAT}")]
    Format(String),
    #[error("changelog record for chunk {key:?}: {message}")]
    Chunk { key: String, message: String },
    #[error("changelog batch marker: {0}")]
    Marker(String),
}

fn headers(epoch: Option<u64>) -> Headers {
    let mut h = vec![(FORMAT_HEADER.to_string(), Some(FORMAT.as_bytes().to_vec()))];
    if let Some(e) = epoch {
        h.push((EPOCH_HEADER.to_string(), Some(e.to_string().into_bytes())));
    }
    h
}

/// The record of `chunk` written by the batch of `epoch`.
pub fn encode_upsert(chunk: &Chunk, epoch: u64) -> Encoded {
    Encoded {
        key: chunk.chunk_id.as_bytes().to_vec(),
        value: Some(serde_json::to_vec(chunk).expect("a chunk serializes")),
        headers: headers(Some(epoch)),
    }
}

/// The tombstone of `chunk_id` removed by the batch of `epoch`.
pub fn encode_delete(chunk_id: &str, epoch: u64) -> Encoded {
    Encoded {
        key: chunk_id.as_bytes().to_vec(),
        value: None,
        headers: headers(Some(epoch)),
    }
}

/// The marker record of a batch whose commit was durable at `durable_at_ms` (Unix ms).
pub fn encode_marker(marker: &Marker, durable_at_ms: u64) -> Encoded {
    let mut headers = headers(Some(marker.epoch));
    headers.push((
        DURABLE_AT_HEADER.to_string(),
        Some(durable_at_ms.to_string().into_bytes()),
    ));
    Encoded {
        key: MARKER_KEY.to_vec(),
        value: Some(serde_json::to_vec(marker).expect("a marker serializes")),
        headers,
    }
}

/// Marks the last of a batch's change records ([`BATCH_END_HEADER`]).
pub fn mark_batch_end(records: &mut [Encoded]) {
    if let Some(last) = records.last_mut() {
        last.headers
            .push((BATCH_END_HEADER.to_string(), Some(b"1".to_vec())));
    }
}

/// Whether a record read back ends its batch's changes ([`mark_batch_end`]).
pub fn ends_batch(headers: &[(String, Option<Vec<u8>>)]) -> bool {
    header(headers, BATCH_END_HEADER).is_some_and(|v| v == b"1")
}

/// When the commit of a marker read back was durable (Unix ms); `None` for a marker written
/// without it.
pub fn durable_at_ms(headers: &[(String, Option<Vec<u8>>)]) -> Option<u64> {
    header(headers, DURABLE_AT_HEADER)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.parse().ok())
}

fn header<'a>(headers: &'a [(String, Option<Vec<u8>>)], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.as_deref())
}

/// A changelog record read back; a record of another format, a chunk whose id is not its key
/// or a value that is not a chunk is an error.
pub fn decode(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(String, Option<Vec<u8>>)],
) -> Result<Entry, ChangelogError> {
    let format = header(headers, FORMAT_HEADER).map(|v| String::from_utf8_lossy(v).into_owned());
    match format.as_deref() {
        Some(FORMAT) => {}
        other => return Err(ChangelogError::Format(other.unwrap_or("none").to_string())),
    }
    let key = key.ok_or(ChangelogError::NoKey)?;
    if key == MARKER_KEY {
        let value = value.ok_or_else(|| ChangelogError::Marker("no value".into()))?;
        return serde_json::from_slice(value)
            .map(Entry::Marker)
            .map_err(|e| ChangelogError::Marker(e.to_string()));
    }
    let key = std::str::from_utf8(key).map_err(|_| ChangelogError::Chunk {
        key: String::from_utf8_lossy(key).into_owned(),
        message: "the key is not UTF-8".into(),
    })?;
    let bad = |message: String| ChangelogError::Chunk {
        key: key.to_string(),
        message,
    };
    match value {
        None => Ok(Entry::Delete(key.to_string())),
        Some(v) => {
            let chunk: Chunk =
                serde_json::from_slice(v).map_err(|e| bad(format!("not a chunk record: {e}")))?;
            if chunk.chunk_id != key {
                return Err(bad(format!("the record is chunk {:?}", chunk.chunk_id)));
            }
            Ok(Entry::Upsert(Box::new(chunk)))
        }
    }
}

/// `held` advanced to `marker`'s offsets, partition by partition: a replica's offsets never go
/// back (a marker written again after a pipeline restart may repeat older ones).
pub fn advance(held: &SourceOffsets, marker: &SourceOffsets) -> SourceOffsets {
    let mut out = held.clone();
    for (topic, parts) in marker {
        let t = out.entry(topic.clone()).or_default();
        for (p, o) in parts {
            let e = t.entry(*p).or_insert(*o);
            *e = (*e).max(*o);
        }
    }
    out
}

#[cfg(test)]
mod tests;
