//! `freshet-tools bench-freshness`: produce-to-visible time through the real pipeline and query
//! node(s), from the outside.
//!
//! `documents` benchmark documents are updated through Kafka (or saved as files under a running
//! `freshet watch`) at a steady `rate`. With `--visibility wait` (the default for Kafka) each
//! update is followed on its own: the node's `/v1/index/wait` for its offset, then searches for
//! it alone ([`crate::freshness_wait`]). With `--visibility poll` (saved files always) one poller
//! per route asks the node every `poll_ms` which version (`bench_seq` metadata) of each document
//! it returns, and an update counts as visible in a route from the first poll that shows it or a
//! newer version of its document (resolution: `poll_ms` plus one request). Reported: produce →
//! visible in BM25, in vectors, and in both, p50/p99, and the mean of each stage on the way
//! ([`crate::freshness_budget`]).
//!
//! With `--replica URL` (repeatable), each replica's BM25 route is followed the same way: produce
//! → visible on the replica, the replica's delay behind the pipeline's node per update, and the
//! replica's own `replica_lag_seconds` over the run (the pipeline's commit durable → committed
//! on the replica; docs/replicas.md), with its parts `replica_read_lag_seconds` (→ the marker
//! read) and `replica_commit_seconds`, and the replica's `replica_stage_seconds` (the segments
//! it built before their markers).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use freshet_kafka::DocumentProducer;
use serde::Serialize;
use serde_json::{json, Value};

use crate::config::Config as StackConfig;
use crate::freshness_budget::{histogram, scrape, Budget, HistogramDelta, Scrape};
use crate::freshness_wait::Follower;
use crate::query_bench::{client, post, runtime, Percentiles};

/// `freshet-tools bench-freshness`.
#[derive(clap::Args)]
pub struct FreshnessArgs {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, env = "FRESHET_EVAL_API_KEY")]
    api_key: Option<String>,
    /// Updates per second.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    #[arg(long, default_value_t = 60.0)]
    seconds: f64,
    /// Distinct documents the updates cycle through.
    #[arg(long, default_value_t = 100)]
    documents: usize,
    /// How an update's visibility is taken: `wait` follows each update (the node's
    /// `/v1/index/wait` for its offset, then searches for it alone every `--check-ms`); `poll`
    /// searches every route for all documents every `--poll-ms`. Saved files are always polled
    /// (their offsets are the watcher's).
    #[arg(long, value_enum, default_value_t = Visibility::Wait)]
    visibility: Visibility,
    /// Poll interval per route (`--visibility poll`).
    #[arg(long, default_value_t = 20)]
    poll_ms: u64,
    /// Interval between searches for an update a route does not show yet (`--visibility wait`).
    #[arg(long, default_value_t = 2)]
    check_ms: u64,
    /// Save the updates as files in this directory, followed by a running `freshet watch`
    /// (file saved → visible), instead of producing them to the topic.
    #[arg(long)]
    watched_dir: Option<PathBuf>,
    /// The pipeline's metrics, read before and after the run for the stage means (`budget`).
    #[arg(long, default_value = "http://127.0.0.1:9464/metrics")]
    pipeline_metrics: String,
    /// The node's metrics (default: `/metrics` of `--url`).
    #[arg(long)]
    node_metrics: Option<String>,
    /// A query replica following the pipeline's changelog (repeatable): its BM25 route is
    /// polled too, and its `/metrics` read before and after the run.
    #[arg(long = "replica")]
    replicas: Vec<String>,
}

/// How `bench-freshness` takes an update's visibility.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    Wait,
    Poll,
}

impl crate::Run for FreshnessArgs {
    /// Prints the report as JSON.
    fn run(self, config: Option<&Path>) -> Result<i32> {
        let report = runtime()?.block_on(freshness(&self, config))?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(0)
    }
}

#[derive(Debug, Serialize)]
pub struct FreshnessReport {
    pub rate: f64,
    pub updates: usize,
    pub not_visible_within_30s: usize,
    pub visibility: Visibility,
    /// The poll interval (`poll`) or the interval between searches for one update (`wait`).
    pub poll_ms: u64,
    /// `wait`: waits (on the node or a replica) that answered before a BM25 search showed the
    /// update; its moment is then that of the first search that did.
    pub wait_before_visible: usize,
    /// Produce → visible in the BM25 route.
    pub bm25_ms: Percentiles,
    /// Produce → visible in the vector route (checked once BM25 shows it).
    pub vector_ms: Percentiles,
    /// Produce → visible in both routes.
    pub both_ms: Percentiles,
    /// The mean of each stage over the run ([`crate::freshness_budget`]).
    pub budget: Budget,
    /// One entry per `--replica`.
    pub replicas: Vec<ReplicaFreshness>,
}

/// What one replica showed during the run.
#[derive(Debug, Serialize)]
pub struct ReplicaFreshness {
    pub url: String,
    /// Produce → visible in the replica's BM25 route.
    pub bm25_ms: Percentiles,
    /// Visible on the replica less visible in the node's BM25 route, per update seen on both
    /// (each side has the poll's resolution, so a value may be negative).
    pub behind_node_ms: Percentiles,
    /// The replica's `replica_lag_seconds` over the run: the pipeline's commit durable → the
    /// same batch committed on the replica (`None`: its metrics did not answer or saw no
    /// commit).
    pub changelog_lag_ms: Option<HistogramDelta>,
    /// The part of it before the replica's own work (`replica_read_lag_seconds`: → the marker
    /// read by the replica).
    pub read_lag_ms: Option<HistogramDelta>,
    /// The replica's commits (`replica_commit_seconds`).
    pub commit_ms: Option<HistogramDelta>,
    /// The segments the replica built before their markers (`replica_stage_seconds`).
    pub stage_ms: Option<HistogramDelta>,
}

/// The query of every search of the benchmark: close to every update's text.
pub(crate) const PROBE_QUERY: &str =
    "freshness probe river gauges seasonal freshet snowmelt update";

/// The text of update `seq` of run `run`: unique across runs, so that every update is embedded
/// (a text seen in an earlier run would come from the pipeline's embedding cache).
fn update_text(run: u32, seq: usize) -> String {
    format!(
        "Freshness probe zq{seq}x run {run}: river gauges reported a seasonal freshet after \
         snowmelt, update number {seq}."
    )
}

/// Which update of each benchmark document a route shows: doc id → newest visible `bench_seq`
/// (for saved files, the `zq<seq>x` of their text: a file's metadata is only its path).
async fn visible_seqs(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    mode: &str,
    t: &Tracker,
) -> Result<std::collections::HashMap<String, u64>> {
    let filter = match &t.files {
        Some(files) => json!({"path": {"in": files}}),
        None => json!({"bench_run": t.run_id}),
    };
    let body = json!({"query": PROBE_QUERY,
        "mode": mode, "k": t.documents.min(100), "bm25_top_k": 1000,
        // Wide candidate windows: the filter passes ~1% of the collection.
        "vector_top_k": 1000, "filter": filter});
    let v = post(client, url, key, &body).await?;
    let seq_of = |h: &Value| match h["metadata"]["bench_seq"].as_u64() {
        Some(s) => Some(s),
        None => {
            let text = h["text"].as_str()?;
            let start = text.find("zq")? + 2;
            let len = text[start..].find('x')?;
            text[start..start + len].parse().ok()
        }
    };
    Ok(v["results"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|h| Some((h["doc_id"].as_str()?.to_owned(), seq_of(h)?)))
                .collect()
        })
        .unwrap_or_default())
}

/// What a freshness run has produced and seen, shared by the producer and the route pollers.
pub(crate) struct Tracker {
    /// seq → produce instant.
    pub produced: Mutex<Vec<Option<Instant>>>,
    /// Per route (the node's BM25 and vector routes, then each replica's BM25 route), seq →
    /// first instant it (or a newer version) was seen.
    pub seen: Mutex<Vec<Vec<Option<Instant>>>>,
    /// The producer has sent every update.
    pub done: AtomicBool,
    pub run_id: u32,
    pub documents: usize,
    /// The ids (= paths) of the saved files, when updates are files.
    pub files: Option<Vec<String>>,
}

impl Tracker {
    /// `total` updates over `documents` documents, seen by the node's two routes and `replicas`.
    pub fn new(
        documents: usize,
        total: usize,
        replicas: usize,
        run_id: u32,
        files: Option<Vec<String>>,
    ) -> Tracker {
        Tracker {
            produced: Mutex::new(vec![None; total]),
            seen: Mutex::new(vec![vec![None; total]; 2 + replicas]),
            done: AtomicBool::new(false),
            run_id,
            documents,
            files,
        }
    }

    /// The number of updates of the run.
    pub fn total(&self) -> usize {
        self.produced.lock().map(|p| p.len()).unwrap_or(0)
    }
}

/// Runs the freshness benchmark against the pipeline configured in `config`.
async fn freshness(args: &FreshnessArgs, config: Option<&Path>) -> Result<FreshnessReport> {
    if !(args.rate > 0.0 && args.seconds > 0.0) {
        bail!("--rate and --seconds must be positive");
    }
    if args.documents == 0 || args.documents > 100 {
        bail!("--documents must be between 1 and 100 (one poll must see all of them)");
    }
    let config = StackConfig::load(config)?;
    let producer = Arc::new(DocumentProducer::new(&config.kafka)?);
    let client = client(4)?;
    let total = (args.rate * args.seconds).round() as usize;
    // Unique per run (milliseconds since the epoch, modulo 2^32): the filter and the texts use it.
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u32)
        .unwrap_or_else(|_| std::process::id());
    let files = args
        .watched_dir
        .as_ref()
        .map(|_| (0..args.documents).map(|d| file_id(run_id, d)).collect());
    let tracker = Arc::new(Tracker::new(
        args.documents,
        total,
        args.replicas.len(),
        run_id,
        files,
    ));
    let follower = (visibility(args) == Visibility::Wait).then(|| {
        Arc::new(Follower {
            client: client.clone(),
            key: args.api_key.clone(),
            node: args.url.clone(),
            replicas: args.replicas.clone(),
            topic: config.kafka.topic.clone(),
            check: Duration::from_millis(args.check_ms.max(1)),
            tracker: tracker.clone(),
            wait_before_visible: AtomicUsize::new(0),
        })
    });
    // Polling: one poller per route, every poll_ms, which version of each document is visible.
    let mut pollers = tokio::task::JoinSet::new();
    let routes = [(args.url.as_str(), "bm25"), (args.url.as_str(), "vector")]
        .into_iter()
        .chain(args.replicas.iter().map(|r| (r.as_str(), "bm25")))
        .filter(|_| follower.is_none());
    for (route, (base, mode)) in routes.enumerate() {
        let (client, tracker) = (client.clone(), tracker.clone());
        let url = format!("{}/v1/retrieve", base.trim_end_matches('/'));
        let (key, poll) = (
            args.api_key.clone(),
            Duration::from_millis(args.poll_ms.max(1)),
        );
        pollers
            .spawn(async move { poll_route(client, url, key, route, mode, poll, tracker).await });
    }
    let node_metrics = args
        .node_metrics
        .clone()
        .unwrap_or_else(|| format!("{}/metrics", args.url.trim_end_matches('/')));
    let scrapes = |client: reqwest::Client| {
        let (p, n) = (args.pipeline_metrics.clone(), node_metrics.clone());
        async move {
            let stages = "no stage means from";
            (
                scrape_or_none(&client, &p, stages).await,
                scrape_or_none(&client, &n, stages).await,
            )
        }
    };
    let replica_metrics = |client: reqwest::Client| async move {
        let mut out = Vec::new();
        for r in &args.replicas {
            let url = format!("{}/metrics", r.trim_end_matches('/'));
            out.push(scrape_or_none(&client, &url, "no replica lag from").await);
        }
        out
    };
    let (p0, n0) = scrapes(client.clone()).await;
    let r0 = replica_metrics(client.clone()).await;
    let mut followed = tokio::task::JoinSet::new();
    produce_updates(
        args,
        total,
        &producer,
        &config.kafka.topic,
        &tracker,
        |seq, partition, offset| {
            if let Some(f) = &follower {
                followed.spawn(f.clone().follow(seq, partition, offset));
            }
        },
    )
    .await?;
    tracker.done.store(true, Ordering::SeqCst);
    while let Some(r) = pollers.join_next().await {
        r?;
    }
    while let Some(r) = followed.join_next().await {
        r?;
    }
    let (p1, n1) = scrapes(client.clone()).await;
    let r1 = replica_metrics(client.clone()).await;
    let mut report = report(args, total, &tracker)?;
    if let Some(f) = &follower {
        report.wait_before_visible = f.wait_before_visible.load(Ordering::Relaxed);
    }
    report.budget = Budget::of(&p0, &p1, &n0, &n1);
    for (replica, (before, after)) in report.replicas.iter_mut().zip(r0.iter().zip(&r1)) {
        let delta = |name: &str| histogram(before, after, name).filter(|h| h.count > 0.0);
        replica.changelog_lag_ms = delta("freshet_query_replica_lag_seconds");
        replica.read_lag_ms = delta("freshet_query_replica_read_lag_seconds");
        replica.commit_ms = delta("freshet_query_replica_commit_seconds");
        replica.stage_ms = delta("freshet_query_replica_stage_seconds");
    }
    Ok(report)
}

/// A scrape of `url`, or none (said on stderr, after `what`) when it does not answer: the
/// run's latencies stand without it.
async fn scrape_or_none(client: &reqwest::Client, url: &str, what: &str) -> Scrape {
    scrape(client, url).await.unwrap_or_else(|e| {
        eprintln!("{what} {url}: {e:#}");
        Scrape::new()
    })
}

/// The mode a run takes visibility in: saved files are always polled.
fn visibility(args: &FreshnessArgs) -> Visibility {
    match args.watched_dir {
        Some(_) => Visibility::Poll,
        None => args.visibility,
    }
}

/// Sends `total` updates at `args.rate` per second, cycling through the documents, and notes
/// when each was produced; `produced(seq, partition, offset)` after each record's
/// acknowledgement.
async fn produce_updates(
    args: &FreshnessArgs,
    total: usize,
    producer: &Arc<DocumentProducer>,
    topic: &str,
    tracker: &Tracker,
    mut produced: impl FnMut(usize, i32, i64),
) -> Result<()> {
    if args.watched_dir.is_none() {
        warm_up(producer, topic).await?;
    }
    let started = Instant::now();
    for seq in 0..total {
        let due = started + Duration::from_secs_f64(seq as f64 / args.rate);
        tokio::time::sleep_until(due.into()).await;
        let run_id = tracker.run_id;
        let id = format!("freshness-{run_id}-{}", seq % tracker.documents);
        let value = json!({"op": "upsert", "id": id, "title": "Freshness probe",
            "text": update_text(run_id, seq), "content_type": "text/plain", "source": "bench://freshness",
            "metadata": {"bench_seq": seq, "bench_run": run_id}});
        let bytes = serde_json::to_vec(&value)?;
        let t0 = Instant::now();
        if let Ok(mut p) = tracker.produced.lock() {
            p[seq] = Some(t0);
        }
        if let Some(dir) = &args.watched_dir {
            // The saved file is the update: `freshet watch` publishes it.
            let path = dir.join(file_id(run_id, seq % tracker.documents));
            let text = update_text(run_id, seq);
            tokio::task::spawn_blocking(move || std::fs::write(path, text))
                .await?
                .context("saving an update")?;
            continue;
        }
        let (partition, offset) = send(producer, topic, id, bytes).await?;
        produced(seq, partition, offset);
    }
    Ok(())
}

/// Produces one record keyed by its document id, off the async threads, and waits for its
/// acknowledgement: its partition and offset.
async fn send(
    producer: &Arc<DocumentProducer>,
    topic: &str,
    id: String,
    bytes: Vec<u8>,
) -> Result<(i32, i64)> {
    let (producer, topic, key) = (producer.clone(), topic.to_owned(), id.clone());
    tokio::task::spawn_blocking(move || producer.send(&topic, key.as_bytes(), Some(&bytes)))
        .await?
        .map_err(|e| anyhow!("producing {id}: {e}"))
}

/// Sends one record before the timed updates, so that none of them waits for the producer's
/// first connection and metadata (0.6-1.2 s with the default broker, which was the maximum of
/// the runs before). Always the same record, outside every run's filter: the
/// pipeline finds its content unchanged after the first run and embeds nothing.
async fn warm_up(producer: &Arc<DocumentProducer>, topic: &str) -> Result<()> {
    let value = json!({"op": "upsert", "id": "freshness-warm-up", "title": "Freshness warm-up",
        "text": "Warms the benchmark's producer up.", "content_type": "text/plain",
        "source": "bench://freshness"});
    send(
        producer,
        topic,
        "freshness-warm-up".to_owned(),
        serde_json::to_vec(&value)?,
    )
    .await
    .map(drop)
}

/// The id (and path below the watched directory) of benchmark document `doc` of run `run`.
fn file_id(run: u32, doc: usize) -> String {
    format!("freshness-{run}-{doc}.txt")
}

/// Polls one route until every update is seen there (or the last one is 30 s old), noting when
/// each update (or a newer version of its document) first became visible.
async fn poll_route(
    client: reqwest::Client,
    url: String,
    key: Option<String>,
    route: usize,
    mode: &'static str,
    poll: Duration,
    t: Arc<Tracker>,
) {
    let documents = t.documents;
    let mut newest: HashMap<String, u64> = HashMap::new();
    loop {
        let finished = t.done.load(Ordering::SeqCst);
        let now = Instant::now();
        if let Ok(v) = visible_seqs(&client, &url, key.as_deref(), mode, &t).await {
            let produced = t.produced.lock().map(|p| p.clone()).unwrap_or_default();
            let mut seen = t.seen.lock().expect("seen lock");
            for (doc, seq) in v {
                let prev = newest.get(&doc).copied();
                if prev.is_some_and(|p| p >= seq) {
                    continue;
                }
                newest.insert(doc.clone(), seq);
                // Every update of this document up to `seq` is now visible (a newer version
                // supersedes older ones).
                let from = prev.map(|p| p as usize + 1).unwrap_or(0);
                for s in (from..=seq as usize).filter(|s| s % documents == seq as usize % documents)
                {
                    if s < seen[route].len() && seen[route][s].is_none() && produced[s].is_some() {
                        seen[route][s] = Some(now);
                    }
                }
            }
        }
        if finished {
            let all_seen = t
                .seen
                .lock()
                .map(|s| s[route].iter().all(Option::is_some))
                .unwrap_or(false);
            // The last updates get 30 s to show up.
            let last = t
                .produced
                .lock()
                .ok()
                .and_then(|p| p.iter().flatten().max().copied());
            if all_seen || last.is_some_and(|t| t.elapsed() > Duration::from_secs(30)) {
                break;
            }
        }
        tokio::time::sleep(poll).await;
    }
}

/// Produce-to-visible times per route and for both, in milliseconds.
fn report(args: &FreshnessArgs, total: usize, t: &Tracker) -> Result<FreshnessReport> {
    let produced = t.produced.lock().map_err(|_| anyhow!("lock"))?.clone();
    let seen = t.seen.lock().map_err(|_| anyhow!("lock"))?.clone();
    let ms = |t: Instant, p: Instant| t.saturating_duration_since(p).as_secs_f64() * 1000.0;
    let (mut bm25, mut vector, mut both, mut missing) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for s in 0..total {
        match (produced[s], seen[0][s], seen[1][s]) {
            (Some(p), Some(b), Some(v)) => {
                bm25.push(ms(b, p));
                vector.push(ms(v, p));
                both.push(ms(b.max(v), p));
            }
            _ => missing += 1,
        }
    }
    Ok(FreshnessReport {
        rate: args.rate,
        updates: total,
        not_visible_within_30s: missing,
        visibility: visibility(args),
        poll_ms: match visibility(args) {
            Visibility::Poll => args.poll_ms,
            Visibility::Wait => args.check_ms,
        },
        wait_before_visible: 0,
        bm25_ms: Percentiles::of(bm25),
        vector_ms: Percentiles::of(vector),
        both_ms: Percentiles::of(both),
        budget: Budget::default(),
        replicas: args
            .replicas
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let (bm25_ms, behind_node_ms) = replica_times(&produced, &seen, 2 + i);
                ReplicaFreshness {
                    url: url.clone(),
                    bm25_ms,
                    behind_node_ms,
                    changelog_lag_ms: None,
                    read_lag_ms: None,
                    commit_ms: None,
                    stage_ms: None,
                }
            })
            .collect(),
    })
}

/// Produce → visible on the replica polled as `route`, and its delay behind the node's BM25
/// route (route 0), per update.
fn replica_times(
    produced: &[Option<Instant>],
    seen: &[Vec<Option<Instant>>],
    route: usize,
) -> (Percentiles, Percentiles) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (mut visible, mut behind) = (Vec::new(), Vec::new());
    for (s, p) in produced.iter().enumerate() {
        let (Some(p), Some(r)) = (p, seen[route][s]) else {
            continue;
        };
        visible.push(ms(r.saturating_duration_since(*p)));
        if let Some(n) = seen[0][s] {
            behind.push(ms(r.saturating_duration_since(n)) - ms(n.saturating_duration_since(r)));
        }
    }
    (Percentiles::of(visible), Percentiles::of(behind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_delay_is_taken_per_update_seen_on_both() {
        let t0 = Instant::now();
        let at = |ms: u64| Some(t0 + Duration::from_millis(ms));
        let produced = vec![at(0), at(10), at(20)];
        // Node BM25, node vector, one replica's BM25.
        let seen = vec![
            vec![at(50), at(60), None],
            vec![at(55), at(65), at(70)],
            vec![at(80), None, at(90)],
        ];
        let (bm25, behind) = replica_times(&produced, &seen, 2);
        assert_eq!(bm25.count, 2);
        assert_eq!((bm25.mean, bm25.max), (75.0, 80.0));
        // Only update 0 was seen by both the node's BM25 route and the replica.
        assert_eq!((behind.count, behind.p50), (1, 30.0));
    }
}
