//! Milvus made to hold exactly the leaf chunks tantivy holds, at start. A crash between the
//! two writes of a batch leaves Milvus with that batch: rows tantivy never committed (noted
//! beforehand: [`crate::sink::pending`]) and, for its deletes, without rows tantivy still holds.
//! So the reconcile deletes the rows tantivy lacks and inserts the missing ones (vectors from
//! the cache when it has them).
//!
//! Deleting is bounded: beyond the noted rows, at most `[pipeline] reconcile_max_delete_share`
//! of the collection, unless the operator allows it once (`freshet run
//! --allow-reconcile-deletes`) or has bound the collection to the index on purpose
//! (`--new-index`, `--adopt-collection`). Over the bound the pipeline stops before deleting
//! anything and says what it would have deleted.

use std::collections::BTreeSet;

use anyhow::{anyhow, bail, Result};
use freshet_embedding::CachedEmbedder;
use freshet_milvus::MilvusSink;
use freshet_operators::chunk::Chunk;
use freshet_operators::embed::embed_input;

use crate::embedder::{ModelRef, SharedCache};

/// How many rows the reconcile may delete.
#[derive(Clone, Debug, PartialEq)]
pub struct DeleteBound {
    /// Any number (an explicit flag).
    pub unbounded: bool,
    /// Share of the collection's rows that may be deleted beyond the expected ones.
    pub max_share: f64,
    /// Rows of the last Milvus write, which may lack their tantivy commit.
    pub expected: BTreeSet<String>,
}

/// How many of `extra` the bound lets go without asking: the unexpected ones must stay within
/// the share of `rows` (rounded down, and at least one row).
pub fn check_deletes(extra: &[String], rows: u64, bound: &DeleteBound) -> Result<(), String> {
    if bound.unbounded {
        return Ok(());
    }
    let unexpected: Vec<&String> = extra
        .iter()
        .filter(|id| !bound.expected.contains(*id))
        .collect();
    let allowed = ((rows as f64 * bound.max_share).floor() as u64).max(1);
    if unexpected.len() as u64 <= allowed {
        return Ok(());
    }
    let sample: Vec<&str> = unexpected.iter().take(5).map(|s| s.as_str()).collect();
    Err(format!(
        "reconciling Milvus with the tantivy index would delete {} of the collection's {rows} \
         vectors whose chunks the index does not hold ({} of them not written by the last \
         uncommitted batch; the limit is {allowed}, [pipeline] reconcile_max_delete_share = \
         {}); first ids: {sample:?}. Nothing was deleted. If the index is the one that goes \
         with this collection and is meant to hold less (restored from a backup, for \
         example), start once with `freshet run --allow-reconcile-deletes`; otherwise check \
         [tantivy] path and [milvus] collection.",
        extra.len(),
        unexpected.len(),
        bound.max_share
    ))
}

/// Makes Milvus hold exactly `leaves` (see the module docs); `rows` is the collection's size.
/// Missing rows get their vectors from `embedder` (the cache first).
pub fn reconcile(
    runtime: &tokio::runtime::Runtime,
    milvus: &MilvusSink,
    leaves: &[&Chunk],
    rows: u64,
    bound: &DeleteBound,
    embedder: &mut CachedEmbedder<ModelRef<'_>, SharedCache>,
) -> Result<()> {
    let in_milvus: BTreeSet<String> = runtime
        .block_on(milvus.list_chunk_ids())?
        .into_iter()
        .collect();
    let in_tantivy: BTreeSet<&str> = leaves.iter().map(|c| c.chunk_id.as_str()).collect();
    let extra: Vec<String> = in_milvus
        .iter()
        .filter(|id| !in_tantivy.contains(id.as_str()))
        .cloned()
        .collect();
    let missing: Vec<&Chunk> = leaves
        .iter()
        .copied()
        .filter(|c| !in_milvus.contains(&c.chunk_id))
        .collect();
    if extra.is_empty() && missing.is_empty() {
        return Ok(());
    }
    let expected = extra
        .iter()
        .filter(|id| bound.expected.contains(*id))
        .count();
    tracing::warn!(
        delete = extra.len(),
        delete_expected = expected,
        insert = missing.len(),
        rows,
        "Milvus differs from tantivy; reconciling"
    );
    if let Err(why) = check_deletes(&extra, rows, bound) {
        bail!("{why}");
    }
    if !extra.is_empty() {
        runtime.block_on(milvus.delete(&extra))?;
    }
    for batch in missing.chunks(256) {
        let texts: Vec<String> = batch.iter().map(|c| embed_input(c)).collect();
        let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
        let (vectors, _) = embedder.embed(&refs).map_err(|e| anyhow!("{e}"))?;
        let rows: Vec<(Chunk, Vec<f32>)> =
            batch.iter().map(|c| (*c).clone()).zip(vectors).collect();
        runtime.block_on(milvus.upsert(&rows))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize, prefix: &str) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    fn bound(share: f64, expected: &[String]) -> DeleteBound {
        DeleteBound {
            unbounded: false,
            max_share: share,
            expected: expected.iter().cloned().collect(),
        }
    }

    #[test]
    fn rows_of_the_last_uncommitted_write_are_deleted_whatever_their_share() {
        // a first batch of 400 rows written to Milvus, then a crash before the commit
        let batch = ids(400, "c");
        assert_eq!(check_deletes(&batch, 400, &bound(0.01, &batch)), Ok(()));
        // a few strays beside them stay within the share
        let mut extra = batch.clone();
        extra.extend(ids(4, "stray"));
        assert_eq!(check_deletes(&extra, 404, &bound(0.01, &batch)), Ok(()));
    }

    #[test]
    fn unexplained_deletes_over_the_share_are_refused_with_what_to_do() {
        // the measured incident: every vector of the collection, none expected
        let all = ids(25, "v");
        let e = check_deletes(&all, 25, &bound(0.01, &[])).unwrap_err();
        for part in [
            "delete 25 of the collection's 25",
            "25 of them not written by the last",
            "limit is 1",
            "\"v0\"",
            "--allow-reconcile-deletes",
            "Nothing was deleted",
        ] {
            assert!(e.contains(part), "{part:?} missing from: {e}");
        }
        // one stray row is always allowed; 1% of 10,000 is 100
        assert_eq!(check_deletes(&ids(1, "v"), 25, &bound(0.01, &[])), Ok(()));
        assert_eq!(
            check_deletes(&ids(100, "v"), 10_000, &bound(0.01, &[])),
            Ok(())
        );
        assert!(check_deletes(&ids(101, "v"), 10_000, &bound(0.01, &[])).is_err());
        // an explicit flag lifts the bound
        let free = DeleteBound {
            unbounded: true,
            ..bound(0.01, &[])
        };
        assert_eq!(check_deletes(&all, 25, &free), Ok(()));
    }
}
