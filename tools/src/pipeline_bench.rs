//! `freshet-tools bench-ingest`: ingest a BEIR corpus through Kafka and the real pipeline, and report
//! end-to-end throughput against raw fastembed on the same texts in the same run, the cost of
//! re-sending the unchanged corpus, and the cost of editing a fraction of the documents.
//! Everything (topic, collection, index, embedding cache) is fresh and private to the run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use freshet_embedding::FastEmbedder;
use freshet_kafka::{admin, DocumentProducer};
use freshet_operators::chunk::ChunkKind;
use freshet_operators::document::{Change, ContentType, Document};
use freshet_operators::embed::{embed_input, Embedder};
use freshet_operators::envelope::encode;
use freshet_tantivy::ChunkIndexReader;
use serde_json::{json, Value};

use crate::{cpu_time, inspect};
use freshet_pipeline::config::Config;
use freshet_pipeline::endpoint::Readiness;
use freshet_pipeline::metrics::{self, Metrics};

/// `freshet-tools bench-ingest`.
#[derive(clap::Args)]
pub struct IngestBenchArgs {
    /// BEIR corpus.jsonl.
    #[arg(long, default_value = "../shared/datasets/scifact/corpus.jsonl")]
    corpus: PathBuf,
    /// Fraction of documents to edit in the edit phase.
    #[arg(long, default_value_t = 0.01)]
    edit_fraction: f64,
    /// Use only the first N documents.
    #[arg(long)]
    limit: Option<usize>,
    /// Also write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Leave out the raw fastembed phase (the pipeline-to-raw ratio is then not reported).
    #[arg(long)]
    no_raw: bool,
}

impl crate::Run for IngestBenchArgs {
    fn run(self, config: Option<&Path>) -> Result<i32> {
        bench(&Config::load(config)?, &self)?;
        Ok(0)
    }
}

pub(crate) struct Doc {
    id: String,
    title: String,
    text: String,
}

pub(crate) fn load_corpus(path: &Path, limit: Option<usize>) -> Result<Vec<Doc>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: Value =
            serde_json::from_str(line).with_context(|| format!("{}:{}", path.display(), n + 1))?;
        let field = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
        docs.push(Doc {
            id: field("_id"),
            title: field("title"),
            text: field("text"),
        });
        if limit.is_some_and(|l| docs.len() >= l) {
            break;
        }
    }
    if docs.is_empty() {
        bail!("{} holds no documents", path.display());
    }
    Ok(docs)
}

pub(crate) fn envelope(d: &Doc) -> (Vec<u8>, Option<Vec<u8>>) {
    let doc = Document {
        id: d.id.clone(),
        title: d.title.clone(),
        text: d.text.clone(),
        content_type: ContentType::PlainText,
        source: "bench".into(),
        metadata: Default::default(),
        acl: Vec::new(),
    };
    (d.id.as_bytes().to_vec(), Some(encode(&Change::Upsert(doc))))
}

fn counter(m: &Metrics, outcome: &str) -> u64 {
    m.embedding_texts
        .get_or_create(&metrics::Outcome {
            outcome: outcome.into(),
        })
        .get()
}

/// Sink writes so far, by sink and operation (`milvus`/`tantivy` × `upsert`/`delete`).
fn writes_by_sink(m: &Metrics) -> BTreeMap<String, u64> {
    ["milvus", "tantivy"]
        .iter()
        .flat_map(|s| ["upsert", "delete"].map(|o| (s, o)))
        .map(|(s, o)| {
            let n = m
                .sink_ops
                .get_or_create(&metrics::SinkOp {
                    sink: (*s).into(),
                    op: o.into(),
                })
                .get();
            (format!("{s}_{o}"), n)
        })
        .collect()
}

/// Every sink write so far.
fn writes(m: &Metrics) -> u64 {
    writes_by_sink(m).values().sum()
}

/// `after - before` per key.
fn writes_since(before: &BTreeMap<String, u64>, m: &Metrics) -> BTreeMap<String, u64> {
    writes_by_sink(m)
        .into_iter()
        .map(|(k, v)| {
            let b = before.get(&k).copied().unwrap_or(0);
            (k, v - b)
        })
        .collect()
}

/// A copy of `config` with its own topic, collection, index and embedding cache (in a new
/// temporary directory, returned too), so that the benchmark starts from nothing. Names carry
/// the time in milliseconds, so two fresh configurations of one run differ.
pub(crate) fn fresh_config(config: &Config) -> Result<(Config, PathBuf)> {
    let tag = format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let dir = std::env::temp_dir().join(format!("freshet-bench-{tag}"));
    std::fs::create_dir_all(&dir)?;
    let mut cfg = config.clone();
    cfg.kafka.topic = format!("bench.{tag}");
    cfg.kafka.dlq_topic = format!("bench.{tag}.dlq");
    cfg.kafka.group_id = format!("bench-{tag}");
    cfg.milvus.collection = format!("bench_{tag}");
    cfg.tantivy.path = dir.join("tantivy");
    cfg.pipeline.embedding_cache_path = dir.join("cache.log");
    cfg.metrics.listen = String::new();
    Ok((cfg, dir))
}

/// This process's resident memory now and its peak so far (`VmRSS`, `VmHWM`), in MB; 0 where
/// `/proc/self/status` cannot be read. The pipeline runs in this process, so after an ingest
/// this is the pipeline's memory (with the little the benchmark itself holds).
pub(crate) fn memory_mb() -> (f64, f64) {
    crate::procfs::own_memory_mib().unwrap_or((0.0, 0.0))
}

/// Raw fastembed on exactly the texts the pipeline embedded (all cores, the same batch size):
/// how many texts, and the seconds it took.
fn raw_fastembed(cfg: &Config) -> Result<(usize, f64)> {
    let reader = ChunkIndexReader::open(&cfg.tantivy.path)?;
    let mut texts: Vec<String> = reader
        .load_all()?
        .iter()
        .filter(|c| c.kind == ChunkKind::Leaf)
        .map(embed_input)
        .collect();
    texts.sort();
    texts.dedup();
    let mut ecfg = cfg.embedding.clone();
    ecfg.threads = None;
    let mut model = FastEmbedder::load(&ecfg)?;
    let t = Instant::now();
    for batch in texts.chunks(cfg.embedding.batch_size.max(1)) {
        let refs: Vec<&str> = batch.iter().map(|s| s.as_str()).collect();
        model.embed_passages(&refs)?;
    }
    Ok((texts.len(), t.elapsed().as_secs_f64()))
}

/// The pipeline, run in a thread of this process.
pub(crate) type Pipeline = std::thread::JoinHandle<Result<()>>;

/// The commits of a phase, watched from another thread: how many, when the first came and the
/// longest time without one (the phase's end counts as a commit's time).
struct CommitWatch {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Commits>,
}

#[derive(Clone, Copy, Default)]
struct Commits {
    count: u64,
    first_s: Option<f64>,
    longest_gap_s: f64,
}

impl CommitWatch {
    fn start(metrics: &Metrics) -> CommitWatch {
        let (done, counter) = (Arc::new(AtomicBool::new(false)), metrics.commits.clone());
        let stop = done.clone();
        let thread = std::thread::spawn(move || {
            let (start, base) = (Instant::now(), counter.get());
            let (mut last, mut seen, mut out) = (0.0, base, Commits::default());
            loop {
                let finished = stop.load(Ordering::SeqCst);
                let (now, n) = (start.elapsed().as_secs_f64(), counter.get());
                if n > seen || finished {
                    out.longest_gap_s = out.longest_gap_s.max(now - last);
                    last = now;
                }
                if n > seen && out.first_s.is_none() {
                    out.first_s = Some(now);
                }
                seen = n;
                if finished {
                    out.count = n - base;
                    return out;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        CommitWatch { done, thread }
    }

    fn finish(self) -> Commits {
        self.done.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

/// A histogram of `metrics` since the process started, in milliseconds (`None` without one).
fn histogram_ms(metrics: &Metrics, name: &str) -> Option<crate::freshness_budget::HistogramDelta> {
    let now = crate::freshness_budget::parse(&freshet_metrics::encode(&metrics.registry));
    let full = now
        .keys()
        .find_map(|k| k.strip_suffix("_count").filter(|n| n.ends_with(name)))?
        .to_string();
    crate::freshness_budget::histogram(&Default::default(), &now, &full).filter(|h| h.count > 0.0)
}

/// Starts the real pipeline on `cfg` in a thread of this process.
pub(crate) fn spawn_pipeline(
    cfg: &Config,
    stop: &Arc<AtomicBool>,
    metrics: &Metrics,
    ready: Readiness,
) -> Pipeline {
    let (cfg, stop, metrics) = (cfg.clone(), stop.clone(), metrics.clone());
    std::thread::spawn(move || {
        freshet_pipeline::run::run(cfg, Default::default(), stop, metrics, ready)
    })
}

/// Asks the pipeline to stop and waits for it; its error, if it failed.
pub(crate) fn stop_pipeline(stop: &AtomicBool, handle: Option<Pipeline>) -> Result<()> {
    stop.store(true, Ordering::SeqCst);
    if let Some(h) = handle {
        h.join()
            .map_err(|_| anyhow!("pipeline thread panicked"))??;
    }
    Ok(())
}

/// Chunks the pipeline has upserted so far.
pub(crate) fn chunks_upserted(m: &Metrics) -> u64 {
    m.chunks
        .get_or_create(&metrics::Outcome {
            outcome: "upsert".into(),
        })
        .get()
}

/// Waits until the tantivy commit covers every record on the topic, and until the pipeline has
/// counted that commit in `metrics` (it does so just after the commit, so the counters read
/// next include its batch; a commit of an earlier process, whose epochs this one does not
/// count, is waited for 5 s at most); if the pipeline stops, says why.
pub(crate) fn wait_caught_up(
    cfg: &Config,
    running: &mut Option<Pipeline>,
    metrics: &Metrics,
    timeout: Duration,
) -> Result<()> {
    let high = inspect::high_watermarks(&cfg.kafka, "bench-probe")?;
    let deadline = Instant::now() + timeout;
    let mut covered_since = None;
    loop {
        if running.as_ref().is_none_or(|r| r.is_finished()) {
            let why = match running.take().map(|r| r.join()) {
                Some(Ok(Err(e))) => format!("{e:#}"),
                Some(Ok(Ok(()))) => "it returned".into(),
                Some(Err(_)) => "its thread panicked".into(),
                None => "it was not running".into(),
            };
            bail!("the pipeline stopped during the benchmark: {why}");
        }
        if let Some(p) = inspect::last_payload(&cfg.tantivy.path) {
            let offsets = p.offsets.get(&cfg.kafka.topic).cloned().unwrap_or_default();
            if inspect::covers(&offsets, &high) {
                let since = *covered_since.get_or_insert_with(Instant::now);
                if metrics.durable_epoch.get() >= p.epoch as i64
                    || since.elapsed() > Duration::from_secs(5)
                {
                    return Ok(());
                }
            }
        }
        if Instant::now() > deadline {
            bail!("pipeline not caught up within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn bench(config: &Config, args: &IngestBenchArgs) -> Result<()> {
    let docs = load_corpus(&args.corpus, args.limit)?;
    let (cfg, dir) = fresh_config(config)?;
    admin::ensure_topic(&cfg.kafka, &cfg.kafka.topic, cfg.pipeline.topic_partitions)?;
    let producer = DocumentProducer::new(&cfg.kafka)?;
    let t = Instant::now();
    producer.send_many(&cfg.kafka.topic, docs.iter().map(envelope))?;
    let publish_s = t.elapsed().as_secs_f64();
    eprintln!("published {} documents in {publish_s:.1} s", docs.len());

    let metrics = Metrics::new();
    let stop = Arc::new(AtomicBool::new(false));
    let cpu_before = cpu_time::Snapshot::take();
    let start = Instant::now();
    let mut handle = Some(spawn_pipeline(&cfg, &stop, &metrics, Default::default()));
    let limit = Duration::from_secs(3600);
    let commits = CommitWatch::start(&metrics);
    wait_caught_up(&cfg, &mut handle, &metrics, limit)?;
    let first_s = start.elapsed().as_secs_f64();
    let commits = commits.finish();
    let model_wait = histogram_ms(&metrics, "embedding_model_wait_seconds");
    let cpu_first = cpu_before.until(&cpu_time::Snapshot::take());
    let chunks = chunks_upserted(&metrics);
    let embedded_first = counter(&metrics, "embedded");
    let (rss_after_mb, rss_peak_mb) = memory_mb();
    // And once the pipeline has been idle a moment (what it holds between bursts).
    std::thread::sleep(Duration::from_secs(3));
    let (rss_idle_mb, _) = memory_mb();
    eprintln!(
        "first ingest: {first_s:.1} s, {chunks} chunks, {embedded_first} embedded; RSS \
         {rss_after_mb:.0} MB, {rss_idle_mb:.0} MB 3 s later, peak {rss_peak_mb:.0} MB"
    );

    // Re-send the unchanged corpus.
    let (e0, w0) = (counter(&metrics, "embedded"), writes(&metrics));
    let t = Instant::now();
    producer.send_many(&cfg.kafka.topic, docs.iter().map(envelope))?;
    wait_caught_up(&cfg, &mut handle, &metrics, limit)?;
    let resend_s = t.elapsed().as_secs_f64();
    let (resend_embedded, resend_writes) =
        (counter(&metrics, "embedded") - e0, writes(&metrics) - w0);

    // Edit a fraction of the documents: one sentence appended to the text.
    let step = ((1.0 / args.edit_fraction.max(1e-6)).round() as usize).max(1);
    let edited: Vec<Doc> = docs
        .iter()
        .step_by(step)
        .map(|d| Doc {
            id: d.id.clone(),
            title: d.title.clone(),
            text: format!("{} This abstract was revised.", d.text),
        })
        .collect();
    let (e1, w1) = (counter(&metrics, "embedded"), writes(&metrics));
    let by_sink_before = writes_by_sink(&metrics);
    let t = Instant::now();
    producer.send_many(&cfg.kafka.topic, edited.iter().map(envelope))?;
    wait_caught_up(&cfg, &mut handle, &metrics, limit)?;
    let edit_s = t.elapsed().as_secs_f64();
    let (edit_embedded, edit_writes) = (counter(&metrics, "embedded") - e1, writes(&metrics) - w1);
    let edit_by_sink = writes_since(&by_sink_before, &metrics);

    stop_pipeline(&stop, handle)?;

    let n = docs.len() as f64;
    let pipeline_cps = chunks as f64 / first_s;
    let cpu_before = cpu_time::Snapshot::take();
    let raw_cps = if args.no_raw {
        f64::NAN
    } else {
        let (raw_texts, raw_s) = raw_fastembed(&cfg)?;
        raw_texts as f64 / raw_s
    };
    let cpu_raw = cpu_before.until(&cpu_time::Snapshot::take());
    let report = json!({
        "corpus": args.corpus.display().to_string(),
        "documents": docs.len(),
        "chunks": chunks,
        "workers": cfg.pipeline.workers,
        "publish_s": publish_s,
        "first_ingest_s": first_s,
        "docs_per_s": n / first_s,
        "chunks_per_s": pipeline_cps,
        "embedded_first": embedded_first,
        "embedded_per_s": embedded_first as f64 / first_s,
        "batch_size": cfg.embedding.batch_size,
        "batch_tokens": cfg.embedding.batch_tokens,
        "cpu_arena": cfg.embedding.cpu_arena,
        "spinning": cfg.embedding.spinning,
        "commits_first_ingest": commits.count,
        "first_commit_after_s": commits.first_s,
        "longest_without_commit_s": commits.longest_gap_s,
        "model_copies": cfg.pipeline.model_copies,
        "model_wait_ms": model_wait,
        "rss_after_first_ingest_mb": rss_after_mb,
        "rss_3s_after_first_ingest_mb": rss_idle_mb,
        "rss_peak_first_ingest_mb": rss_peak_mb,
        "cpu_first_ingest": cpu_first,
        "raw_fastembed_chunks_per_s": raw_cps,
        "ratio_pipeline_to_raw": pipeline_cps / raw_cps,
        "cpu_raw_fastembed": cpu_raw,
        "resend_unchanged_s": resend_s,
        "resend_ratio_to_first": resend_s / first_s,
        "resend_embedded": resend_embedded,
        "resend_sink_writes": resend_writes,
        "edited_documents": edited.len(),
        "edit_s": edit_s,
        "edit_ratio_to_first": edit_s / first_s,
        "edit_embedded": edit_embedded,
        "edit_sink_writes": edit_writes,
        "edit_sink_writes_per_document": edit_writes as f64 / edited.len().max(1) as f64,
        "edit_sink_writes_by_sink": edit_by_sink,
        "machine": format!("{} cores", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)),
    });
    println!("| measure | value |\n|---|---|");
    if let Value::Object(m) = &report {
        for (k, v) in m {
            let v = match v.as_f64() {
                Some(f) if v.is_f64() => format!("{f:.3}"),
                _ => v.to_string(),
            };
            println!("| {k} | {v} |");
        }
    }
    if let Some(out) = &args.json {
        std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
