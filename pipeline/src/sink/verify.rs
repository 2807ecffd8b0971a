//! What the sink reads back after each tantivy commit: every document the batch wrote must
//! hold exactly the chunks of its final version (each once), and a document the batch deleted or
//! refused none. A new version reaches the sink as an upsert of every one of its chunks (each
//! record carries its version's `doc_hash`, see [`super::plan`]), so the batch knows each such
//! document's whole chunk set, including the chunks it did not need to rewrite.
//!
//! A commit that left the index otherwise is written again (the stale chunks deleted, the absent
//! or doubled ones upserted, committed with the same payload) and checked once more; an index
//! that still differs stops the pipeline. Each repair is logged at error level and counted
//! (`index_repairs_total`): it means the index held something other than what the dataflow
//! wrote or believed, and the log names the ids.
//!
//! The check costs one term lookup per chunk id and per document in each segment; stored
//! documents are read only for a document holding more chunks than it should.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use anyhow::{anyhow, Context, Result};
use freshet_operators::chunk::Chunk;
use freshet_tantivy::{ChunkIndexWriter, CommitPayload};

use crate::metrics::Metrics;
use crate::stall::Stall;

/// The error line of a commit found wrong (the crash trials count them).
pub const REPAIRING: &str =
    "tantivy's commit does not hold the documents of its batch; writing the difference again";

/// What tantivy must hold of each document a batch wrote: the chunks of its final version,
/// none for a document deleted or refused.
pub type Expected<'a> = BTreeMap<&'a str, Vec<&'a Chunk>>;

/// How a committed index differs from what it must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// Live, but not a chunk of its document's version.
    pub stale: Vec<String>,
    /// A chunk of a version, not live.
    pub absent: Vec<String>,
    /// A chunk of a version, live more than once.
    pub doubled: Vec<String>,
}

impl Findings {
    pub fn is_empty(&self) -> bool {
        self.stale.is_empty() && self.absent.is_empty() && self.doubled.is_empty()
    }

    /// The chunks to write again: each absent or doubled one.
    fn rewrite(&self, expected: &Expected<'_>) -> Vec<Chunk> {
        let ids: BTreeSet<&str> = self
            .absent
            .iter()
            .chain(&self.doubled)
            .map(String::as_str)
            .collect();
        expected
            .values()
            .flatten()
            .filter(|c| ids.contains(c.chunk_id.as_str()))
            .map(|c| (*c).clone())
            .collect()
    }
}

impl fmt::Display for Findings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stale (live, not of the version): {:?}; absent (of the version, not live): {:?}; \
             doubled (live more than once): {:?}",
            self.stale, self.absent, self.doubled
        )
    }
}

/// Reads the committed index back for the documents of `expected`.
pub fn check(tantivy: &ChunkIndexWriter, expected: &Expected<'_>) -> Result<Findings> {
    let ids: Vec<&str> = expected
        .values()
        .flatten()
        .map(|c| c.chunk_id.as_str())
        .collect();
    let docs: Vec<&str> = expected.keys().copied().collect();
    let chunk_counts = tantivy
        .live_chunk_counts(&ids)
        .context("reading the written chunk ids back from tantivy")?;
    let doc_counts = tantivy
        .live_doc_counts(&docs)
        .context("reading the written documents back from tantivy")?;
    let (mut found, extra) = tally(expected, &chunk_counts, &doc_counts);
    for doc in extra {
        let wanted: BTreeSet<&str> = expected
            .get(doc)
            .into_iter()
            .flatten()
            .map(|c| c.chunk_id.as_str())
            .collect();
        let held = tantivy
            .chunks_of_doc(doc)
            .with_context(|| format!("reading the chunks of {doc:?} from tantivy"))?;
        found.stale.extend(
            held.into_iter()
                .map(|c| c.chunk_id)
                .filter(|id| !wanted.contains(id.as_str())),
        );
    }
    found.stale.sort();
    found.stale.dedup();
    Ok(found)
}

/// The absent and doubled chunks from the live counts of each chunk id and each document, and
/// the documents holding more live chunks than their version's (whose stale chunks are found by
/// reading them).
fn tally<'a>(
    expected: &Expected<'a>,
    chunk_counts: &BTreeMap<String, usize>,
    doc_counts: &BTreeMap<String, usize>,
) -> (Findings, Vec<&'a str>) {
    let count = |id: &str| chunk_counts.get(id).copied().unwrap_or(0);
    let mut found = Findings::default();
    let mut extra = Vec::new();
    for (doc, chunks) in expected {
        let mut matched = 0;
        for c in chunks {
            match count(&c.chunk_id) {
                0 => found.absent.push(c.chunk_id.clone()),
                1 => matched += 1,
                n => {
                    found.doubled.push(c.chunk_id.clone());
                    matched += n;
                }
            }
        }
        // Every live chunk of the version is in `matched`: anything more is stale.
        if doc_counts.get(*doc).copied().unwrap_or(0) > matched {
            extra.push(*doc);
        }
    }
    (found, extra)
}

/// Publishes a repair's changes (the chunks written again, the ids deleted) before the repair
/// is committed, and returns the changelog position after them for the repair commit's payload
/// (`None`: unchanged). A query replica mirrors the repaired index this way, and a crash
/// between the two leaves the changes past the last commit's position, where
/// [`super::changelog::Changelog::recover`] publishes their committed state again.
pub type PublishRepair<'a> = &'a mut dyn FnMut(&[Chunk], &[String]) -> Result<Option<i64>>;

/// Checks the commit of a batch and writes what it lacks again (see the module docs), first
/// handing the repair's changes to `publish` when there is one. Returns what the first check
/// found (empty when the commit held the batch).
pub fn check_and_repair(
    tantivy: &mut ChunkIndexWriter,
    stall: &Stall,
    metrics: &Metrics,
    expected: &Expected<'_>,
    payload: &CommitPayload,
    publish: Option<PublishRepair<'_>>,
) -> Result<Findings> {
    let found = check(tantivy, expected)?;
    if found.is_empty() {
        return Ok(found);
    }
    tracing::error!(%found, epoch = payload.epoch, "{REPAIRING}");
    for (kind, n) in [
        ("stale", found.stale.len()),
        ("absent", found.absent.len()),
        ("doubled", found.doubled.len()),
    ] {
        metrics.index_repaired("tantivy", kind, n as u64);
    }
    let again = found.rewrite(expected);
    let mut payload = payload.clone();
    if let Some(publish) = publish {
        if let Some(next) = publish(&again, &found.stale).context("publishing the repair")? {
            payload.changelog_next = Some(next);
        }
    }
    stall.retry("repairing the tantivy commit", "tantivy", |attempt| {
        if attempt > 0 {
            tantivy
                .rollback()
                .context("rolling tantivy back to its last commit")?;
        }
        tantivy
            .apply(&again, &found.stale)
            .context("staging the repair")?;
        tantivy.commit(&payload).context("committing the repair")?;
        Ok(())
    })?;
    let after = check(tantivy, expected)?;
    if !after.is_empty() {
        return Err(anyhow!(
            "tantivy still does not hold the batch after writing it again: {after}"
        ));
    }
    tracing::warn!(epoch = payload.epoch, "the tantivy commit is repaired");
    Ok(found)
}

#[cfg(test)]
mod tests;
