//! `freshet-tools bench-index`: the vector index types of `[milvus] index_type` side by side on
//! the same rows: search latency, recall against the exact (FLAT) answers, and Milvus' memory.
//!
//! The rows are the vectors of an existing collection (`--from-collection`, e.g. one that
//! `bench-replicate` wrote) or seeded vectors around seeded centres (as embeddings of related
//! texts cluster). For each index type, FLAT first, one collection gets every row: created,
//! released (so that the rows go to sealed segments, not to a query node's growing ones),
//! filled, flushed, and waited for until Milvus has indexed it (`build_s`). Then each collection
//! in turn, the others released, is loaded and searched: the same queries (rows plus Gaussian
//! noise of norm `--noise`, re-normalised, or the texts of `--queries-from` embedded by the
//! configured model), top `--k`, one at a time, `Bounded` consistency as the query node reads
//! (the rows are flushed before any search), for each `--ef` (HNSW) or `--nprobe` (IVF) given;
//! recall@k is against the FLAT collection's answers. Milvus' resident memory is read from
//! `/proc/<pid>/status` (`VmRSS`) of the Milvus binary that `deploy/start-milvus.sh` started (its
//! process group in the run directory's `pids/milvus.pid`), before any collection is loaded and
//! after each one is.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use freshet_embedding::EmbeddingModel;
use freshet_milvus::{
    ChunkFilter, ConsistencyLevel, IndexType, MilvusConfig, MilvusSink, SearchTuning,
    DEFAULT_SEARCH_EF, DEFAULT_SEARCH_NPROBE,
};
use freshet_operators::chunk::{Chunk, ChunkKind};
use serde::Serialize;

use crate::config::Config;
use crate::query_bench::Percentiles;
use crate::replicate::perturb;

/// `freshet-tools bench-index`.
#[derive(Clone, Debug, clap::Args)]
pub struct IndexBenchArgs {
    /// Copy the vectors of this collection (e.g. one `bench-replicate` wrote; it is released
    /// once read); without it, seeded vectors of `[milvus] dim` dimensions.
    #[arg(long)]
    pub from_collection: Option<String>,
    /// Rows: seeded rows made, or the most rows copied (default: every row of
    /// `--from-collection`, else 5000).
    #[arg(long)]
    pub rows: Option<usize>,
    /// Index types, FLAT (the reference) always included and measured first.
    #[arg(long, value_delimiter = ',', default_value = "hnsw,ivf_flat,ivf_sq8", value_parser = index_type)]
    pub types: Vec<IndexType>,
    /// HNSW `ef` values searched with (one pass of the queries each).
    #[arg(long, value_delimiter = ',', default_values_t = [DEFAULT_SEARCH_EF])]
    pub ef: Vec<usize>,
    /// IVF `nprobe` values searched with (one pass of the queries each).
    #[arg(long, value_delimiter = ',', default_values_t = [DEFAULT_SEARCH_NPROBE])]
    pub nprobe: Vec<usize>,
    /// Queries per pass (and 20 more first, not counted, to warm up).
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    /// Norm of the Gaussian noise added to the row each query is made from.
    #[arg(long, default_value_t = 0.3)]
    pub noise: f32,
    /// Real queries instead: the texts of this BEIR `queries.jsonl`, embedded with the
    /// configured model (as the query node embeds a query), taken in turn.
    #[arg(long)]
    pub queries_from: Option<PathBuf>,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// How long to wait for Milvus to index a collection.
    #[arg(long, default_value_t = 3600)]
    pub index_wait_secs: u64,
    /// Milvus' pid (default: the Milvus binary in the process group of the run directory's
    /// `pids/milvus.pid`).
    #[arg(long)]
    pub milvus_pid: Option<u32>,
    /// Keep the collections (`freshet_bench_index_<type>_<pid>`) instead of dropping them.
    #[arg(long)]
    pub keep: bool,
    /// Also write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

fn index_type(s: &str) -> std::result::Result<IndexType, String> {
    IndexType::ALL
        .into_iter()
        .find(|t| t.as_str() == s)
        .ok_or_else(|| format!("{s:?} is none of hnsw, ivf_flat, ivf_sq8, flat"))
}

impl crate::Run for IndexBenchArgs {
    fn run(self, config: Option<&Path>) -> Result<i32> {
        run(&Config::load(config)?, &self)?;
        Ok(0)
    }
}

/// One index type with one search setting.
#[derive(Debug, Serialize)]
pub struct IndexResult {
    pub index_type: IndexType,
    /// The build parameters (`M`, `efConstruction`, `nlist`).
    pub build: String,
    /// The search parameter (`ef=256`, `nprobe=32`, `-`).
    pub search: String,
    /// From the flush call (which returns once the rows are persisted) until Milvus reported
    /// every row indexed.
    pub build_s: f64,
    /// Rows the query node searches through index files (none for FLAT).
    pub indexed_rows: i64,
    /// Milvus' VmRSS with this collection loaded and the others released (MiB).
    pub rss_mib: Option<f64>,
    pub latency_ms: Percentiles,
    pub recall_at_k: f64,
    pub errors: usize,
}

#[derive(Debug, Serialize)]
pub struct IndexReport {
    pub source: String,
    pub rows: usize,
    pub dim: usize,
    pub queries: usize,
    pub k: usize,
    /// What the queries are: rows plus noise of this norm, or the texts of a file.
    pub query_source: String,
    /// Milvus' VmRSS before the first collection was loaded, every one released (MiB).
    pub rss_before_mib: Option<f64>,
    pub results: Vec<IndexResult>,
}

/// The rows: `(chunk id, vector)`.
type Rows = Vec<(String, Vec<f32>)>;

fn run(config: &Config, args: &IndexBenchArgs) -> Result<()> {
    if args.queries == 0 || args.k == 0 || args.ef.contains(&0) || args.nprobe.contains(&0) {
        bail!("--queries, --k, --ef and --nprobe must be positive");
    }
    let mut types = vec![IndexType::Flat];
    for t in &args.types {
        if !types.contains(t) {
            types.push(*t);
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (rows, source) = match &args.from_collection {
        Some(name) => (
            rt.block_on(copy_rows(config, name, args.rows))?,
            format!("collection {name}"),
        ),
        None => {
            let n = args.rows.unwrap_or(5000);
            (
                seeded_rows(n, config.milvus.dim),
                format!("{n} seeded vectors"),
            )
        }
    };
    let Some(dim) = rows.first().map(|r| r.1.len()) else {
        bail!("no rows to index");
    };
    eprintln!("{} rows of {dim} dimensions ({source})", rows.len());
    let queries: Vec<Vec<f32>> = match &args.queries_from {
        Some(path) => embedded_queries(config, path, args.queries + WARMUP, dim)?,
        None => (0..args.queries + WARMUP)
            .map(|q| {
                let row = (q as u64).wrapping_mul(7919) % rows.len() as u64;
                perturb(&rows[row as usize].1, args.noise, q as u64 ^ 0xABCD)
            })
            .collect(),
    };
    let pid = std::process::id();
    let mut built = Vec::new();
    for t in &types {
        let cfg = MilvusConfig {
            collection: format!("freshet_bench_index_{t}_{pid}"),
            dim,
            index_type: *t,
            flush_rows: 0,
            flush_interval: Duration::ZERO,
            ..config.milvus.clone()
        };
        let sink = rt.block_on(MilvusSink::connect(cfg))?;
        let build_s = rt.block_on(build(&sink, &rows, args.index_wait_secs))?;
        eprintln!(
            "{t}: {} rows indexed {build_s:.1} s after the flush",
            rows.len()
        );
        built.push((*t, sink, build_s));
    }
    let milvus_pid = match args.milvus_pid {
        Some(p) => Some(p),
        None => crate::procfs::milvus_pid().unwrap_or_else(|e| {
            eprintln!("not reporting Milvus' memory: {e:#}");
            None
        }),
    };
    let rss = || milvus_pid.and_then(|p| crate::procfs::vm_rss_mib(p).ok());
    let rss_before_mib = rss();
    let mut truth: Vec<Vec<String>> = Vec::new();
    let mut results = Vec::new();
    for (t, sink, build_s) in &built {
        let indexed_rows = rt.block_on(async {
            sink.check_collection().await?;
            wait_loaded(sink, rows.len()).await
        })?;
        let rss_mib = rss();
        let tunings: Vec<(String, SearchTuning)> = match t {
            IndexType::Hnsw => args
                .ef
                .iter()
                .map(|&ef| (format!("ef={ef}"), SearchTuning { ef, nprobe: 1 }))
                .collect(),
            IndexType::IvfFlat | IndexType::IvfSq8 => args
                .nprobe
                .iter()
                .map(|&nprobe| (format!("nprobe={nprobe}"), SearchTuning { ef: 1, nprobe }))
                .collect(),
            IndexType::Flat => vec![("-".to_owned(), SearchTuning::default())],
        };
        for (search, tuning) in tunings {
            let (latencies, answers, errors) =
                rt.block_on(search_all(sink, &queries, args.k, tuning));
            if *t == IndexType::Flat {
                if errors > 0 {
                    bail!("{errors} FLAT searches failed: no reference answers");
                }
                truth = answers.clone();
            }
            let recall_at_k = recall(&answers, &truth);
            results.push(IndexResult {
                index_type: *t,
                build: build_params(sink.config()),
                search,
                build_s: *build_s,
                indexed_rows,
                rss_mib,
                latency_ms: Percentiles::of(latencies),
                recall_at_k,
                errors,
            });
        }
        rt.block_on(sink.release())?;
    }
    if args.keep {
        let names: Vec<&str> = built
            .iter()
            .map(|(_, s, _)| s.config().collection.as_str())
            .collect();
        eprintln!("kept collections: {}", names.join(", "));
    } else {
        for (_, sink, _) in &built {
            if let Err(e) = rt.block_on(sink.drop_collection()) {
                eprintln!("could not drop {}: {e}", sink.config().collection);
            }
        }
    }
    let report = IndexReport {
        source,
        rows: rows.len(),
        dim,
        queries: args.queries,
        k: args.k,
        query_source: match &args.queries_from {
            Some(p) => format!("texts of {}", p.display()),
            None => format!("rows plus noise {}", args.noise),
        },
        rss_before_mib,
        results,
    };
    print_table(&report);
    if let Some(out) = &args.json {
        std::fs::write(out, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

/// Queries run first and not counted.
const WARMUP: usize = 20;

/// `n` query vectors: the texts of `path` in turn, embedded by the configured model.
fn embedded_queries(
    config: &Config,
    path: &PathBuf,
    n: usize,
    dim: usize,
) -> Result<Vec<Vec<f32>>> {
    let texts = crate::query_bench::read_queries(path)?;
    let mut model = EmbeddingModel::load(&config.embedding)?;
    let distinct: Vec<&str> = texts.iter().take(n).map(String::as_str).collect();
    let vectors = model.embed_queries(&distinct)?;
    if vectors.first().map(Vec::len) != Some(dim) {
        bail!("the configured model's vectors do not have the rows' {dim} dimensions");
    }
    eprintln!("{} queries embedded from {}", vectors.len(), path.display());
    Ok((0..n).map(|q| vectors[q % vectors.len()].clone()).collect())
}

/// Every row of collection `name` (at most `limit`), by chunk id.
async fn copy_rows(config: &Config, name: &str, limit: Option<usize>) -> Result<Rows> {
    let cfg = MilvusConfig {
        collection: name.to_owned(),
        ..config.milvus.clone()
    };
    let sink = MilvusSink::connect(cfg).await?;
    sink.load()
        .await
        .with_context(|| format!("loading collection {name}"))?;
    let limit = limit.unwrap_or(usize::MAX);
    let mut rows: Rows = Vec::new();
    while rows.len() < limit {
        let after = rows.last().map(|r| r.0.as_str());
        // Pages of about 2 MiB: the client refuses answers over 4 MiB.
        let page_rows = match rows.first() {
            Some((_, v)) => ((2 << 20) / (v.len() * 4 + 64)).clamp(1, 4096),
            None => 64,
        };
        let page = sink
            .vectors_after(after, (limit - rows.len()).min(page_rows))
            .await?;
        if page.is_empty() {
            break;
        }
        rows.extend(page);
        if rows.len() % 100_000 < page_rows {
            eprintln!("read {} rows of {name}", rows.len());
        }
    }
    // Released again, so that Milvus' memory before and with each collection is that
    // collection's, not the source's beside it.
    sink.release()
        .await
        .with_context(|| format!("releasing collection {name}"))?;
    Ok(rows)
}

/// `n` unit vectors of `dim` dimensions around 256 seeded centres.
fn seeded_rows(n: usize, dim: usize) -> Rows {
    let centres: Vec<Vec<f32>> = (0..256u64)
        .map(|c| perturb(&vec![0.0; dim], 1.0, 0xC0FFEE ^ c))
        .collect();
    (0..n as u64)
        .map(|i| {
            let id = format!(
                "{:032x}",
                u128::from(i).wrapping_mul(0x2545_F491_4F6C_DD1D_0123)
            );
            let v = perturb(&centres[(i % 256) as usize], 0.8, 0x5EED ^ i);
            (id, v)
        })
        .collect()
}

fn chunk(i: usize, id: &str) -> Chunk {
    Chunk {
        chunk_id: id.to_owned(),
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
        source: "bench://index".to_owned(),
        metadata_json: "{}".to_owned(),
        acl: Vec::new(),
        doc_hash: String::new(),
    }
}

/// A fresh collection holding `rows`, released, flushed and indexed: the seconds from the
/// flush until Milvus reported every row indexed.
async fn build(sink: &MilvusSink, rows: &Rows, wait_secs: u64) -> Result<f64> {
    sink.drop_collection().await?;
    sink.ensure_collection().await?;
    sink.release().await?;
    for (n, part) in rows.chunks(2000).enumerate() {
        let batch: Vec<(Chunk, Vec<f32>)> = part
            .iter()
            .enumerate()
            .map(|(i, (id, v))| (chunk(n * 2000 + i, id), v.clone()))
            .collect();
        sink.upsert(&batch).await?;
    }
    let flushed = Instant::now();
    sink.flush().await?;
    let deadline = flushed + Duration::from_secs(wait_secs);
    loop {
        let Some(info) = sink.describe_vector_index().await? else {
            bail!("{}: no vector index", sink.config().collection);
        };
        if !info.failure.is_empty() {
            bail!(
                "{}: index build failed: {}",
                sink.config().collection,
                info.failure
            );
        }
        if info.total_rows >= rows.len() as i64 && info.pending_rows == 0 {
            return Ok(flushed.elapsed().as_secs_f64());
        }
        if Instant::now() > deadline {
            bail!(
                "{}: not indexed within {wait_secs} s: {info:?}",
                sink.config().collection
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the query nodes hold `rows` rows of the collection in sealed segments; the rows
/// of those searched through an index (Milvus 2.3 builds none for FLAT, nor for a segment under
/// 1,024 rows).
async fn wait_loaded(sink: &MilvusSink, rows: usize) -> Result<i64> {
    let deadline = Instant::now() + sink.config().timeout;
    loop {
        let segs = sink.loaded_segments().await?;
        let sealed: i64 = segs.iter().filter(|s| !s.growing).map(|s| s.rows).sum();
        if sealed >= rows as i64 {
            return Ok(segs
                .iter()
                .filter(|s| !s.growing && !s.index_name.is_empty())
                .map(|s| s.rows)
                .sum());
        }
        if Instant::now() > deadline {
            bail!(
                "{}: {sealed} of {rows} rows loaded after {:?}",
                sink.config().collection,
                sink.config().timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The queries one at a time: latencies (ms) and answers of the counted ones, and errors.
async fn search_all(
    sink: &MilvusSink,
    queries: &[Vec<f32>],
    k: usize,
    tuning: SearchTuning,
) -> (Vec<f64>, Vec<Vec<String>>, usize) {
    let filter = ChunkFilter::default();
    let (mut latencies, mut answers, mut errors) = (Vec::new(), Vec::new(), 0);
    for (q, v) in queries.iter().enumerate() {
        let t = Instant::now();
        let hits = sink
            .search_with(v, k, &filter, ConsistencyLevel::Bounded, tuning)
            .await;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if q < WARMUP {
            continue;
        }
        match hits {
            Ok(h) => {
                latencies.push(ms);
                answers.push(h.into_iter().map(|(id, _)| id).collect());
            }
            Err(e) => {
                if errors == 0 {
                    eprintln!("{}: search failed: {e}", sink.config().collection);
                }
                errors += 1;
                answers.push(Vec::new());
            }
        }
    }
    (latencies, answers, errors)
}

/// Mean share of each reference answer found.
fn recall(answers: &[Vec<String>], truth: &[Vec<String>]) -> f64 {
    let per: Vec<f64> = answers
        .iter()
        .zip(truth)
        .filter(|(_, t)| !t.is_empty())
        .map(|(a, t)| {
            let t: HashSet<&String> = t.iter().collect();
            a.iter().filter(|id| t.contains(id)).count() as f64 / t.len() as f64
        })
        .collect();
    per.iter().sum::<f64>() / per.len().max(1) as f64
}

fn build_params(cfg: &MilvusConfig) -> String {
    match cfg.index_type {
        IndexType::Hnsw => format!("M={} efC={}", cfg.hnsw_m, cfg.hnsw_ef_construction),
        IndexType::IvfFlat | IndexType::IvfSq8 => format!("nlist={}", cfg.ivf_nlist),
        IndexType::Flat => "-".to_owned(),
    }
}

fn print_table(r: &IndexReport) {
    println!(
        "{} rows of {} dimensions ({}); {} queries ({}), top {}; Milvus RSS before loading: {}",
        r.rows,
        r.dim,
        r.source,
        r.queries,
        r.query_source,
        r.k,
        mib(r.rss_before_mib)
    );
    println!(
        "{:<9} {:<18} {:<12} {:>8} {:>9} {:>9} {:>8} {:>8} {:>10} {:>6}",
        "index",
        "build",
        "search",
        "build s",
        "indexed",
        "RSS MiB",
        "p50 ms",
        "p99 ms",
        "recall@k",
        "errors"
    );
    for x in &r.results {
        println!(
            "{:<9} {:<18} {:<12} {:>8.1} {:>9} {:>9} {:>8.2} {:>8.2} {:>10.4} {:>6}",
            x.index_type.as_str(),
            x.build,
            x.search,
            x.build_s,
            x.indexed_rows,
            mib(x.rss_mib),
            x.latency_ms.p50,
            x.latency_ms.p99,
            x.recall_at_k,
            x.errors
        );
    }
}

fn mib(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |m| format!("{m:.0}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_counts_the_reference_ids_found() {
        let ids = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let truth = vec![ids(&["a", "b"]), ids(&["c", "d"]), Vec::new()];
        let answers = vec![ids(&["b", "x"]), ids(&["c", "d"]), ids(&["z"])];
        assert!((recall(&answers, &truth) - 0.75).abs() < 1e-9);
        assert_eq!(recall(&[], &[]), 0.0);
    }

    #[test]
    fn seeded_rows_are_unit_vectors_repeatably() {
        let a = seeded_rows(300, 16);
        assert_eq!(a.len(), 300);
        assert_eq!(a, seeded_rows(300, 16));
        let ids: HashSet<&String> = a.iter().map(|r| &r.0).collect();
        assert_eq!(ids.len(), 300);
        for (_, v) in &a {
            let n: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((n - 1.0).abs() < 1e-4);
        }
        assert_eq!(index_type("ivf_sq8"), Ok(IndexType::IvfSq8));
        assert!(index_type("IVF_SQ8").is_err());
    }
}
