//! The delete receipts of a batch ([`freshet_tantivy::receipts`]): one for each document the
//! batch removes from both indexes, recorded with the commit that makes the removal durable.
//!
//! A document gets one when its last record in the batch asks for its removal (a delete, or a
//! refused record that names it: [`super::plan::Batch::removals`]), and when the sink refuses
//! its new version (a text the model cannot embed, a row Milvus refuses: [`Refusals`]). A
//! delete of a document the index does not hold gets one too, with no chunk removed: the
//! request was served, and the receipt says there was nothing to remove. How many chunks each
//! removal took is counted by the text index from its last commit, just before the commit that
//! removes them ([`super::text`]).

use freshet_tantivy::receipts::{cause, DeleteReceipt, SourceRecord};

use super::plan::{Batch, RecordRef};
use super::refusals::Refusals;

/// The receipts of `batch` (without their counts and commit, which the text index sets), in
/// document id order; `topics` names the topics by index.
pub fn of_batch(batch: &Batch, refused: &Refusals, topics: &[String]) -> Vec<DeleteReceipt> {
    let source = |at: &RecordRef| {
        topics.get(at.topic).map(|topic| SourceRecord {
            topic: topic.clone(),
            partition: at.partition,
            offset: at.offset,
        })
    };
    let receipt =
        |doc: &str, class: Option<&str>, at: Option<&RecordRef>, ts: Option<i64>| DeleteReceipt {
            doc_id: doc.to_string(),
            cause: if class.is_some() {
                cause::REFUSED
            } else {
                cause::DELETE
            }
            .to_string(),
            class: class.map(str::to_string),
            source: at.and_then(source),
            source_timestamp_ms: ts,
            chunks_removed: 0,
            opstamp: 0,
            epoch: 0,
            completed_at_ms: 0,
        };
    let mut out: std::collections::BTreeMap<&str, DeleteReceipt> = batch
        .removals()
        .map(|r| {
            let class = r.refused.as_deref();
            let made = receipt(&r.doc_id, class, Some(&r.at), r.timestamp_ms);
            (r.doc_id.as_str(), made)
        })
        .collect();
    for (doc, refusal) in refused.iter() {
        // The record of the refused version (the batch read it; its timestamp is not kept).
        out.entry(doc)
            .or_insert_with(|| receipt(doc, Some(refusal.class), batch.records.get(doc), None));
    }
    out.into_values().collect()
}

#[cfg(test)]
#[path = "receipts_tests.rs"]
mod tests;
