//! `freshet-tools bench-bm25`: BM25 top-k latency in process over an index directory, the
//! pruned scorer against the exhaustive one side by side (each query timed with both, in
//! alternating order), and a check that both return the same top k (documents, score bits, tie
//! order). Times the top k only (scores and addresses): loading the k chunks afterwards is the
//! same work for both scorers.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use freshet_tantivy::{Bm25Params, Bm25Scorer, ChunkFilter, ChunkIndexReader};
use serde::Serialize;

use crate::config::Config;
use crate::eval::beir::Dataset;
use crate::query_bench::Percentiles;

/// `freshet-tools bench-bm25`.
#[derive(clap::Args)]
pub struct Bm25BenchArgs {
    /// The tantivy index directory (a pipeline's, or one `bench-replicate` built).
    #[arg(long)]
    index: PathBuf,
    /// A BEIR dataset directory: its judged queries (`--split`) are searched.
    #[arg(long)]
    dataset: PathBuf,
    #[arg(long, default_value = "test")]
    split: String,
    /// The top-k sizes to time (the node fetches `bm25_top_k`, 50 by default, per route).
    #[arg(long, value_delimiter = ',', default_value = "10,50")]
    k: Vec<usize>,
    /// Untimed passes over the queries first (page cache, allocator).
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Timed passes over the queries.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Write the report here as JSON too.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct KReport {
    k: usize,
    exhaustive_ms: Percentiles,
    pruned_ms: Percentiles,
    /// exhaustive ÷ pruned, at p50 and p99.
    speedup_p50: f64,
    speedup_p99: f64,
    /// Searches whose top k differed between the scorers (must be 0).
    mismatches: usize,
}

#[derive(Serialize)]
struct Report {
    index: PathBuf,
    chunks: u64,
    segments: usize,
    queries: usize,
    k1: f32,
    b: f32,
    by_k: Vec<KReport>,
}

impl crate::Run for Bm25BenchArgs {
    fn run(self, config: Option<&Path>) -> Result<i32> {
        let config = Config::load(config)?;
        config.tantivy.configure_japanese()?;
        let report = bench(&self)?;
        for r in &report.by_k {
            println!(
                "k={:<3} exhaustive p50 {:.3} ms p99 {:.3} ms | pruned p50 {:.3} ms p99 {:.3} ms | \
                 ×{:.1} p50 ×{:.1} p99 | mismatches {}",
                r.k,
                r.exhaustive_ms.p50,
                r.exhaustive_ms.p99,
                r.pruned_ms.p50,
                r.pruned_ms.p99,
                r.speedup_p50,
                r.speedup_p99,
                r.mismatches
            );
        }
        println!(
            "{} chunks in {} segments, {} queries × {} passes, k1 {} b {}",
            report.chunks, report.segments, report.queries, self.repeat, report.k1, report.b
        );
        if let Some(path) = &self.json {
            std::fs::write(path, serde_json::to_string_pretty(&report)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let mismatched = report.by_k.iter().any(|r| r.mismatches > 0);
        Ok(if mismatched { 1 } else { 0 })
    }
}

fn bench(args: &Bm25BenchArgs) -> Result<Report> {
    if args.repeat == 0 || args.k.is_empty() || args.k.contains(&0) {
        bail!("--repeat and every --k must be at least 1");
    }
    let queries = Dataset::load(&args.dataset, &args.split)?.judged_queries();
    if queries.is_empty() {
        bail!("{} has no judged queries", args.dataset.display());
    }
    let open = |scorer| -> Result<ChunkIndexReader> {
        let r = ChunkIndexReader::open_manual(&args.index)
            .with_context(|| format!("opening {}", args.index.display()))?
            .with_bm25_scorer(scorer);
        r.reload()?;
        Ok(r)
    };
    let pruned = open(Bm25Scorer::Pruned)?;
    let exhaustive = open(Bm25Scorer::Exhaustive)?;
    let snapshot = pruned.snapshot()?;
    let (chunks, segments) = (snapshot.count(), snapshot.segment_count());
    drop(snapshot);
    let none = ChunkFilter::none();
    let mut by_k = Vec::new();
    for &k in &args.k {
        let (mut ex, mut pr, mut mismatches) = (Vec::new(), Vec::new(), 0);
        for pass in 0..args.warmup + args.repeat {
            for (i, (_, q)) in queries.iter().enumerate() {
                // Alternate which scorer goes first, so neither always finds a warmer cache.
                let order = if (pass + i) % 2 == 0 {
                    [&pruned, &exhaustive]
                } else {
                    [&exhaustive, &pruned]
                };
                let mut timed = [(0.0, Vec::new()), (0.0, Vec::new())];
                for (slot, r) in timed.iter_mut().zip(order) {
                    let t = Instant::now();
                    let hits = r.bm25_hits(q, k, &none)?;
                    *slot = (t.elapsed().as_secs_f64() * 1e3, hits);
                }
                let [(a_ms, a), (b_ms, b)] = timed;
                let (p_ms, e_ms) = if std::ptr::eq(order[0], &pruned) {
                    (a_ms, b_ms)
                } else {
                    (b_ms, a_ms)
                };
                let same = a.len() == b.len()
                    && a.iter()
                        .zip(&b)
                        .all(|(x, y)| x.0.to_bits() == y.0.to_bits() && x.1 == y.1);
                if pass >= args.warmup {
                    pr.push(p_ms);
                    ex.push(e_ms);
                    mismatches += usize::from(!same);
                }
            }
        }
        let (ex, pr) = (Percentiles::of(ex), Percentiles::of(pr));
        by_k.push(KReport {
            k,
            speedup_p50: ex.p50 / pr.p50.max(1e-9),
            speedup_p99: ex.p99 / pr.p99.max(1e-9),
            exhaustive_ms: ex,
            pruned_ms: pr,
            mismatches,
        });
    }
    let params = Bm25Params::default();
    Ok(Report {
        index: args.index.clone(),
        chunks,
        segments,
        queries: queries.len(),
        k1: params.k1,
        b: params.b,
        by_k,
    })
}
