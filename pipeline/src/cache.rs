//! The embedding cache kept to what the index holds. Its live entries are those of the texts
//! the index's leaf chunks are embedded as, keyed under the configured model ([`live_keys`]);
//! the rest (texts of versions since replaced or deleted) is dropped by a compaction: by size at
//! start ([`compact_at_start`], `[embedding] cache_max_bytes`) or by command
//! (`freshet cache compact`, [`compact_offline`]). The cache's size is in the metrics
//! ([`observe`]). docs/models.md, "The embedding cache".

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use freshet_embedding::{Compaction, DiskCache, EmbeddingModel};
use freshet_operators::chunk::{Chunk, ChunkKind};
use freshet_operators::embed::{cache_key, embed_input, Embedder};
use freshet_tantivy::ChunkIndexReader;

use crate::config::Config;
use crate::metrics::Metrics;

/// The cache keys of the texts `chunks` are embedded as (leaves only), under `cache_id`.
pub fn live_keys<'a>(
    cache_id: &str,
    chunks: impl IntoIterator<Item = &'a Chunk>,
) -> HashSet<[u8; 32]> {
    chunks
        .into_iter()
        .filter(|c| c.kind == ChunkKind::Leaf)
        .map(|c| cache_key(cache_id, &embed_input(c)))
        .collect()
}

/// Sets the cache's size gauges.
pub fn observe(cache: &DiskCache, metrics: &Metrics) {
    metrics.embedding_cache_bytes.set(cache.file_len() as i64);
    metrics.embedding_cache_entries.set(cache.len() as i64);
}

/// Compacts `cache` to the `live` keys, counting it.
pub fn compact(
    cache: &mut DiskCache,
    live: &HashSet<[u8; 32]>,
    metrics: &Metrics,
) -> Result<Compaction> {
    let done = cache
        .compact(|k| live.contains(k))
        .with_context(|| format!("compacting the embedding cache {}", cache.path().display()))?;
    metrics.embedding_cache_compactions.inc();
    metrics.embedding_cache_dropped.inc_by(done.dropped());
    observe(cache, metrics);
    tracing::info!(
        path = %cache.path().display(),
        entries_before = done.entries_before,
        entries_after = done.entries_after,
        bytes_before = done.bytes_before,
        bytes_after = done.bytes_after,
        "embedding cache compacted to the texts the index holds"
    );
    Ok(done)
}

/// At start, on process 0, once the index is read and before any record is: compacts `cache`
/// to the texts of `indexed` when its file is larger than `max_bytes` (0: never). An index
/// without chunks leaves the cache as it is (a new index is about to be filled from the topic,
/// whose texts the cache may hold). Still larger after, it warns and keeps every live entry.
pub fn compact_at_start<'a>(
    cache: &mut DiskCache,
    max_bytes: u64,
    cache_id: &str,
    indexed: impl IntoIterator<Item = &'a Chunk>,
    metrics: &Metrics,
) -> Result<Option<Compaction>> {
    observe(cache, metrics);
    if max_bytes == 0 || cache.file_len() <= max_bytes {
        return Ok(None);
    }
    let live = live_keys(cache_id, indexed);
    if live.is_empty() {
        tracing::info!(
            path = %cache.path().display(),
            bytes = cache.file_len(),
            max_bytes,
            "embedding cache over [embedding] cache_max_bytes, not compacted: the index holds \
             no chunk yet"
        );
        return Ok(None);
    }
    let done = compact(cache, &live, metrics)?;
    if done.bytes_after > max_bytes {
        tracing::warn!(
            path = %cache.path().display(),
            bytes = done.bytes_after,
            entries = done.entries_after,
            max_bytes,
            "the embedding cache is still over [embedding] cache_max_bytes after compaction: \
             every entry left is a text the index holds, and none is dropped to meet the size; \
             raise cache_max_bytes"
        );
    }
    Ok(Some(done))
}

/// What `freshet cache compact` did (or, dry, would do).
#[derive(Clone, Debug)]
pub struct Report {
    pub path: PathBuf,
    pub compaction: Compaction,
    pub dry_run: bool,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.compaction;
        let verb = if self.dry_run {
            "would compact (dry run)"
        } else {
            "compacted"
        };
        write!(
            f,
            "{verb} {}: entries {} -> {} ({} dropped), bytes {} -> {}",
            self.path.display(),
            c.entries_before,
            c.entries_after,
            c.dropped(),
            c.bytes_before,
            c.bytes_after
        )
    }
}

/// `freshet cache compact`: the cache of this process compacted to the texts the index holds
/// under the configured model; refused while a pipeline holds the cache, without an index, and
/// with an empty index beside a non-empty cache.
pub fn compact_offline(config: &Config, dry_run: bool) -> Result<Report> {
    let path = crate::preflight::cache_path(config);
    if !path.exists() {
        bail!(
            "no embedding cache at {} ([pipeline] embedding_cache_path): nothing to compact",
            path.display()
        );
    }
    let mut cache = DiskCache::open(&path).map_err(|e| {
        if e.is_cache_in_use() {
            anyhow!(
                "the embedding cache {} is held by a running pipeline (`freshet run`): stop it \
                 first, or set [embedding] cache_max_bytes so that the pipeline compacts it at \
                 its next start",
                path.display()
            )
        } else {
            anyhow!(e).context(format!("opening the embedding cache {}", path.display()))
        }
    })?;
    let index = &config.tantivy.path;
    let reader = ChunkIndexReader::open(index).with_context(|| {
        format!(
            "reading the index {} ([tantivy] path): the live texts are read from it",
            index.display()
        )
    })?;
    let chunks = reader.load_all().context("reading the index's chunks")?;
    if chunks.is_empty() && !cache.is_empty() {
        bail!(
            "the index {} holds no chunk: compacting would drop every one of the {} entries of \
             {}; check [tantivy] path",
            index.display(),
            cache.len(),
            path.display()
        );
    }
    let model = EmbeddingModel::load(&config.embedding).context("loading the embedding model")?;
    let live = live_keys(model.cache_id(), &chunks);
    let compaction = if dry_run {
        cache.plan(|k| live.contains(k))
    } else {
        compact(&mut cache, &live, &Metrics::new())?
    };
    Ok(Report {
        path,
        compaction,
        dry_run,
    })
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
