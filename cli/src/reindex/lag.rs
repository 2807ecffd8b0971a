//! How far a generation is behind its topics: for every partition of every topic the pipeline
//! reads, the records between the generation's last tantivy commit and the partition's end.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use freshet_kafka::{admin, KafkaConfig, PartitionReader};
use freshet_tantivy::{ChunkIndexReader, CommitPayload};

/// A generation's last commit, and its size.
pub struct Built {
    pub payload: CommitPayload,
    pub chunks: u64,
}

/// The last commit of the tantivy index at `path`; `None` when there is no index or no commit.
pub fn built(path: &Path) -> Result<Option<Built>> {
    if !path.join("meta.json").exists() {
        return Ok(None);
    }
    let r = ChunkIndexReader::open(path)
        .with_context(|| format!("opening the tantivy index {}", path.display()))?;
    let chunks = r.count();
    Ok(r.last_payload()?.map(|payload| Built { payload, chunks }))
}

/// Topic → partition → (low, high) watermark.
pub type Ends = BTreeMap<String, BTreeMap<i32, (i64, i64)>>;

/// The low and high watermarks of every partition of `topics`.
pub fn ends(kafka: &KafkaConfig, topics: &[String]) -> Result<Ends> {
    let mut out = BTreeMap::new();
    for topic in topics {
        let parts = admin::partitions(kafka, topic)
            .with_context(|| format!("listing the partitions of {topic}"))?;
        let reader = PartitionReader::new(kafka, topic, &parts, &BTreeMap::new())?;
        out.insert(topic.clone(), reader.watermarks()?);
    }
    Ok(out)
}

/// Records of `ends` the commit with `offsets` does not cover.
pub fn lag(offsets: &BTreeMap<String, BTreeMap<i32, i64>>, ends: &Ends) -> u64 {
    let mut behind = 0u64;
    for (topic, parts) in ends {
        for (p, (low, high)) in parts {
            let next = offsets
                .get(topic)
                .and_then(|o| o.get(p))
                .copied()
                .unwrap_or(*low)
                .max(*low);
            behind += (*high - next).max(0) as u64;
        }
    }
    behind
}
