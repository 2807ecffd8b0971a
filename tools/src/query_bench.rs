//! `freshet-tools bench-latency`: the query node measured from the outside with a real HTTP
//! client (keep-alive connection pool, concurrent requests): `concurrency` clients send
//! `requests` retrievals (queries from a BEIR `queries.jsonl`, round robin, extra request fields
//! from `--body`) and report p50/p90/p99. With several `--url`s (replicas, or nodes behind no
//! balancer) the clients are spread over them in turn, and the throughput is their sum. Also
//! the HTTP helpers and [`Percentiles`] the other benchmarks share.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
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

/// The node's retrieval stages reported apart (`timings_ms` keys of an answer), to tell which
/// stage a latency or a tail comes from.
pub const STAGES: [&str; 5] = ["embed", "vector", "bm25", "fusion", "fetch"];

/// One answer's `timings_ms` of each of [`STAGES`] (`None` where the answer had none).
pub type StageMs = [Option<f64>; STAGES.len()];

pub fn stage_ms(answer: &Value) -> StageMs {
    STAGES.map(|k| answer["timings_ms"][k].as_f64())
}

/// Percentiles per stage over answers, for the stages that any answer had.
pub fn stage_percentiles<'a>(
    answers: impl Iterator<Item = &'a StageMs> + Clone,
) -> std::collections::BTreeMap<&'static str, Percentiles> {
    STAGES
        .iter()
        .enumerate()
        .map(|(i, k)| {
            (
                *k,
                Percentiles::of(answers.clone().filter_map(|s| s[i]).collect()),
            )
        })
        .filter(|(_, p)| p.count > 0)
        .collect()
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
    /// The node; repeat it for several (client `i` asks the `i mod n`th).
    #[arg(long = "url", default_value = "http://127.0.0.1:8080")]
    urls: Vec<String>,
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
    pub urls: Vec<String>,
    pub body: Value,
    pub concurrency: usize,
    pub requests: usize,
    pub errors: usize,
    pub seconds: f64,
    pub requests_per_second: f64,
    pub latency_ms: Percentiles,
    /// The node's own `timings_ms.total` (server side, without HTTP and JSON).
    pub server_total_ms: Percentiles,
    /// The node's own stage timings ([`STAGES`]).
    pub server_stages_ms: std::collections::BTreeMap<&'static str, Percentiles>,
    /// Query vectors the node took from its query cache during the run (from its `/metrics`;
    /// `None` if unreadable). Queries repeat round robin, so for the cost of embedding every
    /// query run the node with `query_cache_entries = 0`.
    pub node_query_cache_hits: Option<f64>,
    /// Requests answered, per `--url` (in their order).
    pub requests_per_url: Vec<usize>,
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

/// The nodes' query cache hits together (`None` if one is unreadable).
async fn cache_hits(client: &reqwest::Client, bases: &[String]) -> Option<f64> {
    let mut total = 0.0;
    for b in bases {
        total += query_cache_hits(client, b).await?;
    }
    Some(total)
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
    if args.urls.is_empty() {
        bail!("--url names no node");
    }
    let urls: Vec<String> = args
        .urls
        .iter()
        .map(|u| format!("{}/v1/retrieve", u.trim_end_matches('/')))
        .collect();
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
        let url = &urls[i % urls.len()];
        post(&client, url, args.api_key.as_deref(), &body_for(i)).await?;
    }
    let hits_before = cache_hits(&client, &args.urls).await;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..args.concurrency.max(1) {
        let (client, next) = (client.clone(), next.clone());
        let slot = c % urls.len();
        let url = urls[slot].clone();
        let key = args.api_key.clone();
        let bodies: Vec<Value> = (0..queries.len()).map(body_for).collect();
        let total = args.requests;
        tasks.spawn(async move {
            let mut lat = Vec::new();
            let mut server = Vec::new();
            let mut stages = Vec::new();
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
                        stages.push(stage_ms(&v));
                    }
                    Err(e) => {
                        errors += 1;
                        if errors <= 3 {
                            eprintln!("request failed: {e:#}");
                        }
                    }
                }
            }
            (slot, lat, server, stages, errors)
        });
    }
    let (mut lat, mut server, mut stages, mut errors) = (Vec::new(), Vec::new(), Vec::new(), 0);
    let mut per_url = vec![0; urls.len()];
    while let Some(r) = tasks.join_next().await {
        let (u, l, s, st, e) = r?;
        per_url[u] += l.len();
        lat.extend(l);
        server.extend(s);
        stages.extend(st);
        errors += e;
    }
    let seconds = started.elapsed().as_secs_f64();
    let hits_after = cache_hits(&client, &args.urls).await;
    Ok(LatencyReport {
        body,
        concurrency: args.concurrency,
        requests: lat.len(),
        errors,
        seconds,
        requests_per_second: lat.len() as f64 / seconds,
        latency_ms: Percentiles::of(lat),
        server_total_ms: Percentiles::of(server),
        server_stages_ms: stage_percentiles(stages.iter()),
        node_query_cache_hits: hits_before.zip(hits_after).map(|(b, a)| a - b),
        urls: args.urls.clone(),
        requests_per_url: per_url,
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

    #[test]
    fn stages_are_reported_where_answers_had_them() {
        let a = stage_ms(&json!({"timings_ms": {"embed": 3.0, "bm25": 1.0, "total": 5.0}}));
        let b = stage_ms(&json!({"timings_ms": {"embed": 5.0}}));
        let p = stage_percentiles([a, b].iter());
        assert_eq!((p["embed"].count, p["embed"].max), (2, 5.0));
        assert_eq!(p["bm25"].count, 1);
        assert!(!p.contains_key("vector") && !p.contains_key("total"));
    }
}
