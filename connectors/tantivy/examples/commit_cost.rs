//! What one small commit costs, by phase: `cargo run --release -p freshet-tantivy --example
//! commit_cost -- [commits] [heap_bytes] [chunks_per_commit]`.
//!
//! Commits `commits` batches of `chunks_per_commit` new chunks each (as a stream of single
//! updates makes them) into a fresh index in a temporary directory, and prints the mean and
//! p50 of each phase: `apply` (the documents analysed into the writer), `prepare` (the
//! segment built and written), `commit` (the metas saved, fsync'd, the writer's reader
//! reloaded).

use std::collections::BTreeMap;
use std::time::Instant;

use freshet_core::chunk::Chunk;
use freshet_tantivy::{ChunkIndexWriter, CommitPayload};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let commits: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(300);
    let heap: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(64 * 1024 * 1024);
    let per_commit: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1);
    let dir = tempfile::tempdir()?;
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), heap)?;
    let (mut apply, mut prepare, mut commit) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..commits {
        let chunks: Vec<Chunk> = (0..per_commit)
            .map(|i| {
                let id = format!("doc-{}-{i}", n % 100);
                let text = format!(
                    "Freshness probe zq{n}x: river gauges reported a seasonal freshet after \
                     snowmelt, update number {n}."
                );
                Chunk {
                    chunk_id: format!("{id}#0"),
                    ..freshet_core::testing::chunk(&id, &text)
                }
            })
            .collect();
        let t0 = Instant::now();
        w.apply(&chunks, &[])?;
        let t1 = Instant::now();
        w.stage()?;
        let t2 = Instant::now();
        let offsets = BTreeMap::from([("docs".to_owned(), BTreeMap::from([(0, n as i64 + 1)]))]);
        w.commit(&CommitPayload::new(offsets, n as u64 + 1))?;
        let t3 = Instant::now();
        apply.push(t1 - t0);
        prepare.push(t2 - t1);
        commit.push(t3 - t2);
    }
    for (name, mut v) in [("apply", apply), ("prepare", prepare), ("commit", commit)] {
        let mean = v.iter().map(|d| d.as_secs_f64()).sum::<f64>() / v.len().max(1) as f64;
        v.sort();
        let p50 = v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64());
        println!(
            "{name:8} mean {:6.2} ms  p50 {:6.2} ms",
            mean * 1e3,
            p50 * 1e3
        );
    }
    Ok(())
}
