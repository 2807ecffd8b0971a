//! Chunk deltas: what the sinks must do so that an index holding the old chunk set holds the new
//! one. Pure functions; the dataflow in [`super`] produces the same result incrementally.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::chunk::{Chunk, ChunkChange};

/// One change to apply to both indexes.
// Most deltas are upserts: boxing the chunk would cost an allocation per chunk for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ChunkDelta {
    /// Insert the chunk, or replace the record stored under its id. `change` says what differs
    /// from the record the indexes hold ([`ChunkChange::NEW`] when they hold none): nothing, when
    /// only the version stamp moved (a new version keeping this chunk as it was), so that an
    /// index writes only what its own copy lacks.
    Upsert { chunk: Chunk, change: ChunkChange },
    /// Remove the chunk id from both indexes.
    Delete { chunk_id: String, doc_id: String },
}

impl ChunkDelta {
    pub fn chunk_id(&self) -> &str {
        match self {
            ChunkDelta::Upsert { chunk, .. } => &chunk.chunk_id,
            ChunkDelta::Delete { chunk_id, .. } => chunk_id,
        }
    }
}

/// Turns the consolidated updates of one time into deltas. `updates` holds `(chunk, diff)`
/// pairs; for one chunk id there is at most one retraction (the old record) and one insertion
/// (the new record). Output is sorted by chunk id.
pub fn deltas_from_updates(updates: Vec<(Chunk, isize)>) -> Vec<ChunkDelta> {
    let mut by_id: BTreeMap<String, (Option<Chunk>, Option<Chunk>)> = BTreeMap::new();
    for (chunk, diff) in updates {
        let entry = by_id.entry(chunk.chunk_id.clone()).or_default();
        if diff < 0 {
            entry.0 = Some(chunk);
        } else if diff > 0 {
            entry.1 = Some(chunk);
        }
    }
    by_id
        .into_iter()
        .filter_map(|(chunk_id, (old, new))| match (old, new) {
            (_, Some(new)) if new.chunk_id != chunk_id => None,
            (Some(old), Some(new)) => Some(ChunkDelta::Upsert {
                change: ChunkChange::between(&old, &new),
                chunk: new,
            }),
            (None, Some(new)) => Some(ChunkDelta::Upsert {
                chunk: new,
                change: ChunkChange::NEW,
            }),
            (Some(old), None) => Some(ChunkDelta::Delete {
                chunk_id,
                doc_id: old.doc_id,
            }),
            (None, None) => None,
        })
        .collect()
}

/// The sequential reference: deltas that take an index holding `old` (doc id → chunks) to one
/// holding `new`. Used by tests to check the dataflow, and documents the intended semantics.
pub fn reference_deltas(
    old: &BTreeMap<String, Vec<Chunk>>,
    new: &BTreeMap<String, Vec<Chunk>>,
) -> Vec<ChunkDelta> {
    let index = |m: &BTreeMap<String, Vec<Chunk>>| -> BTreeMap<String, Chunk> {
        m.values()
            .flatten()
            .map(|c| (c.chunk_id.clone(), c.clone()))
            .collect()
    };
    let (old, new) = (index(old), index(new));
    let mut out = Vec::new();
    for (id, chunk) in &new {
        match old.get(id) {
            Some(prev) if prev == chunk => {}
            Some(prev) => out.push(ChunkDelta::Upsert {
                chunk: chunk.clone(),
                change: ChunkChange::between(prev, chunk),
            }),
            None => out.push(ChunkDelta::Upsert {
                chunk: chunk.clone(),
                change: ChunkChange::NEW,
            }),
        }
    }
    for (id, chunk) in &old {
        if !new.contains_key(id) {
            out.push(ChunkDelta::Delete {
                chunk_id: id.clone(),
                doc_id: chunk.doc_id.clone(),
            });
        }
    }
    out.sort_by(|a, b| a.chunk_id().cmp(b.chunk_id()));
    out
}
