//! The sink's driver: one batch of epochs applied as a sequence of named steps, each a request
//! built from the batch and handed to one service ([`super::Service`]):
//!
//! 1. **collapse** the epochs into what each document needs ([`plan::collapse`]);
//! 2. **write the vectors** to Milvus, the rows it refuses isolated ([`VectorWrite`]);
//! 3. **remove the refused documents** from Milvus ([`Removal`]);
//! 4. **dead-letter** the refused records ([`DeadLetter`]);
//! 5. **publish the changes** to the changelog for query replicas, when there is one
//!    ([`super::changelog`]);
//! 6. **commit the text** to tantivy with the offsets, the changelog position and the delete
//!    receipts of the documents the batch removes ([`super::receipts`]), read back and repaired
//!    ([`TextCommit`]);
//! 7. **publish the marker** of the commit to the changelog;
//! 8. **account** for the batch (metrics, the documents lost to a refusal, logs).
//!
//! A document version that an index refuses (or whose text the model could not embed) is thus
//! removed from both indexes and its record dead-lettered before the commit; everything else is
//! written and the offsets move past it. A failure that is not about one record (Milvus
//! unreachable or timing out, a full disk) is retried while nothing is committed
//! ([`crate::stall`]); once it outlasts the stall limit it returns an error and the pipeline
//! stops, to replay the batch after a restart. The crash trials' kill points sit between the
//! steps: `sink.after_milvus`, `sink.after_dead_letters`, `sink.after_changelog`,
//! `sink.after_commit`
//! ([`crate::faults`]).

use anyhow::{anyhow, Result};
use freshet_operators::dataflow::Time;
use freshet_tantivy::CommitPayload;

use super::changelog::MarkerOf;
use super::dead_letters::DeadLetter;
use super::plan::{self, Batch, Offsets};
use super::receipts;
use super::refusals::Refusals;
use super::text::{Committing, TextCommit};
use super::vectors::{Removal, VectorWrite};
use super::{Service, SinkMsg, Sinks};
use crate::metrics::Metrics;

/// Applies complete epochs (in time order) to both indexes, durably.
pub fn apply_epochs(sinks: &mut Sinks, epochs: Vec<(Time, Vec<SinkMsg>)>) -> Result<()> {
    let batch =
        plan::collapse(epochs, &sinks.lost).map_err(|e| anyhow!("embedding failed: {e}"))?;
    let durable_before = sinks.advance_offsets(&batch);
    Metrics::observe_ages(&sinks.metrics.source_to_sink, &batch.timestamps_ms);

    let mut refused = Refusals::of_embedder(&batch);
    let rows = sinks.vectors.call(&VectorWrite::build(&batch, &refused)?)?;
    sinks.metrics.board.milvus_wrote();
    refused.add_milvus(rows);

    // Nothing of a refused document stays in either index.
    let removal = Removal::build(&batch, &refused);
    sinks.vectors.call(&removal)?;
    fail::fail_point!("sink.after_milvus");

    // Dead letters before the commit that moves the offsets past their records.
    for letter in DeadLetter::build(&batch, &refused, &durable_before) {
        sinks.dead_letters.call(letter)?;
    }
    fail::fail_point!("sink.after_dead_letters");

    let payload = sinks.commit_payload(batch.last_epoch);
    let receipts = receipts::of_batch(&batch, &refused, &sinks.topics);
    let mut commit = TextCommit::build(&batch, &refused, removal.into_ids(), payload, receipts);
    // The changes before the commit, so that a crash between the two publishes them again on
    // the replay (each change is keyed: publishing it twice changes nothing).
    if let Some(changelog) = &mut sinks.changelog {
        commit.payload.changelog_next = changelog.call(&commit)?;
        fail::fail_point!("sink.after_changelog");
    }
    sinks.text.call(Committing {
        commit: &commit,
        changelog: sinks.changelog.as_mut(),
    })?;
    fail::fail_point!("sink.after_commit");
    if let Some(changelog) = &mut sinks.changelog {
        let mut marked = commit.payload.clone();
        marked.index_id = sinks.text.index_id();
        changelog.call(MarkerOf(&marked))?;
    }

    sinks.account(&batch, &refused, &commit);
    Ok(())
}

impl Sinks {
    /// Moves the offsets the sink holds durable past `batch` (they are, once it commits) and
    /// returns those from before it.
    fn advance_offsets(&mut self, batch: &Batch) -> Offsets {
        let before = self.offsets.clone();
        for (p, o) in &batch.next_offsets {
            let e = self.offsets.entry(*p).or_insert(*o);
            *e = (*e).max(*o);
        }
        before
    }

    /// The payload of the commit of epoch `epoch`: the offsets, and where a restart reads the
    /// dead-letter topic from.
    fn commit_payload(&mut self, epoch: Time) -> CommitPayload {
        let mut payload =
            CommitPayload::new(plan::by_topic_name(&self.topics, &self.offsets), epoch);
        payload.dead_letters_next = self.dead_letters.resume_marks(&payload.offsets);
        payload
    }

    /// Counts the durable batch, remembers the documents lost to a refusal, and logs it.
    fn account(&mut self, batch: &Batch, refused: &Refusals, commit: &TextCommit<'_>) {
        let (upserts, deletes) = (&commit.upserts, &commit.deletes);
        let m = &self.metrics;
        Metrics::outcome(&m.chunks, "upsert", upserts.len() as u64);
        Metrics::outcome(&m.chunks, "delete", deletes.len() as u64);
        for (doc, chunks) in &commit.expected {
            self.census.set(doc, chunks.iter().copied());
        }
        self.census.publish();
        m.commits.inc();
        m.durable_epoch.set(batch.last_epoch as i64);
        // A refused document is lost to the indexes until its next version or delete is written.
        for doc in batch.docs.keys() {
            if refused.contains(doc) {
                self.lost.insert(doc.clone());
            } else {
                self.lost.remove(doc);
            }
        }
        m.durable(&batch.timestamps_ms);
        for r in &commit.receipts {
            m.delete_receipts
                .get_or_create(&crate::metrics::CauseLabel {
                    cause: r.cause.clone(),
                })
                .inc();
        }
        let asked: Vec<i64> = commit
            .receipts
            .iter()
            .filter_map(|r| r.source_timestamp_ms)
            .collect();
        Metrics::observe_ages(&m.delete_to_gone, &asked);
        tracing::debug!(
            epoch = batch.last_epoch,
            upserts = upserts.len(),
            deletes = deletes.len(),
            refused = refused.len(),
            "epochs durable"
        );
        // Every id, for tracing a wrong index back to the batch that wrote it (the crash trials
        // log at this level).
        tracing::trace!(
            epoch = batch.last_epoch,
            offsets = ?commit.payload.offsets,
            upserts = ?upserts.iter().map(|c| c.chunk_id.as_str()).collect::<Vec<_>>(),
            deletes = ?deletes,
            "epochs durable: chunk ids"
        );
    }
}

#[cfg(test)]
mod tests;
