//! `freshet-tools bench-seal`: vector search latency on Milvus collections that are being
//! written to, with the sink's sealing policy (`[milvus] flush_rows` / `flush_interval`) and
//! without it, side by side in one run.
//!
//! Two fresh collections receive the same rows in the same small inserts on one timetable
//! (`--batch` rows every `batch / rows_per_s` seconds, as the pipeline's sink writes a stream of
//! epochs); one has a [`Sealer`] with the configured policy, the other none. Meanwhile searches
//! (top 10, the query node's HNSW `ef`, `Bounded` consistency as the query node reads) go to the
//! two collections in turn on a fixed timetable, each timed from its scheduled time. Phases:
//! the first and second half of the writing, then `--after-secs` with nothing written and
//! nothing flushed by the benchmark (what a deployment sees once a stream pauses).
//!
//! Vectors are seeded random unit vectors of the configured model's dimension; each query is a
//! row written earlier plus Gaussian noise of norm 0.3, so it has near neighbours.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use freshet_metrics::{encode, Registrar};
use freshet_milvus::{
    ChunkFilter, ConsistencyLevel, MilvusConfig, MilvusSink, SealMetrics, Sealer, SearchTuning,
};
use freshet_operators::chunk::{Chunk, ChunkKind};
use serde::Serialize;

use crate::config::Config;
use crate::query_bench::Percentiles;
use crate::replicate::perturb;

/// `freshet-tools bench-seal`.
#[derive(Clone, Debug, clap::Args)]
pub struct SealBenchArgs {
    /// Rows written to each collection (SciFact with MiniLM: 11,358 leaf chunks).
    #[arg(long, default_value_t = 12_000)]
    pub rows: u64,
    /// Rows per insert.
    #[arg(long, default_value_t = 50)]
    pub batch: u64,
    /// Rows written per second (to each collection).
    #[arg(long, default_value_t = 200.0)]
    pub rows_per_s: f64,
    /// Searches per second (both collections together, in turn).
    #[arg(long, default_value_t = 40.0)]
    pub searches_per_s: f64,
    /// Seconds of searches after the writing.
    #[arg(long, default_value_t = 30.0)]
    pub after_secs: f64,
    /// Also write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

impl crate::Run for SealBenchArgs {
    fn run(self, config: Option<&Path>) -> Result<i32> {
        run(&Config::load(config)?, &self)?;
        Ok(0)
    }
}

/// One collection's searches in one phase.
#[derive(Debug, Serialize)]
pub struct PhaseLatency {
    pub collection: &'static str,
    pub phase: &'static str,
    pub latency_ms: Percentiles,
    pub errors: usize,
}

#[derive(Debug, Serialize)]
pub struct SealReport {
    pub rows: u64,
    pub batch: u64,
    pub rows_per_s: f64,
    pub flush_rows: u64,
    pub flush_interval_ms: u64,
    pub phases: Vec<PhaseLatency>,
    /// Rows in sealed, indexed segments at the end, per collection.
    pub sealed_rows_with_policy: i64,
    pub sealed_rows_without: i64,
    /// The sealer's metrics at the end.
    pub sealer_metrics: String,
}

const PHASES: [&str; 3] = [
    "writing, first half",
    "writing, second half",
    "after writing",
];

fn row(i: u64, dim: usize) -> (Chunk, Vec<f32>) {
    let id = format!(
        "{:032x}",
        u128::from(i).wrapping_mul(0x2545_F491_4F6C_DD1D_0123)
    );
    let chunk = Chunk {
        chunk_id: id,
        doc_id: format!("doc{i}"),
        kind: ChunkKind::Leaf,
        parent_id: None,
        index: 0,
        char_start: 0,
        char_end: 0,
        section: Vec::new(),
        text: String::new(),
        token_count: 0,
        title: String::new(),
        source: "bench://seal".to_owned(),
        metadata_json: "{}".to_owned(),
        acl: Vec::new(),
        doc_hash: String::new(),
    };
    (chunk, perturb(&vec![0.0; dim], 1.0, i))
}

fn run(config: &Config, args: &SealBenchArgs) -> Result<()> {
    if args.rows == 0 || args.batch == 0 || args.rows_per_s <= 0.0 || args.searches_per_s <= 0.0 {
        bail!("--rows, --batch, --rows-per-s and --searches-per-s must be positive");
    }
    let dim = config.milvus.dim;
    let pid = std::process::id();
    let on_cfg = MilvusConfig {
        collection: format!("freshet_bench_seal_on_{pid}"),
        ..config.milvus.clone()
    };
    let off_cfg = MilvusConfig {
        collection: format!("freshet_bench_seal_off_{pid}"),
        flush_rows: 0,
        flush_interval: Duration::ZERO,
        ..config.milvus.clone()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (on, off) = rt.block_on(async {
        let mut out = Vec::new();
        for c in [&on_cfg, &off_cfg] {
            let s = MilvusSink::connect(c.clone()).await?;
            s.drop_collection().await?;
            s.ensure_collection().await?;
            out.push(Arc::new(s));
        }
        Ok::<_, freshet_milvus::Error>((out.remove(0), out.remove(0)))
    })?;
    let mut r = Registrar::new("bench");
    let metrics = SealMetrics::register(&mut r);
    let registry = r.finish();
    let Some(sealer) = Sealer::start(on_cfg.clone(), None, Some(metrics))? else {
        bail!("[milvus] flush_rows and flush_interval are both 0: nothing to compare");
    };

    let start = Instant::now();
    let write_secs = args.rows as f64 / args.rows_per_s;
    let half = start + Duration::from_secs_f64(write_secs / 2.0);
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // The writer: the same inserts into both collections on one timetable.
    let writer = {
        let (on, off, written, args) = (on.clone(), off.clone(), written.clone(), args.clone());
        rt.spawn(async move {
            let mut i = 0u64;
            let mut n = 0u64;
            while i < args.rows {
                let due = start + Duration::from_secs_f64(i as f64 / args.rows_per_s);
                tokio::time::sleep_until(due.into()).await;
                let rows: Vec<_> = (i..(i + args.batch).min(args.rows))
                    .map(|j| row(j, dim))
                    .collect();
                on.upsert(&rows).await?;
                sealer.wrote(rows.len() as u64);
                off.upsert(&rows).await?;
                i += rows.len() as u64;
                n += 1;
                written.store(i, std::sync::atomic::Ordering::SeqCst);
            }
            eprintln!("wrote {i} rows in {n} inserts to each collection");
            Ok::<_, freshet_milvus::Error>(sealer)
        })
    };
    // The searcher: both collections in turn on a fixed timetable, until the writing is done
    // and `after_secs` more have passed.
    let mut samples: Vec<(usize, usize, Option<f64>)> = Vec::new();
    let filter = ChunkFilter::default();
    let mut writing_done: Option<Instant> = None;
    let mut sealer_back = None;
    let mut writer = Some(writer);
    for q in 0u64.. {
        let due = start + Duration::from_secs_f64(q as f64 / args.searches_per_s);
        if let Some(w) = writer.as_ref().filter(|w| w.is_finished()) {
            let _ = w;
            let w = writer.take().expect("checked");
            sealer_back = Some(rt.block_on(w)??);
            writing_done = Some(Instant::now());
            eprintln!("writing done after {:.1} s", start.elapsed().as_secs_f64());
        }
        if writing_done.is_some_and(|t| t.elapsed().as_secs_f64() >= args.after_secs) {
            break;
        }
        let phase = match writing_done {
            Some(_) => 2,
            None if due < half => 0,
            None => 1,
        };
        let seen = written.load(std::sync::atomic::Ordering::SeqCst);
        if seen == 0 {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let target = (q % seen).wrapping_mul(7919) % seen;
        let query = perturb(&row(target, dim).1, 0.3, q ^ 0xABCD);
        let which = (q % 2) as usize;
        let sink = if which == 0 { &on } else { &off };
        let latency = rt.block_on(async {
            tokio::time::sleep_until(due.into()).await;
            sink.search_with(
                &query,
                10,
                &filter,
                ConsistencyLevel::Bounded,
                SearchTuning::default(),
            )
            .await
            .ok()
            .map(|_| due.elapsed().as_secs_f64() * 1000.0)
        });
        samples.push((which, phase, latency));
    }
    let sealed = |s: &MilvusSink| -> Result<i64> {
        Ok(rt
            .block_on(s.loaded_segments())?
            .iter()
            .filter(|g| !g.growing && !g.index_name.is_empty())
            .map(|g| g.rows)
            .sum())
    };
    let (sealed_on, sealed_off) = (sealed(&on)?, sealed(&off)?);
    drop(sealer_back);
    let sealer_metrics = encode(&registry)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    for s in [&on, &off] {
        if let Err(e) = rt.block_on(s.drop_collection()) {
            eprintln!("could not drop {}: {e}", s.config().collection);
        }
    }
    let mut phases = Vec::new();
    for (which, name) in [(0usize, "with policy"), (1, "without")] {
        for (p, phase) in PHASES.iter().enumerate() {
            let of: Vec<_> = samples
                .iter()
                .filter(|s| s.0 == which && s.1 == p)
                .collect();
            phases.push(PhaseLatency {
                collection: name,
                phase,
                latency_ms: Percentiles::of(of.iter().filter_map(|s| s.2).collect()),
                errors: of.iter().filter(|s| s.2.is_none()).count(),
            });
        }
    }
    let report = SealReport {
        rows: args.rows,
        batch: args.batch,
        rows_per_s: args.rows_per_s,
        flush_rows: on_cfg.flush_rows,
        flush_interval_ms: on_cfg.flush_interval.as_millis() as u64,
        phases,
        sealed_rows_with_policy: sealed_on,
        sealed_rows_without: sealed_off,
        sealer_metrics,
    };
    println!(
        "{} rows, {} per insert, {} rows/s; policy: flush_rows {}, flush_interval {} ms",
        report.rows, report.batch, report.rows_per_s, report.flush_rows, report.flush_interval_ms
    );
    println!(
        "{:<12} {:<22} {:>6} {:>8} {:>8} {:>8} {:>6}",
        "collection", "phase", "n", "p50 ms", "p99 ms", "max ms", "errors"
    );
    for p in &report.phases {
        println!(
            "{:<12} {:<22} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>6}",
            p.collection,
            p.phase,
            p.latency_ms.count,
            p.latency_ms.p50,
            p.latency_ms.p99,
            p.latency_ms.max,
            p.errors
        );
    }
    println!(
        "sealed and indexed rows at the end: with policy {}, without {}",
        report.sealed_rows_with_policy, report.sealed_rows_without
    );
    println!("{}", report.sealer_metrics);
    if let Some(out) = &args.json {
        std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
