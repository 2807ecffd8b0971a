//! What the sink reads back after each tantivy commit: every chunk id the batch deleted (and did
//! not upsert again) is gone, and every chunk id it upserted is held by exactly one live
//! document. A commit that left the index otherwise is written again (the stale ids deleted,
//! the absent or doubled chunks upserted, committed with the same payload) and checked once more;
//! an index that still differs stops the pipeline. Each repair is logged at error level and
//! counted (`index_repairs_total`): it means tantivy reported a write durable that it did not
//! hold, and the log names the ids.
//!
//! The check costs one term lookup per written id and segment, and no stored document is read.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use anyhow::{anyhow, Context, Result};
use freshet_operators::chunk::Chunk;
use freshet_tantivy::{ChunkIndexWriter, CommitPayload};

use crate::metrics::Metrics;
use crate::stall::Stall;

/// The error line of a commit found wrong (the crash trials count them).
pub const REPAIRING: &str =
    "tantivy's commit does not hold the batch it was given; writing the difference again";

/// How a committed index differs from the batch it was given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// Deleted by the batch, still live.
    pub stale: Vec<String>,
    /// Upserted by the batch, not live.
    pub absent: Vec<String>,
    /// Upserted by the batch, live more than once.
    pub doubled: Vec<String>,
}

impl Findings {
    /// The findings from the live count of each written id (`counts` lacks an id no live
    /// document holds).
    pub fn from_counts(
        upserts: &[Chunk],
        deletes: &[String],
        counts: &BTreeMap<String, usize>,
    ) -> Findings {
        let upserted: BTreeSet<&str> = upserts.iter().map(|c| c.chunk_id.as_str()).collect();
        let count = |id: &str| counts.get(id).copied().unwrap_or(0);
        let deleted: BTreeSet<&str> = deletes
            .iter()
            .map(String::as_str)
            .filter(|id| !upserted.contains(id))
            .collect();
        Findings {
            stale: deleted
                .into_iter()
                .filter(|id| count(id) > 0)
                .map(str::to_owned)
                .collect(),
            absent: upserted
                .iter()
                .filter(|id| count(id) == 0)
                .map(|id| (*id).to_owned())
                .collect(),
            doubled: upserted
                .iter()
                .filter(|id| count(id) > 1)
                .map(|id| (*id).to_owned())
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.stale.is_empty() && self.absent.is_empty() && self.doubled.is_empty()
    }

    /// The chunks to write again: the last record of each absent or doubled id.
    fn rewrite(&self, upserts: &[Chunk]) -> Vec<Chunk> {
        let ids: BTreeSet<&str> = self
            .absent
            .iter()
            .chain(&self.doubled)
            .map(String::as_str)
            .collect();
        let mut last: BTreeMap<&str, &Chunk> = BTreeMap::new();
        for c in upserts.iter().filter(|c| ids.contains(c.chunk_id.as_str())) {
            last.insert(c.chunk_id.as_str(), c);
        }
        last.into_values().cloned().collect()
    }
}

impl fmt::Display for Findings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stale (deleted, still live): {:?}; absent (upserted, not live): {:?}; doubled \
             (upserted, live more than once): {:?}",
            self.stale, self.absent, self.doubled
        )
    }
}

/// Reads back the committed index for the batch's ids.
pub fn check(
    tantivy: &ChunkIndexWriter,
    upserts: &[Chunk],
    deletes: &[String],
) -> Result<Findings> {
    let mut ids: Vec<String> = upserts.iter().map(|c| c.chunk_id.clone()).collect();
    ids.extend(deletes.iter().cloned());
    let counts = tantivy
        .live_counts(&ids)
        .context("reading the written ids back from tantivy")?;
    Ok(Findings::from_counts(upserts, deletes, &counts))
}

/// Checks the commit of a batch and writes what it lacks again (see the module docs). Returns
/// what the first check found (empty when the commit held the batch).
pub fn check_and_repair(
    tantivy: &mut ChunkIndexWriter,
    stall: &Stall,
    metrics: &Metrics,
    batch: (&[Chunk], &[String]),
    payload: &CommitPayload,
) -> Result<Findings> {
    let (upserts, deletes) = batch;
    let found = check(tantivy, upserts, deletes)?;
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
    let again = found.rewrite(upserts);
    stall.retry("repairing the tantivy commit", "tantivy", |attempt| {
        if attempt > 0 {
            tantivy
                .rollback()
                .context("rolling tantivy back to its last commit")?;
        }
        tantivy
            .apply(&again, &found.stale)
            .context("staging the repair")?;
        tantivy.commit(payload).context("committing the repair")?;
        Ok(())
    })?;
    let after = check(tantivy, upserts, deletes)?;
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
