//! `freshet-tools bench-load`: hybrid query latency at a steady request rate while the pipeline
//! ingests a BEIR corpus, against the same rate with the pipeline idle, and the ingest's
//! throughput with and without that query load, side by side in one run.
//!
//! 1. **Ingest without queries.** A fresh topic, collection, index and embedding cache; the real
//!    pipeline in this process, started and ready before the corpus is published; timed from
//!    the start of publishing until the tantivy commit covers every record. Its collection is
//!    dropped afterwards.
//! 2. **Ingest with queries.** A second fresh set and pipeline, and a query node (the
//!    `freshet-query` binary, spawned) on that index and collection. An open-loop load generator
//!    sends `rate` requests per second on a fixed timetable (queries round robin), first a
//!    warm-up (discarded), then the corpus is published and the same ingest is timed while the
//!    requests go on: the node searches the index the pipeline is writing.
//! 3. **Idle.** The collection is flushed (sealed and indexed by Milvus), the run waits until the
//!    machine is quiet (requests still going, discarded), then `idle_secs` at the same rate on
//!    the same, now complete, index, the pipeline running with nothing to read.
//!
//! Latency is measured from each request's scheduled time, not from when it was sent, so a
//! request delayed by earlier slow ones (in the client or the node) counts its wait: no
//! coordinated omission.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use freshet_kafka::{admin, DocumentProducer};
use freshet_milvus::MilvusSink;
use freshet_pipeline::config::Config;
use freshet_pipeline::endpoint::Readiness;
use freshet_pipeline::metrics::Metrics;
use serde::Serialize;
use serde_json::{json, Value};

use crate::pipeline_bench::{self as pb, Doc, Pipeline};
use crate::query_bench::{self as qb, Percentiles};

mod report;
use report::{busy, cpu_times, phase_report, print_ingest, print_report, sample, wait_quiet};

/// `freshet-tools bench-load`.
#[derive(Clone, Debug, clap::Args)]
pub struct LoadBenchArgs {
    /// BEIR corpus.jsonl (ingested twice, into two fresh collections).
    #[arg(long, default_value = "../shared/datasets/scifact/corpus.jsonl")]
    pub corpus: PathBuf,
    /// BEIR queries.jsonl (the `text` of each line is a query, sent round robin).
    #[arg(long, default_value = "../shared/datasets/scifact/queries.jsonl")]
    pub queries: PathBuf,
    /// Use only the first N documents.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Requests per second, sent on a fixed timetable whatever the answers take.
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// Request fields besides the query, as JSON.
    #[arg(long, default_value = r#"{"mode":"hybrid"}"#)]
    pub body: String,
    /// Seconds of requests before the ingest (discarded).
    #[arg(long, default_value_t = 10.0)]
    pub warmup_secs: f64,
    /// Seconds of the idle phase.
    #[arg(long, default_value_t = 120.0)]
    pub idle_secs: f64,
    /// Longest wait after the ingest for the machine to become quiet (below 40% busy for 5 s,
    /// requests going on) before the idle phase.
    #[arg(long, default_value_t = 120.0)]
    pub settle_secs: f64,
    /// The query node binary (default: `freshet-query` next to this binary).
    #[arg(long)]
    pub query_bin: Option<PathBuf>,
    /// Where the spawned query node runs. `own`: in a session of its own (`setsid`), as the
    /// `deploy/` scripts start every service, so that the kernel's autogroup scheduling gives it
    /// a share of the CPU of its own. `shared`: in this tool's session, beside the pipeline, so
    /// that only the threads' nice values rank the two.
    #[arg(long, value_enum, default_value_t = NodeSession::Own)]
    pub node_session: NodeSession,
    #[arg(long, env = "FRESHET_EVAL_API_KEY")]
    pub api_key: Option<String>,
    /// Also write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The session the query node is started in (`--node-session`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum NodeSession {
    Own,
    Shared,
}

/// Requests of one phase.
#[derive(Debug, Serialize)]
pub struct PhaseReport {
    pub phase: &'static str,
    pub seconds: f64,
    /// Requests scheduled in the phase (each counted as answered or failed).
    pub requests: usize,
    pub errors: usize,
    /// Answers marked `degraded` (a route left out); counted in the latencies too.
    pub degraded: usize,
    /// Scheduled time → answer read, successful requests.
    pub latency_ms: Percentiles,
    /// The node's own `timings_ms.total`.
    pub server_total_ms: Percentiles,
    /// The node's own stage timings ([`qb::STAGES`] that the answers carried), to tell which stage
    /// a tail comes from.
    pub server_stages_ms: BTreeMap<&'static str, Percentiles>,
    /// Scheduled time → sent: more than a few milliseconds means the client itself was short of
    /// CPU (the latencies include it).
    pub send_lag_ms: Percentiles,
    /// Share of the machine's CPU time that was busy (all processes, `/proc/stat`).
    pub machine_busy: Option<f64>,
}

/// One timed ingest of the corpus.
#[derive(Debug, Serialize)]
pub struct IngestReport {
    pub with_queries: bool,
    pub documents: usize,
    pub chunks: u64,
    /// Start of publishing → the tantivy commit covers every record.
    pub seconds: f64,
    pub docs_per_s: f64,
    pub chunks_per_s: f64,
    pub machine_busy: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct LoadReport {
    pub corpus: String,
    pub rate: f64,
    pub body: Value,
    pub phases: Vec<PhaseReport>,
    pub p99_ratio_ingest_to_idle: f64,
    pub without_queries: IngestReport,
    pub with_queries: IngestReport,
    pub throughput_ratio_with_to_without: f64,
    /// Time waited for the machine to quiet down before the idle phase, and whether it did.
    pub settle_s: f64,
    pub settled_quiet: bool,
    pub node_session: NodeSession,
    pub machine: String,
}

const WARMUP: u8 = 0;
const INGEST: u8 = 1;
const SETTLE: u8 = 2;
const IDLE: u8 = 3;
const STOP: u8 = 4;
/// Machine busy share under which it counts as quiet after the ingest.
const QUIET_BUSY: f64 = 0.4;

/// The outcome of one scheduled request.
struct Sample {
    phase: u8,
    due: Instant,
    lag_ms: f64,
    latency_ms: Option<f64>,
    server_ms: Option<f64>,
    /// `timings_ms` of each of [`qb::STAGES`], where the answer had it.
    stages_ms: qb::StageMs,
    degraded: bool,
}

impl crate::Run for LoadBenchArgs {
    fn run(self, config: Option<&Path>) -> Result<i32> {
        run(&Config::load(config)?, config, &self)?;
        Ok(0)
    }
}

fn run(config: &Config, config_path: Option<&Path>, args: &LoadBenchArgs) -> Result<()> {
    if !(args.rate > 0.0 && args.idle_secs > 0.0) {
        bail!("--rate and --idle-secs must be positive");
    }
    let extra: Value = serde_json::from_str(&args.body).context("--body must be a JSON object")?;
    let bodies: Vec<Value> = qb::read_queries(&args.queries)?
        .into_iter()
        .map(|q| {
            let mut b = json!({ "query": q });
            if let Some(o) = extra.as_object() {
                for (k, v) in o {
                    b[k] = v.clone();
                }
            }
            b
        })
        .collect();
    let query_bin = match &args.query_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("freshet-query"),
    };
    if !query_bin.is_file() {
        bail!(
            "no query node binary at {} (build it: cargo build --release -p freshet-query, or \
             pass --query-bin)",
            query_bin.display()
        );
    }
    let docs = pb::load_corpus(&args.corpus, args.limit)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    // 1. The ingest without queries.
    let (cfg, dir) = pb::fresh_config(config)?;
    let mut quiet_run = Run::start(&cfg)?;
    let without_queries = quiet_run.ingest(&docs, false)?;
    quiet_run.stop()?;
    drop_collection(&rt, &cfg);
    let _ = std::fs::remove_dir_all(&dir);
    print_ingest(&without_queries);

    // 2. The ingest with queries, 3. the idle phase, on a second fresh set.
    let (cfg, dir) = pb::fresh_config(config)?;
    let mut run = Run::start(&cfg)?;
    let node = Node::spawn(&query_bin, &cfg, config_path, &dir, &rt, args.node_session)?;
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let client = qb::client(64)?;
    let generator = rt.spawn(generate(
        client,
        format!("{}/v1/retrieve", node.url),
        args.api_key.clone(),
        Arc::new(bodies),
        args.rate,
        phase.clone(),
    ));
    std::thread::sleep(Duration::from_secs_f64(args.warmup_secs.max(0.0)));
    phase.store(INGEST, Ordering::SeqCst);
    let (ingest_from, cpu0) = (Instant::now(), cpu_times());
    let with_queries = run.ingest(&docs, true);
    let (ingest_to, cpu1) = (Instant::now(), cpu_times());
    phase.store(SETTLE, Ordering::SeqCst);
    let with_queries = with_queries?;
    print_ingest(&with_queries);
    let settle_from = Instant::now();
    rt.block_on(async { MilvusSink::connect(cfg.milvus.clone()).await?.flush().await })
        .context("flushing the collection")?;
    let settled_quiet = wait_quiet(args.settle_secs);
    let settle_s = settle_from.elapsed().as_secs_f64();
    eprintln!("settled for {settle_s:.0} s (quiet: {settled_quiet}); idle phase");
    phase.store(IDLE, Ordering::SeqCst);
    let (idle_from, cpu2) = (Instant::now(), cpu_times());
    std::thread::sleep(Duration::from_secs_f64(args.idle_secs));
    let (idle_to, cpu3) = (Instant::now(), cpu_times());
    phase.store(STOP, Ordering::SeqCst);
    let samples = rt.block_on(generator)??;
    drop(node);
    run.stop()?;
    drop_collection(&rt, &cfg);
    let _ = std::fs::remove_dir_all(&dir);

    let mid = ingest_from + (ingest_to - ingest_from) / 2;
    let phases = vec![
        phase_report(
            "ingest",
            &samples,
            |s| s.phase == INGEST,
            ingest_to - ingest_from,
            busy(cpu0, cpu1),
        ),
        phase_report(
            "ingest, second half",
            &samples,
            |s| s.phase == INGEST && s.due >= mid,
            ingest_to - mid,
            None,
        ),
        phase_report(
            "idle",
            &samples,
            |s| s.phase == IDLE,
            idle_to - idle_from,
            busy(cpu2, cpu3),
        ),
    ];
    let throughput_ratio_with_to_without = with_queries.chunks_per_s / without_queries.chunks_per_s;
    let report = LoadReport {
        corpus: args.corpus.display().to_string(),
        rate: args.rate,
        body: extra,
        p99_ratio_ingest_to_idle: phases[0].latency_ms.p99 / phases[2].latency_ms.p99,
        phases,
        without_queries,
        with_queries,
        throughput_ratio_with_to_without,
        settle_s,
        settled_quiet,
        node_session: args.node_session,
        machine: format!(
            "{} cores",
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0)
        ),
    };
    print_report(&report);
    if let Some(out) = &args.json {
        std::fs::write(out, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

/// A pipeline running in this process on its own fresh configuration.
struct Run {
    cfg: Config,
    stop: Arc<AtomicBool>,
    metrics: Metrics,
    handle: Option<Pipeline>,
    producer: DocumentProducer,
}

impl Run {
    /// Creates the topic, starts the pipeline and waits until it is ready (its model loaded,
    /// the collection created, every worker reading).
    fn start(cfg: &Config) -> Result<Run> {
        admin::ensure_topic(&cfg.kafka, &cfg.kafka.topic, cfg.pipeline.topic_partitions)?;
        let (stop, metrics, ready) = (
            Arc::new(AtomicBool::new(false)),
            Metrics::new(),
            Readiness::new(),
        );
        let handle = pb::spawn_pipeline(cfg, &stop, &metrics, ready.clone());
        let deadline = Instant::now() + Duration::from_secs(600);
        while let Err(why) = ready.check() {
            if handle.is_finished() || Instant::now() > deadline {
                let _ = pb::stop_pipeline(&stop, Some(handle));
                bail!("the pipeline did not become ready: {why}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(Run {
            cfg: cfg.clone(),
            stop,
            metrics,
            handle: Some(handle),
            producer: DocumentProducer::new(&cfg.kafka)?,
        })
    }

    /// Publishes the corpus and waits until both indexes hold it.
    fn ingest(&mut self, docs: &[Doc], with_queries: bool) -> Result<IngestReport> {
        let (t, cpu0, chunks0) = (
            Instant::now(),
            cpu_times(),
            pb::chunks_upserted(&self.metrics),
        );
        self.producer
            .send_many(&self.cfg.kafka.topic, docs.iter().map(pb::envelope))?;
        pb::wait_caught_up(
            &self.cfg,
            &mut self.handle,
            &self.metrics,
            Duration::from_secs(3600),
        )?;
        let seconds = t.elapsed().as_secs_f64();
        let chunks = pb::chunks_upserted(&self.metrics) - chunks0;
        Ok(IngestReport {
            with_queries,
            documents: docs.len(),
            chunks,
            seconds,
            docs_per_s: docs.len() as f64 / seconds,
            chunks_per_s: chunks as f64 / seconds,
            machine_busy: busy(cpu0, cpu_times()),
        })
    }

    fn stop(mut self) -> Result<()> {
        pb::stop_pipeline(&self.stop, self.handle.take())
    }
}

/// A spawned query node; killed when dropped.
struct Node {
    child: Child,
    url: String,
}

impl Node {
    /// Starts `bin` on `cfg`'s index and collection (query-vector cache off unless
    /// `FRESHET_QUERY_QUERY_CACHE_ENTRIES` says otherwise: the queries repeat round robin) on a
    /// free local port, in `session`, and waits until `/readyz` answers 200.
    fn spawn(
        bin: &Path,
        cfg: &Config,
        config_path: Option<&Path>,
        dir: &Path,
        rt: &tokio::runtime::Runtime,
        session: NodeSession,
    ) -> Result<Node> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log_path = dir.join("query.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let mut cmd = Command::new(bin);
        cmd.env("FRESHET_TANTIVY_PATH", &cfg.tantivy.path)
            .env("FRESHET_MILVUS_URL", &cfg.milvus.url)
            .env("FRESHET_MILVUS_COLLECTION", &cfg.milvus.collection)
            .env("FRESHET_QUERY_LISTEN", format!("127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if std::env::var_os("FRESHET_QUERY_QUERY_CACHE_ENTRIES").is_none() {
            cmd.env("FRESHET_QUERY_QUERY_CACHE_ENTRIES", "0");
        }
        if let Some(p) = config_path {
            cmd.env("FRESHET_CONFIG", p);
        }
        #[cfg(unix)]
        if session == NodeSession::Own {
            use std::os::unix::process::CommandExt;
            // SAFETY: setsid(2) is async-signal-safe and touches no memory of the parent. The
            // child is not a process group leader (it is in this tool's group), so it succeeds.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::setsid() < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut node = Node {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let probe = qb::client(1)?;
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let ready = rt.block_on(async {
                let r = probe.get(format!("{}/readyz", node.url)).send().await;
                r.is_ok_and(|r| r.status().is_success())
            });
            if ready {
                return Ok(node);
            }
            if node.child.try_wait()?.is_some() || Instant::now() > deadline {
                bail!(
                    "the query node did not become ready (log: {})",
                    log_path.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends one request every `1/rate` seconds, on a timetable fixed at the start, until the phase
/// is `STOP`; each request is tagged with the phase it was scheduled in.
async fn generate(
    client: reqwest::Client,
    url: String,
    key: Option<String>,
    bodies: Arc<Vec<Value>>,
    rate: f64,
    phase: Arc<AtomicU8>,
) -> Result<Vec<Sample>> {
    let start = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let (mut samples, mut errors) = (Vec::new(), 0usize);
    for i in 0u64.. {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due).await;
        let p = phase.load(Ordering::SeqCst);
        if p == STOP {
            break;
        }
        let lag_ms = due.elapsed().as_secs_f64() * 1000.0;
        let (client, url, key) = (client.clone(), url.clone(), key.clone());
        let body = bodies[i as usize % bodies.len()].clone();
        tasks.spawn(async move {
            let answer = qb::post(&client, &url, key.as_deref(), &body).await;
            let ms = due.elapsed().as_secs_f64() * 1000.0;
            (p, due.into_std(), lag_ms, answer.map(|v| (ms, v)))
        });
        while let Some(done) = tasks.try_join_next() {
            samples.push(sample(done?, &mut errors));
        }
    }
    while let Some(done) = tasks.join_next().await {
        samples.push(sample(done?, &mut errors));
    }
    Ok(samples)
}

/// Drops a benchmark collection (best effort: a leftover only takes space).
fn drop_collection(rt: &tokio::runtime::Runtime, cfg: &Config) {
    let dropped = rt.block_on(async {
        MilvusSink::connect(cfg.milvus.clone())
            .await?
            .drop_collection()
            .await
    });
    if let Err(e) = dropped {
        eprintln!(
            "could not drop the collection {}: {e}",
            cfg.milvus.collection
        );
    }
}
