//! `freshet-tools bench-latency` and `freshet-tools bench-freshness`: the query node measured
//! from the outside with a real HTTP client (keep-alive connection pool, concurrent requests).
//!
//! - latency: `concurrency` clients send `requests` retrievals (queries from a BEIR
//!   `queries.jsonl`, round robin, extra request fields from `--body`) and report p50/p90/p99.
//! - freshness: `documents` benchmark documents are updated through Kafka at a steady `rate`;
//!   one poller per route asks the node every `poll_ms` which version (`bench_seq` metadata) of
//!   each document it returns, and an update counts as visible in a route from the first poll
//!   that shows it or a newer version of its document. Reported: produce → visible in BM25, in
//!   vectors, and in both, p50/p99 (resolution: `poll_ms` plus one request), and the mean of
//!   each stage on the way ([`crate::freshness_budget`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::Config as StackConfig;
use crate::freshness_budget::{scrape, Budget, Scrape};
use anyhow::{anyhow, bail, Context, Result};
use freshet_kafka::DocumentProducer;
use serde::Serialize;
use serde_json::{json, Value};

/// Percentiles of a sample (milliseconds).
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Percentiles {
    pub fn of(mut v: Vec<f64>) -> Percentiles {
        if v.is_empty() {
            return Percentiles::default();
        }
        v.sort_by(f64::total_cmp);
        let at = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
        Percentiles {
            count: v.len(),
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: v[v.len() - 1],
            mean: v.iter().sum::<f64>() / v.len() as f64,
        }
    }
}

pub(crate) fn client(concurrency: usize) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency.max(1) * 2)
        .timeout(Duration::from_secs(30))
        .build()?)
}

pub(crate) async fn post(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    body: &Value,
) -> Result<Value> {
    let mut req = client.post(url).json(body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let text = resp.text().await?;
    if !status.is_success() {
        bail!("{status}: {text}");
    }
    Ok(serde_json::from_str(&text)?)
}

/// `freshet-tools bench-latency`.
#[derive(clap::Args)]
pub struct LatencyArgs {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, env = "FRESHET_EVAL_API_KEY")]
    api_key: Option<String>,
    /// BEIR queries.jsonl (the `text` of each line is a query).
    #[arg(long, default_value = "../shared/datasets/scifact/queries.jsonl")]
    queries: PathBuf,
    /// Extra request fields as JSON, e.g. '{"mode":"hybrid","rerank":{"candidates":20}}'.
    #[arg(long, default_value = "{}")]
    body: String,
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    #[arg(long, default_value_t = 50)]
    warmup: usize,
}

impl crate::Run for LatencyArgs {
    /// Prints the report as JSON.
    fn run(self, _config: Option<&Path>) -> Result<i32> {
        let body: Value =
            serde_json::from_str(&self.body).context("--body must be a JSON object")?;
        let report = runtime()?.block_on(latency(&self, body))?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(0)
    }
}

#[derive(Debug, Serialize)]
pub struct LatencyReport {
    pub body: Value,
    pub concurrency: usize,
    pub requests: usize,
    pub errors: usize,
    pub seconds: f64,
    pub requests_per_second: f64,
    pub latency_ms: Percentiles,
    /// The node's own `timings_ms.total` (server side, without HTTP and JSON).
    pub server_total_ms: Percentiles,
    /// Query vectors the node took from its query cache during the run (from its `/metrics`;
    /// `None` if unreadable). Queries repeat round robin, so for the cost of embedding every
    /// query run the node with `query_cache_entries = 0`.
    pub node_query_cache_hits: Option<f64>,
}

/// The node's `query_embeddings_total{outcome="cache_hit"}` counter.
async fn query_cache_hits(client: &reqwest::Client, base: &str) -> Option<f64> {
    let text = client
        .get(format!("{}/metrics", base.trim_end_matches('/')))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let line = text
        .lines()
        .find(|l| l.starts_with("freshet_query_query_embeddings_total{outcome=\"cache_hit\"}"));
    // No line yet: no hit so far.
    Some(match line {
        Some(l) => l.rsplit(' ').next()?.parse().ok()?,
        None => 0.0,
    })
}

pub(crate) fn read_queries(path: &PathBuf) -> Result<Vec<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let out: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["text"].as_str().map(str::to_owned))
        .collect();
    if out.is_empty() {
        bail!(
            "{} holds no queries (JSONL with a text field)",
            path.display()
        );
    }
    Ok(out)
}

/// Runs the latency benchmark with `body`, the request fields besides the query.
async fn latency(args: &LatencyArgs, body: Value) -> Result<LatencyReport> {
    let queries = Arc::new(read_queries(&args.queries)?);
    let client = client(args.concurrency)?;
    let url = format!("{}/v1/retrieve", args.url.trim_end_matches('/'));
    let body_for = |i: usize| {
        let mut b = json!({"query": queries[i % queries.len()]});
        if let Some(o) = body.as_object() {
            for (k, v) in o {
                b[k] = v.clone();
            }
        }
        b
    };
    for i in 0..args.warmup {
        post(&client, &url, args.api_key.as_deref(), &body_for(i)).await?;
    }
    let hits_before = query_cache_hits(&client, &args.url).await;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..args.concurrency.max(1) {
        let (client, url, next) = (client.clone(), url.clone(), next.clone());
        let key = args.api_key.clone();
        let bodies: Vec<Value> = (0..queries.len()).map(body_for).collect();
        let total = args.requests;
        tasks.spawn(async move {
            let mut lat = Vec::new();
            let mut server = Vec::new();
            let mut errors = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let t = Instant::now();
                match post(&client, &url, key.as_deref(), &bodies[i % bodies.len()]).await {
                    Ok(v) => {
                        lat.push(t.elapsed().as_secs_f64() * 1000.0);
                        if let Some(s) = v["timings_ms"]["total"].as_f64() {
                            server.push(s);
                        }
                    }
                    Err(e) => {
                        errors += 1;
                        if errors <= 3 {
                            eprintln!("request failed: {e:#}");
                        }
                    }
                }
            }
            (lat, server, errors)
        });
    }
    let (mut lat, mut server, mut errors) = (Vec::new(), Vec::new(), 0);
    while let Some(r) = tasks.join_next().await {
        let (l, s, e) = r?;
        lat.extend(l);
        server.extend(s);
        errors += e;
    }
    let seconds = started.elapsed().as_secs_f64();
    let hits_after = query_cache_hits(&client, &args.url).await;
    Ok(LatencyReport {
        body,
        concurrency: args.concurrency,
        requests: lat.len(),
        errors,
        seconds,
        requests_per_second: lat.len() as f64 / seconds,
        latency_ms: Percentiles::of(lat),
        server_total_ms: Percentiles::of(server),
        node_query_cache_hits: hits_before.zip(hits_after).map(|(b, a)| a - b),
    })
}

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
    /// Poll interval per route while waiting for an update.
    #[arg(long, default_value_t = 20)]
    poll_ms: u64,
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
    pub poll_ms: u64,
    /// Produce → visible in the BM25 route.
    pub bm25_ms: Percentiles,
    /// Produce → visible in the vector route (checked once BM25 shows it).
    pub vector_ms: Percentiles,
    /// Produce → visible in both routes.
    pub both_ms: Percentiles,
    /// The mean of each stage over the run ([`crate::freshness_budget`]).
    pub budget: Budget,
}

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
    let body = json!({"query": "freshness probe river gauges seasonal freshet snowmelt update",
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
struct Tracker {
    /// seq → produce instant.
    produced: Mutex<Vec<Option<Instant>>>,
    /// Per route, seq → first instant it (or a newer version) was seen.
    seen: Mutex<[Vec<Option<Instant>>; 2]>,
    /// The producer has sent every update.
    done: AtomicBool,
    run_id: u32,
    documents: usize,
    /// The ids (= paths) of the saved files, when updates are files.
    files: Option<Vec<String>>,
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
    let tracker = Arc::new(Tracker {
        produced: Mutex::new(vec![None; total]),
        seen: Mutex::new([vec![None; total], vec![None; total]]),
        done: AtomicBool::new(false),
        run_id,
        documents: args.documents,
        files: args
            .watched_dir
            .as_ref()
            .map(|_| (0..args.documents).map(|d| file_id(run_id, d)).collect()),
    });
    // One poller per route: every poll_ms, which version of each document is visible.
    let mut pollers = tokio::task::JoinSet::new();
    for (route, mode) in ["bm25", "vector"].into_iter().enumerate() {
        let (client, tracker) = (client.clone(), tracker.clone());
        let url = format!("{}/v1/retrieve", args.url.trim_end_matches('/'));
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
            let read = |url: String| {
                let client = client.clone();
                async move {
                    scrape(&client, &url).await.unwrap_or_else(|e| {
                        eprintln!("no stage means from {url}: {e:#}");
                        Scrape::new()
                    })
                }
            };
            (read(p).await, read(n).await)
        }
    };
    let (p0, n0) = scrapes(client.clone()).await;
    produce_updates(args, total, &producer, &config.kafka.topic, &tracker).await?;
    tracker.done.store(true, Ordering::SeqCst);
    while let Some(r) = pollers.join_next().await {
        r?;
    }
    let (p1, n1) = scrapes(client.clone()).await;
    let mut report = report(args, total, &tracker)?;
    report.budget = Budget::of(&p0, &p1, &n0, &n1);
    Ok(report)
}

/// Sends `total` updates at `args.rate` per second, cycling through the documents, and notes
/// when each was produced.
async fn produce_updates(
    args: &FreshnessArgs,
    total: usize,
    producer: &Arc<DocumentProducer>,
    topic: &str,
    tracker: &Tracker,
) -> Result<()> {
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
        let (producer, topic) = (producer.clone(), topic.to_owned());
        tokio::task::spawn_blocking(move || producer.send(&topic, id.as_bytes(), Some(&bytes)))
            .await?
            .map_err(|e| anyhow!("producing: {e}"))?;
    }
    Ok(())
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
        poll_ms: args.poll_ms,
        bm25_ms: Percentiles::of(bm25),
        vector_ms: Percentiles::of(vector),
        both_ms: Percentiles::of(both),
        budget: Budget::default(),
    })
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let p = Percentiles::of((1..=100).map(f64::from).collect());
        assert_eq!(
            (p.count, p.p50, p.p90, p.p99, p.max),
            (100, 51.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(Percentiles::of(vec![]).count, 0);
        assert_eq!(Percentiles::of(vec![7.0]).p99, 7.0);
    }
}
