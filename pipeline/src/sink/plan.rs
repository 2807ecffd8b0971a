//! The pure part of the sink: complete epochs collapsed into what each document needs.
//!
//! **Only what changed is written.** Every chunk record in the dataflow carries its version's
//! `doc_hash`, so a new version yields an upsert for each of its chunks; each upsert says what
//! differs from the record the indexes hold ([`ChunkChange`]). A chunk the new version keeps as
//! it was differs in nothing the indexes store and is written to neither; one that only moved
//! (its span, its position) is written to tantivy, which stores its placement, and not to
//! Milvus, which does not.
//!
//! **Refusals.** When a document's new version cannot be written (a text the model cannot
//! embed, a row Milvus refuses), the sink removes the document from both indexes (a refused
//! version never leaves an older one serving; [`removals`]: every chunk of the old version was
//! either deleted or upserted by the new one) and dead-letters its record. The dataflow still
//! believes that version is indexed, so the sink remembers the document as *lost*: the next
//! version's upserts name every one of its chunks (each record's stamp differs from the refused
//! version's), and for a lost document every one is written, whatever its change. Only an
//! identical re-send yields nothing, and it would be refused again. After a restart the
//! dataflow's state is rebuilt from the indexes, which hold nothing of a lost document. The
//! model test in `plan/tests.rs` checks all of this against a sequential run.

use std::collections::{BTreeMap, BTreeSet};

use freshet_operators::chunk::{Chunk, ChunkChange};
use freshet_operators::dataflow::{SinkRecord, Time};

use super::SinkMsg;

/// A partition of one of the topics the pipeline reads: the topic's index in the configured
/// topics ([`crate::topics::topics`]) and the partition.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct TopicPartition {
    pub topic: usize,
    pub partition: i32,
}

/// The next offset to read, per topic partition.
pub type Offsets = BTreeMap<TopicPartition, i64>;

/// Where a record is: its topic (index in the configured topics), partition and offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordRef {
    pub topic: usize,
    pub partition: i32,
    pub offset: i64,
}

/// A record that asks for its document to leave the indexes: a delete, or a refused record
/// that names the document. When it is the document's last record in a batch, the commit of
/// that batch records a delete receipt for it ([`freshet_tantivy::receipts`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemovalAsked {
    pub doc_id: String,
    pub at: RecordRef,
    /// The record's Kafka timestamp (ms), the start of its delete-to-gone time.
    pub timestamp_ms: Option<i64>,
    /// The dead-letter class of a refused record; `None` for a delete.
    pub refused: Option<String>,
}

/// A chunk of a document's new version: its record, its vector when it is a leaf whose vector
/// is known, and what differs from the record the indexes hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub chunk: Chunk,
    pub vector: Option<Vec<f32>>,
    /// [`ChunkChange::NEW`] for a document the indexes lost.
    pub change: ChunkChange,
}

impl Row {
    /// Whether Milvus' row differs: it stores the vector and the attributes, not the placement.
    pub fn vector_row_changed(&self) -> bool {
        self.change.embedded || self.change.attributes
    }

    /// Whether tantivy's record differs: it stores every part.
    pub fn text_record_changed(&self) -> bool {
        self.change.any()
    }
}

/// What one document needs from the indexes after a batch of epochs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DocChanges {
    /// Chunk ids to remove.
    pub deletes: BTreeSet<String>,
    /// The chunks of the new version that the dataflow upserted, by chunk id, each with what
    /// an index must write of it ([`Row::change`]). Leaves carry their vector, except one the
    /// embedder refused (then `embed_error` is set).
    pub upserts: BTreeMap<String, Row>,
    /// Why the embedder refused a text of the document's final version, if it did.
    pub embed_error: Option<String>,
}

/// A record the embedder refused, to dead-letter whatever became of its document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbedRefusal {
    pub doc_id: String,
    pub record: Option<RecordRef>,
    pub error: String,
}

/// Complete epochs, collapsed: later epochs win per chunk id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub last_epoch: Time,
    /// Next offset per topic partition read in these epochs (the highest seen).
    pub next_offsets: Offsets,
    /// Kafka timestamps of the records (ms).
    pub timestamps_ms: Vec<i64>,
    pub docs: BTreeMap<String, DocChanges>,
    /// The latest record of each document read in these epochs.
    pub records: BTreeMap<String, RecordRef>,
    /// Records whose text the embedder refused, once per document and epoch.
    pub embed_refusals: Vec<EmbedRefusal>,
    /// Records refused before the sink, in the order read.
    pub refused: Vec<crate::dlq::Refused>,
    /// The latest record of each document that asked for its removal.
    pub removals_asked: BTreeMap<String, RemovalAsked>,
}

impl Batch {
    /// The removals asked by the last record of their document in the batch (a later upsert
    /// of the document supersedes its delete), in document id order.
    pub fn removals(&self) -> impl Iterator<Item = &RemovalAsked> {
        self.removals_asked
            .values()
            .filter(|r| self.records.get(&r.doc_id) == Some(&r.at))
    }
}

/// Collapses complete epochs (in time order). A chunk's change over the batch is the union of
/// its upserts' changes (each step is from the record before it, the first from what the
/// indexes hold); for a document in `lost` (removed from the indexes after a refusal while
/// the dataflow kept its version) every chunk is new. `Err` when an epoch carries a
/// [`SinkRecord::Failed`]: nothing of the batch may be written.
pub fn collapse(
    epochs: Vec<(Time, Vec<SinkMsg>)>,
    lost: &BTreeSet<String>,
) -> Result<Batch, String> {
    let mut batch = Batch {
        last_epoch: epochs.last().map(|(t, _)| *t).unwrap_or(0),
        ..Batch::default()
    };
    // Final state per chunk id: Some(row, refusal) or None (deleted); and its document.
    type Latest = Option<(Row, Option<String>)>;
    let mut latest: BTreeMap<String, (String, Latest)> = BTreeMap::new();
    let mut refused_in_epoch: Vec<(Time, String, String)> = Vec::new();
    let mut records_by_epoch: BTreeMap<(Time, String), RecordRef> = BTreeMap::new();
    for (time, msgs) in epochs {
        for msg in msgs {
            match msg {
                SinkMsg::Record(record) => match *record {
                    SinkRecord::Upsert {
                        chunk,
                        vector,
                        change,
                    } => {
                        let id = chunk.chunk_id.clone();
                        let doc = chunk.doc_id.clone();
                        // A delete in between leaves nothing to build on: the upsert after it
                        // is new (and says so).
                        let change = match latest.get(&id) {
                            Some((_, Some((earlier, _)))) => earlier.change.union(change),
                            _ => change,
                        };
                        let row = Row {
                            chunk,
                            vector,
                            change,
                        };
                        latest.insert(id, (doc, Some((row, None))));
                    }
                    SinkRecord::Delete { chunk_id, doc_id } => {
                        latest.insert(chunk_id, (doc_id, None));
                    }
                    SinkRecord::Rejected { chunk, error } => {
                        let id = chunk.chunk_id.clone();
                        let doc = chunk.doc_id.clone();
                        refused_in_epoch.push((time, doc.clone(), error.clone()));
                        let row = Row {
                            chunk,
                            vector: None,
                            change: ChunkChange::NEW,
                        };
                        latest.insert(id, (doc, Some((row, Some(error)))));
                    }
                    SinkRecord::Failed { error } => return Err(error),
                },
                SinkMsg::Progress {
                    next_offsets,
                    timestamps_ms,
                    records,
                    refused,
                    removals,
                } => {
                    batch.refused.extend(refused);
                    for r in removals {
                        batch.removals_asked.insert(r.doc_id.clone(), r);
                    }
                    for (p, o) in next_offsets {
                        let e = batch.next_offsets.entry(p).or_insert(o);
                        *e = (*e).max(o);
                    }
                    batch.timestamps_ms.extend(timestamps_ms);
                    for (doc, r) in records {
                        records_by_epoch.insert((time, doc.clone()), r);
                        batch.records.insert(doc, r);
                    }
                }
            }
        }
    }
    for (chunk_id, (doc, state)) in latest {
        let d = batch.docs.entry(doc).or_default();
        match state {
            None => {
                d.deletes.insert(chunk_id);
            }
            Some((mut row, refusal)) => {
                if let Some(e) = refusal {
                    d.embed_error.get_or_insert(e);
                }
                if lost.contains(&row.chunk.doc_id) {
                    row.change = ChunkChange::NEW;
                }
                d.upserts.insert(chunk_id, row);
            }
        }
    }
    refused_in_epoch.sort();
    refused_in_epoch.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    batch.embed_refusals = refused_in_epoch
        .into_iter()
        .map(|(time, doc_id, error)| EmbedRefusal {
            record: records_by_epoch.get(&(time, doc_id.clone())).copied(),
            doc_id,
            error,
        })
        .collect();
    Ok(batch)
}

/// Every chunk id to remove from both indexes when `d`'s new version of a document is refused:
/// its deletes, and the ids of all its upserts, those with nothing to write included (a row
/// written before the refusal was found too). That is all of the document the indexes hold:
/// what they hold of it is what the dataflow believed before this version, and every chunk of
/// that either left the new version (a delete) or has a new record in it (an upsert, since
/// every chunk record carries its version's `doc_hash`).
pub fn removals(d: &DocChanges) -> Vec<String> {
    let mut remove: BTreeSet<String> = d.deletes.clone();
    remove.extend(d.upserts.keys().cloned());
    remove.into_iter().collect()
}

/// The commit payload's offsets: topic name → partition → next offset.
pub fn by_topic_name(topics: &[String], offsets: &Offsets) -> BTreeMap<String, BTreeMap<i32, i64>> {
    let mut out: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    for (tp, o) in offsets {
        if let Some(name) = topics.get(tp.topic) {
            out.entry(name.clone())
                .or_default()
                .insert(tp.partition, *o);
        }
    }
    out
}

#[cfg(test)]
mod tests;
