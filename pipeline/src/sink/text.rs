//! The text index's service: a batch's chunks staged in tantivy and committed with the Kafka
//! offsets they reflect ([`TextCommit`], built from the batch), then read back and written
//! again where the commit differs ([`super::verify`]), by [`TextIndex`].

use std::time::Instant;

use anyhow::{Context, Result};
use freshet_operators::chunk::Chunk;
use freshet_tantivy::{ChunkIndexWriter, CommitPayload, DeleteReceipt};

use super::changelog::Changelog;
use super::plan::Batch;
use super::refusals::Refusals;
use super::verify::{self, Expected};
use super::Service;
use crate::metrics::Metrics;
use crate::stall::Stall;

/// What tantivy must write and then hold of a batch.
pub struct TextCommit<'a> {
    /// The chunks whose tantivy record differs ([`super::plan::Row::text_record_changed`]).
    pub upserts: Vec<Chunk>,
    pub deletes: Vec<String>,
    /// What each document of the batch must hold once committed.
    pub expected: Expected<'a>,
    /// The durable offsets the commit carries.
    pub payload: CommitPayload,
    /// The delete receipts the commit records ([`super::receipts`]); their chunk counts are
    /// set from the index as the commit is staged.
    pub receipts: Vec<DeleteReceipt>,
}

impl<'a> TextCommit<'a> {
    /// The commit of `batch`: the `removed` chunk ids of the `refused` documents deleted, the
    /// other documents written.
    pub fn build(
        batch: &'a Batch,
        refused: &Refusals,
        removed: Vec<String>,
        payload: CommitPayload,
        receipts: Vec<DeleteReceipt>,
    ) -> TextCommit<'a> {
        let mut upserts: Vec<Chunk> = Vec::new();
        let mut deletes: Vec<String> = removed;
        for (doc, d) in &batch.docs {
            if refused.contains(doc) {
                continue;
            }
            deletes.extend(d.deletes.iter().cloned());
            upserts.extend(
                d.upserts
                    .values()
                    .filter(|r| r.text_record_changed())
                    .map(|r| r.chunk.clone()),
            );
        }
        // Each document written holds its final version's chunks: all of its upserts, those
        // not rewritten included; none when it was deleted or refused.
        let expected: Expected<'a> = batch
            .docs
            .iter()
            .map(|(doc, d)| {
                let chunks = if refused.contains(doc) {
                    Vec::new()
                } else {
                    d.upserts.values().map(|r| &r.chunk).collect()
                };
                (doc.as_str(), chunks)
            })
            .collect();
        TextCommit {
            upserts,
            deletes,
            expected,
            payload,
            receipts,
        }
    }
}

/// `receipts` with the chunks each document holds in the last commit: those the commit that
/// records them removes.
fn counted(writer: &ChunkIndexWriter, receipts: &[DeleteReceipt]) -> Result<Vec<DeleteReceipt>> {
    if receipts.is_empty() {
        return Ok(Vec::new());
    }
    let docs: Vec<&str> = receipts.iter().map(|r| r.doc_id.as_str()).collect();
    let held = writer
        .live_doc_counts(&docs)
        .context("counting the chunks of the removed documents")?;
    Ok(receipts
        .iter()
        .map(|r| DeleteReceipt {
            chunks_removed: held.get(&r.doc_id).copied().unwrap_or(0) as u64,
            ..r.clone()
        })
        .collect())
}

/// The tantivy writer, committed through the stall policy.
pub struct TextIndex {
    writer: ChunkIndexWriter,
    stall: Stall,
    metrics: Metrics,
}

impl TextIndex {
    pub fn new(writer: ChunkIndexWriter, stall: Stall, metrics: Metrics) -> TextIndex {
        TextIndex {
            writer,
            stall,
            metrics,
        }
    }

    /// The id binding the index to its Milvus collection.
    pub fn index_id(&self) -> Option<String> {
        self.writer.index_id().map(str::to_string)
    }
}

/// A batch's commit, and the changelog that a repair of it is published to, if any.
pub struct Committing<'a, 'b> {
    pub commit: &'a TextCommit<'b>,
    pub changelog: Option<&'a mut Changelog>,
}

impl Service<Committing<'_, '_>> for TextIndex {
    type Response = ();

    /// Stages and commits the batch, then checks the commit and repairs it
    /// ([`verify::check_and_repair`]), publishing the repair to the changelog first.
    fn call(&mut self, Committing { commit, changelog }: Committing<'_, '_>) -> Result<()> {
        let started = Instant::now();
        // A failed write or commit leaves the writer in no known state (an indexing thread may
        // have died on a full disk): each attempt after the first starts again from the last
        // commit.
        let writer = &mut self.writer;
        self.stall
            .retry("writing to tantivy", "tantivy", |attempt| {
                if attempt > 0 {
                    writer
                        .rollback()
                        .context("rolling tantivy back to its last commit")?;
                }
                let receipts = counted(writer, &commit.receipts)?;
                writer
                    .apply(&commit.upserts, &commit.deletes)
                    .context("staging the batch")?;
                writer
                    .commit_with_receipts(&commit.payload, &receipts)
                    .context("committing")?;
                Ok(())
            })?;
        let committed = Instant::now();
        let epoch = commit.payload.epoch;
        let mut publish = changelog.map(|c| {
            move |upserts: &[Chunk], deletes: &[String]| c.publish_changes(upserts, deletes, epoch)
        });
        verify::check_and_repair(
            &mut self.writer,
            &self.stall,
            &self.metrics,
            &commit.expected,
            &commit.payload,
            publish.as_mut().map(|p| p as verify::PublishRepair<'_>),
        )?;
        let m = &self.metrics;
        m.tantivy_read_back
            .observe(committed.elapsed().as_secs_f64());
        m.sink_write("tantivy", started.elapsed().as_secs_f64());
        m.sink("tantivy", "delete", commit.deletes.len() as u64);
        m.sink("tantivy", "upsert", commit.upserts.len() as u64);
        Ok(())
    }
}
