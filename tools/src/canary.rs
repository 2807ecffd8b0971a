//! `freshet-tools canary`: live retrieval quality. A small set of canary queries with known
//! answers runs against a query node on a schedule (`POST /v1/retrieve`, as an application
//! asks), and the nDCG@k and Recall@k of the last round are served as Prometheus metrics
//! (`freshet_canary_*`, listed in `docs/monitoring.md`, "Retrieval quality") on `GET /metrics`,
//! next to `GET /healthz`. The alert FreshetRetrievalQualityDrop watches them.
//!
//! The canary file is JSON lines: each line is the body of a retrieval request plus
//! `"relevant"`, the document ids a right answer holds with their grades
//! (`{"query": "…", "mode": "hybrid", "relevant": {"doc-1": 2, "doc-2": 1}}`; a list of ids is
//! grade 1 each). `k` defaults to `--k`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use axum::routing::get;
use freshet_service::metrics::{FloatGauge, Registrar};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;

use crate::eval::metrics::{doc_ranking, ndcg_at, recall_at, Judgements};
use crate::Run;

#[derive(clap::Args)]
pub struct CanaryArgs {
    /// The canary queries: JSON lines, each a retrieval request with "relevant" (document id →
    /// grade, or a list of ids).
    #[arg(long)]
    queries: PathBuf,
    /// The query node's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    node: String,
    /// An API key of the node (sent as X-API-Key), when it asks for one.
    #[arg(long, env = "FRESHET_CANARY_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Seconds between the starts of two rounds.
    #[arg(long, default_value_t = 60)]
    interval_s: u64,
    /// The cutoff of nDCG@k and Recall@k (and the request's `k` when it names none).
    #[arg(long, default_value_t = 10)]
    k: usize,
    /// Where `/metrics` and `/healthz` are served.
    #[arg(long, default_value = "127.0.0.1:9465")]
    listen: String,
    /// The most one retrieval may take.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
}

/// One canary query: the request body and its judgements.
#[derive(Debug)]
pub struct Canary {
    pub request: Value,
    pub relevant: Judgements,
}

/// Reads the canary file; every line must be a JSON object with a `query` and at least one
/// relevant document.
pub fn parse_canaries(text: &str, k: usize) -> Result<Vec<Canary>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let n = i + 1;
        let mut request: Value =
            serde_json::from_str(line).with_context(|| format!("line {n}: not JSON"))?;
        let Some(obj) = request.as_object_mut() else {
            bail!("line {n}: not a JSON object");
        };
        ensure!(
            obj.get("query").is_some_and(Value::is_string),
            "line {n}: no \"query\" string"
        );
        let mut relevant = Judgements::new();
        match obj.remove("relevant") {
            Some(Value::Object(m)) => {
                for (id, g) in m {
                    let g = g
                        .as_i64()
                        .and_then(|g| i32::try_from(g).ok())
                        .with_context(|| format!("line {n}: grade of {id:?} is not an integer"))?;
                    relevant.insert(id, g);
                }
            }
            Some(Value::Array(ids)) => {
                for id in ids {
                    let id = id
                        .as_str()
                        .with_context(|| format!("line {n}: a relevant id is not a string"))?;
                    relevant.insert(id.to_owned(), 1);
                }
            }
            _ => bail!("line {n}: no \"relevant\" (an object of id → grade, or a list of ids)"),
        }
        ensure!(
            relevant.values().any(|g| *g > 0),
            "line {n}: no document with a positive grade in \"relevant\""
        );
        obj.entry("k").or_insert(Value::from(k));
        out.push(Canary { request, relevant });
    }
    ensure!(!out.is_empty(), "no canary queries");
    Ok(out)
}

/// The canary's metrics (`freshet_canary_*`).
#[derive(Clone)]
pub struct Metrics {
    pub registry: Arc<Registry>,
    pub ndcg: FloatGauge,
    pub recall: FloatGauge,
    pub queries: Gauge,
    pub answered: Gauge,
    pub runs: Counter,
    pub query_failures: Counter,
    pub last_run: FloatGauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registrar::new("canary");
        let ndcg = r.float_gauge(
            "ndcg",
            "Mean nDCG@k of the canary queries answered in the last round",
        );
        let recall = r.float_gauge(
            "recall",
            "Mean Recall@k of the canary queries answered in the last round",
        );
        let queries = r.gauge("queries", "Canary queries in the canary file");
        let answered = r.gauge(
            "answered_queries",
            "Canary queries answered in the last round",
        );
        let runs = r.counter("runs", "Rounds over the canary queries");
        let query_failures = r.counter(
            "query_failures",
            "Canary retrievals the node did not answer with 200 (or not in time)",
        );
        let last_run = r.float_gauge(
            "last_run_timestamp_seconds",
            "Unix time of the last round in which a canary query was answered (0: none yet)",
        );
        Metrics {
            registry: r.finish(),
            ndcg,
            recall,
            queries,
            answered,
            runs,
            query_failures,
            last_run,
        }
    }
}

/// The scores of one round: mean nDCG@k and Recall@k over the answered queries (`None`
/// when none was answered), and how many were.
pub fn score(
    rankings: &[Option<Vec<String>>],
    canaries: &[Canary],
    k: usize,
) -> Option<(f64, f64, usize)> {
    let scored: Vec<(f64, f64)> = rankings
        .iter()
        .zip(canaries)
        .filter_map(|(r, c)| {
            r.as_ref()
                .map(|r| (ndcg_at(r, &c.relevant, k), recall_at(r, &c.relevant, k)))
        })
        .collect();
    if scored.is_empty() {
        return None;
    }
    let n = scored.len() as f64;
    Some((
        scored.iter().map(|s| s.0).sum::<f64>() / n,
        scored.iter().map(|s| s.1).sum::<f64>() / n,
        scored.len(),
    ))
}

impl Run for CanaryArgs {
    fn run(self, _config: Option<&Path>) -> Result<i32> {
        let text = std::fs::read_to_string(&self.queries)
            .with_context(|| format!("reading {}", self.queries.display()))?;
        let canaries = parse_canaries(&text, self.k)
            .with_context(|| format!("canary file {}", self.queries.display()))?;
        ensure!(self.k > 0, "--k must be at least 1");
        ensure!(self.interval_s > 0, "--interval-s must be at least 1");
        let rt = freshet_service::process::runtime()?;
        rt.block_on(self.serve(canaries))?;
        Ok(0)
    }
}

impl CanaryArgs {
    async fn serve(self, canaries: Vec<Canary>) -> Result<()> {
        let metrics = Metrics::new();
        metrics.queries.set(canaries.len() as i64);
        let shutdown = freshet_service::listen::Shutdown::on_signal();
        let listener = freshet_service::listen::bind(&self.listen, "--listen").await?;
        let registry = metrics.registry.clone();
        let app = axum::Router::new()
            .route("/healthz", get(freshet_service::routes::healthz))
            .route(
                "/metrics",
                get(move || {
                    let registry = registry.clone();
                    async move { freshet_service::routes::metrics(&registry) }
                }),
            );
        let server = tokio::spawn(freshet_service::listen::serve(
            listener,
            freshet_service::routes::with_fallbacks(app),
            None,
            shutdown.wait(),
        ));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(self.timeout_ms))
            .build()?;
        let url = format!("{}/v1/retrieve", self.node.trim_end_matches('/'));
        tracing::info!(queries = canaries.len(), node = %self.node, listen = %self.listen, "canary running");
        let mut tick = tokio::time::interval(Duration::from_secs(self.interval_s));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let stop = shutdown.wait();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = tick.tick() => {}
            }
            let mut rankings = Vec::with_capacity(canaries.len());
            for c in &canaries {
                rankings.push(match self.retrieve(&http, &url, &c.request).await {
                    Ok(r) => Some(r),
                    Err(e) => {
                        metrics.query_failures.inc();
                        tracing::warn!(error = %format!("{e:#}"), query = %c.request["query"], "canary query failed");
                        None
                    }
                });
            }
            metrics.runs.inc();
            match score(&rankings, &canaries, self.k) {
                Some((ndcg, recall, answered)) => {
                    metrics.ndcg.set(ndcg);
                    metrics.recall.set(recall);
                    metrics.answered.set(answered as i64);
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_secs_f64())
                        .unwrap_or(0.0);
                    metrics.last_run.set(now);
                    tracing::info!(ndcg, recall, answered, "canary round");
                }
                None => {
                    metrics.answered.set(0);
                    tracing::warn!("canary round: no query answered; quality not updated");
                }
            }
        }
        server.await.context("the metrics server")??;
        Ok(())
    }

    /// The document ranking of one retrieval (document ids, best first, each once).
    async fn retrieve(
        &self,
        http: &reqwest::Client,
        url: &str,
        body: &Value,
    ) -> Result<Vec<String>> {
        let mut req = http.post(url).json(body);
        if let Some(key) = &self.api_key {
            req = req.header("X-API-Key", key);
        }
        let r = req.send().await?;
        let status = r.status();
        let text = r.text().await?;
        ensure!(status.is_success(), "{status}: {text}");
        let v: Value = serde_json::from_str(&text).context("the answer is not JSON")?;
        let hits = v["results"]
            .as_array()
            .context("no results in the answer")?;
        Ok(doc_ranking(
            hits.iter().filter_map(|h| h["doc_id"].as_str()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_table_in_monitoring_md_matches_the_registry() {
        let problems = freshet_service::metrics::spec::check(
            include_str!("../../docs/monitoring.md"),
            "freshet_canary_",
            &Metrics::new().registry,
        );
        assert!(problems.is_empty(), "docs/monitoring.md: {problems:#?}");
    }

    #[test]
    fn canary_lines_are_requests_with_judgements() {
        let text = r#"{"query": "heron", "mode": "bm25", "relevant": {"heron": 2, "egret": 1}}

{"query": "salmon", "k": 3, "relevant": ["salmon"]}"#;
        let c = parse_canaries(text, 10).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(
            c[0].request,
            serde_json::json!({"query": "heron", "mode": "bm25", "k": 10})
        );
        assert_eq!(c[0].relevant.get("heron"), Some(&2));
        assert_eq!(c[1].request["k"], 3);
        assert_eq!(c[1].relevant.get("salmon"), Some(&1));
        for (bad, why) in [
            ("{\"query\": \"q\"}", "no \"relevant\""),
            ("{\"relevant\": [\"a\"]}", "no \"query\""),
            (
                "{\"query\": \"q\", \"relevant\": {\"a\": 0}}",
                "positive grade",
            ),
            (
                "{\"query\": \"q\", \"relevant\": {\"a\": \"x\"}}",
                "not an integer",
            ),
            ("[1]", "not a JSON object"),
            ("", "no canary queries"),
        ] {
            let e = format!("{:#}", parse_canaries(bad, 10).unwrap_err());
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_round_scores_the_answered_queries() {
        let c = parse_canaries(
            "{\"query\": \"a\", \"relevant\": [\"x\"]}\n{\"query\": \"b\", \"relevant\": [\"y\", \"z\"]}\n{\"query\": \"c\", \"relevant\": [\"w\"]}",
            10,
        )
        .unwrap();
        let ids = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        // a: x first (nDCG 1, recall 1); b: y second, z missing; c: not answered.
        let (ndcg, recall, answered) =
            score(&[ids(&["x"]), ids(&["q", "y"]), None], &c, 10).unwrap();
        let b_ndcg = (1.0 / 3f64.log2()) / (1.0 + 1.0 / 3f64.log2());
        assert!((ndcg - (1.0 + b_ndcg) / 2.0).abs() < 1e-12, "{ndcg}");
        assert!((recall - 0.75).abs() < 1e-12, "{recall}");
        assert_eq!(answered, 2);
        assert!(score(&[None, None, None], &c, 10).is_none());
    }
}
