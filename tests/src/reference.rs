//! The sequential reference of the exactness checks: what a clean index must hold after a
//! sequence of records, computed with the pipeline's own operators, one record at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{anyhow, Result};
use freshet_operators::chunk::{Chunk, ChunkerConfig, HfTokenCounter};
use freshet_operators::intake::intake;
use freshet_operators::limits::RecordLimits;

use crate::env;

/// The sequential reference: the chunks a clean index must hold after `records` (in order),
/// computed with the same operators and the default chunking configuration and limits.
pub fn expected_chunks(records: &[(String, Option<Vec<u8>>)]) -> Result<BTreeMap<String, Chunk>> {
    expected_chunks_with(records, &RecordLimits::default())
}

/// [`expected_chunks`] under other record limits. A record that cannot be indexed removes the
/// document it names, as in the pipeline (`freshet_operators::intake`).
pub fn expected_chunks_with(
    records: &[(String, Option<Vec<u8>>)],
    limits: &RecordLimits,
) -> Result<BTreeMap<String, Chunk>> {
    let tokens =
        HfTokenCounter::from_file(Path::new(&env("FRESHET_MODEL_DIR")).join("tokenizer.json"))
            .map_err(|e| anyhow!("{e}"))?;
    let cfg = ChunkerConfig::default();
    let mut docs: BTreeMap<String, Vec<Chunk>> = BTreeMap::new();
    for (key, value) in records {
        let taken = intake(
            Some(key.as_bytes()),
            value.as_deref(),
            limits,
            &cfg,
            &tokens,
        );
        match taken.update() {
            Some((id, Some(chunks))) => {
                docs.insert(id, chunks);
            }
            Some((id, None)) => {
                docs.remove(&id);
            }
            None => {}
        }
    }
    Ok(docs
        .into_values()
        .flatten()
        .map(|c| (c.chunk_id.clone(), c))
        .collect())
}

/// The chunk ids of `chunks`.
pub fn ids<'a>(chunks: impl IntoIterator<Item = &'a Chunk>) -> BTreeSet<String> {
    chunks.into_iter().map(|c| c.chunk_id.clone()).collect()
}
