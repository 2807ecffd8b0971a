//! `freshet-tools eval`: retrieval quality through the real system. Publishes a BEIR corpus to
//! the document topic (the normal contract), waits until the query node serves an index that
//! holds every record of the topic (`GET /v1/index`: the node's own commit, wherever the
//! pipeline keeps it; an index that has not caught up is never reported on), runs
//! every query through the query node's HTTP API in each configuration, and reports nDCG@10,
//! Recall@5, Recall@10, Recall@100 and MRR@10 per configuration (table and JSON). With a baseline it is
//! the CI quality gate.

mod args;
mod baseline;
pub mod beir;
pub mod metrics;
mod trec;

pub use args::EvalArgs;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use crate::config::Config as StackConfig;
use beir::Dataset;
use metrics::{doc_ranking, Scores};
use trec::{doc_scores, trec_run, QueryRuns};

/// Options of one evaluation run (from [`EvalArgs`]).
pub struct Options {
    pub dataset: PathBuf,
    pub split: String,
    pub url: String,
    pub api_key: Option<String>,
    /// Configuration names (see [`preset`]) or `name=JSON` (request fields).
    pub configs: Vec<String>,
    pub publish: bool,
    pub wait: Duration,
    pub concurrency: usize,
    pub json_out: Option<PathBuf>,
    /// A folder for each configuration's TREC run file (`<name>.run`).
    pub runs_out: Option<PathBuf>,
    pub baseline: Option<PathBuf>,
    pub gate: Vec<baseline::Gated>,
    pub tolerance: f64,
    /// The pipeline's configuration file (topic, broker, index), for publishing and waiting.
    pub pipeline_config: Option<PathBuf>,
    /// `(name suffix, transform request fields)` added to every configuration
    /// (`--multi-query`, `--hyde`).
    pub transform: Option<(String, Value)>,
}

/// The `transform` request fields and the configuration name suffix of `--multi-query` and
/// `--hyde`; `None` when neither is given.
pub fn transform_fields(multi_query: Option<usize>, hyde: Option<&str>) -> Option<(String, Value)> {
    if multi_query.is_none() && hyde.is_none() {
        return None;
    }
    let mut suffix = String::new();
    let mut fields = serde_json::Map::new();
    if let Some(n) = multi_query {
        suffix.push_str(&format!("+mq{n}"));
        fields.insert("multi_query".into(), json!(n));
    }
    if let Some(h) = hyde {
        suffix.push_str(&format!("+hyde-{h}"));
        fields.insert("hyde".into(), json!(h));
    }
    Some((suffix, Value::Object(fields)))
}

/// A configuration with the run's transformation added (its own `transform` wins).
fn with_transform(
    (name, mut fields): (String, Value),
    t: &Option<(String, Value)>,
) -> (String, Value) {
    let Some((suffix, transform)) = t else {
        return (name, fields);
    };
    if let Some(obj) = fields.as_object_mut() {
        obj.entry("transform").or_insert_with(|| transform.clone());
    }
    (format!("{name}{suffix}"), fields)
}

/// Chunks asked for by the request that yields the @10 metrics, and by the Recall@100 one.
const SHALLOW_K: usize = 20;
const DEEP_K: usize = 100;

/// The request fields of a named configuration.
pub fn preset(name: &str) -> Option<Value> {
    Some(match name {
        "bm25" => json!({"mode": "bm25"}),
        "vector" => json!({"mode": "vector"}),
        "hybrid" => json!({"mode": "hybrid", "fusion": {"method": "rrf", "rrf_k": 60}}),
        "hybrid-weighted" => json!({"mode": "hybrid", "fusion": {"method": "weighted"}}),
        "hybrid-expand" => {
            json!({"mode": "hybrid", "fusion": {"method": "rrf", "rrf_k": 60}, "expand": {"top_m": 5, "window": 1}})
        }
        "hybrid-parents" => {
            json!({"mode": "hybrid", "fusion": {"method": "rrf", "rrf_k": 60}, "parents": true})
        }
        "hybrid-rerank" => {
            json!({"mode": "hybrid", "fusion": {"method": "rrf", "rrf_k": 60}, "rerank": {"candidates": 30}})
        }
        _ => return None,
    })
}

/// Splits `--configs` values on commas outside JSON braces and brackets.
pub fn split_configs(values: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for v in values {
        let (mut depth, mut start, mut quoted) = (0i32, 0usize, false);
        for (i, c) in v.char_indices() {
            match c {
                '"' => quoted = !quoted,
                '{' | '[' if !quoted => depth += 1,
                '}' | ']' if !quoted => depth -= 1,
                ',' if !quoted && depth == 0 => {
                    out.push(v[start..i].trim().to_owned());
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(v[start..].trim().to_owned());
    }
    out.retain(|s| !s.is_empty());
    out
}

fn parse_config(spec: &str) -> Result<(String, Value)> {
    if let Some((name, body)) = spec.split_once('=') {
        let v: Value = serde_json::from_str(body)
            .with_context(|| format!("configuration {name}: request fields must be JSON"))?;
        if !v.is_object() {
            bail!("configuration {name}: request fields must be a JSON object");
        }
        return Ok((name.to_owned(), v));
    }
    preset(spec).map(|v| (spec.to_owned(), v)).ok_or_else(|| {
        anyhow!(
            "unknown configuration {spec:?}: use bm25, vector, hybrid, hybrid-weighted, \
             hybrid-expand, hybrid-parents, hybrid-rerank or name={{request JSON}}"
        )
    })
}

/// Results of one configuration.
#[derive(Clone, Debug, Serialize)]
pub struct ConfigReport {
    pub request: Value,
    #[serde(flatten)]
    pub scores: Scores,
    pub queries: usize,
    /// Of the k = 20 request.
    pub latency_ms_p50: f64,
    pub latency_ms_p99: f64,
}

/// A whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub dataset: String,
    pub split: String,
    pub documents: usize,
    pub queries: usize,
    pub configs: BTreeMap<String, ConfigReport>,
}

/// A text progress bar on stderr.
pub(crate) struct Progress {
    label: &'static str,
    total: u64,
    last: Instant,
    shown: Option<u64>,
}

impl Progress {
    pub(crate) fn new(label: &'static str, total: u64) -> Self {
        Progress {
            label,
            total: total.max(1),
            last: Instant::now() - Duration::from_secs(60),
            shown: None,
        }
    }
    /// Redraws when the count changed (at most 5 times a second) or every 10 s.
    pub(crate) fn set(&mut self, done: u64) {
        let changed = self.shown != Some(done);
        let due = if changed {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(10)
        };
        if self.last.elapsed() < due && done < self.total {
            return;
        }
        self.last = Instant::now();
        self.shown = Some(done);
        let width = 30;
        let filled = ((done.min(self.total) * width) / self.total) as usize;
        eprint!(
            "\r{:<10} [{}{}] {}/{}",
            self.label,
            "#".repeat(filled),
            "-".repeat(width as usize - filled),
            done,
            self.total
        );
        let _ = std::io::stderr().flush();
    }
    pub(crate) fn finish(&mut self, done: u64) {
        self.last = Instant::now() - Duration::from_secs(60);
        self.shown = None;
        self.set(done);
        eprintln!();
    }
}

/// Publishes the corpus to the pipeline's topic; returns the topic and its high watermarks
/// afterwards.
fn publish(args: &Options, dataset: &Dataset) -> Result<(String, BTreeMap<i32, i64>)> {
    use freshet_kafka::{admin, TopicProducer};
    use freshet_publishers::{publish_jsonl, Mapping};

    let config = StackConfig::load(args.pipeline_config.as_deref())?;
    let kafka = &config.kafka;
    if args.publish {
        admin::ensure_topic(kafka, &kafka.topic, config.pipeline.topic_partitions)
            .context("creating the document topic")?;
        let producer = TopicProducer::new(kafka, &kafka.topic).context("creating the producer")?;
        let report = publish_jsonl(&dataset.corpus_path, &producer, &Mapping::default())
            .with_context(|| format!("publishing {}", dataset.corpus_path.display()))?;
        eprintln!(
            "published {} documents to {} ({} skipped)",
            report.upserts,
            kafka.topic,
            report.bad.len()
        );
    }
    let high = crate::inspect::high_watermarks(kafka, "eval")?;
    Ok((kafka.topic.clone(), high))
}

/// The offsets of `topic` in the commit the query node serves (`GET /v1/index`).
async fn served_offsets(
    client: &reqwest::Client,
    args: &Options,
    topic: &str,
) -> Result<BTreeMap<i32, i64>> {
    let url = format!("{}/v1/index", args.url.trim_end_matches('/'));
    let mut req = client.get(&url);
    if let Some(k) = &args.api_key {
        req = req.bearer_auth(k);
    }
    let r = req.send().await.with_context(|| format!("GET {url}"))?;
    let status = r.status();
    let body: Value = r.json().await.with_context(|| format!("GET {url}"))?;
    if !status.is_success() {
        bail!("GET {url}: {status} {body}");
    }
    offsets_of(&body, topic)
}

/// `topic`'s offsets in a `GET /v1/index` answer (none yet: an empty map).
fn offsets_of(body: &Value, topic: &str) -> Result<BTreeMap<i32, i64>> {
    let offsets = &body["offsets"];
    let Some(mine) = offsets.get(topic).and_then(Value::as_object) else {
        let topics: Vec<&String> = offsets
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        if topics.is_empty() {
            return Ok(BTreeMap::new());
        }
        bail!(
            "the index the query node serves holds offsets of {topics:?}, not of {topic}: \
             the evaluation publishes to the pipeline's topic, so give it the pipeline's \
             configuration (--config or FRESHET_KAFKA_TOPIC)"
        );
    };
    Ok(mine
        .iter()
        .filter_map(|(p, o)| Some((p.parse().ok()?, o.as_i64()?)))
        .collect())
}

/// Waits until the index the query node serves holds every record of the topic (its high
/// watermarks `high`), showing progress; with `--no-publish`, refuses at once an index that has
/// not caught up, so that no report is made on a partial index.
pub(crate) async fn wait_caught_up(
    client: &reqwest::Client,
    args: &Options,
    topic: &str,
    high: &BTreeMap<i32, i64>,
) -> Result<()> {
    let total: i64 = high.values().sum();
    let done_of = |served: &BTreeMap<i32, i64>| -> i64 {
        high.iter()
            .map(|(p, h)| served.get(p).copied().unwrap_or(0).min(*h))
            .sum()
    };
    if !args.publish {
        let served = served_offsets(client, args, topic).await?;
        if !crate::inspect::covers(&served, high) {
            bail!(
                "the index the query node serves has {} of the {total} records of {topic}: it \
                 has not caught up, so its figures would be wrong; wait for the pipeline, or \
                 publish with the evaluation (no --no-publish)",
                done_of(&served)
            );
        }
        return Ok(());
    }
    eprintln!(
        "waiting until the query node at {} serves every record of {topic}",
        args.url
    );
    let mut bar = Progress::new("ingest", total.max(0) as u64);
    let deadline = Instant::now() + args.wait;
    loop {
        let served = served_offsets(client, args, topic).await?;
        let done = done_of(&served);
        bar.set(done.max(0) as u64);
        if crate::inspect::covers(&served, high) {
            bar.finish(done.max(0) as u64);
            return Ok(());
        }
        if Instant::now() > deadline {
            eprintln!();
            bail!(
                "the query node's index did not catch up with {topic} within {:?} \
                 ({done}/{total} records); is `freshet run` running with the same \
                 configuration, and the node serving its index?",
                args.wait
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs the evaluation; returns the report and whether the gate (if any) passed.
pub fn run(args: Options) -> Result<(Report, bool)> {
    let dataset = Dataset::load(&args.dataset, &args.split)?;
    let configs: Vec<(String, Value)> = args
        .configs
        .iter()
        .map(|c| parse_config(c).map(|c| with_transform(c, &args.transform)))
        .collect::<Result<_>>()?;
    let (topic, high) = publish(&args, &dataset)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    runtime.block_on(wait_caught_up(&client, &args, &topic, &high))?;
    let mut report = Report {
        dataset: args.dataset.display().to_string(),
        split: args.split.clone(),
        documents: dataset.documents,
        queries: dataset.judged_queries().len(),
        configs: BTreeMap::new(),
    };
    for (name, fields) in &configs {
        eprintln!("config {name}: {fields}");
        let (r, run) = runtime.block_on(run_config(&client, &args, &dataset, fields))?;
        if let Some(dir) = &args.runs_out {
            std::fs::create_dir_all(dir)?;
            let path = dir.join(format!("{name}.run"));
            std::fs::write(&path, trec_run(name, &run))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        report.configs.insert(name.clone(), r);
    }
    print_table(&report);
    if let Some(path) = &args.json_out {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let passed = match &args.baseline {
        Some(b) => baseline::gate(&report, b, &args.gate, args.tolerance)?,
        None => true,
    };
    Ok((report, passed))
}

async fn run_config(
    client: &reqwest::Client,
    args: &Options,
    dataset: &Dataset,
    fields: &Value,
) -> Result<(ConfigReport, QueryRuns)> {
    let queries = dataset.judged_queries();
    let sem = Arc::new(tokio::sync::Semaphore::new(args.concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (qid, text)) in queries.iter().enumerate() {
        // Two requests per query: k = 20 (the node's route defaults) for the @10 metrics, as an
        // application asking for ten documents' worth of chunks would; k = 100 (routes widened
        // to 100) for Recall@100.
        let bodies: Vec<Value> = [SHALLOW_K, DEEP_K]
            .iter()
            .map(|k| {
                let mut body = json!({"query": text, "k": k});
                for (f, v) in fields.as_object().expect("checked object") {
                    body[f] = v.clone();
                }
                body
            })
            .collect();
        let (client, sem) = (client.clone(), sem.clone());
        let url = format!("{}/v1/retrieve", args.url.trim_end_matches('/'));
        let key = args.api_key.clone();
        let qid = qid.clone();
        tasks.spawn(async move {
            let _permit = sem.acquire_owned().await?;
            let mut rankings = Vec::new();
            let mut scored = Vec::new();
            let mut ms = 0.0;
            for body in bodies {
                let started = Instant::now();
                let mut req = client.post(&url).json(&body);
                if let Some(k) = &key {
                    req = req.bearer_auth(k);
                }
                let resp = req.send().await.with_context(|| format!("POST {url}"))?;
                let status = resp.status();
                let text = resp.text().await?;
                if !status.is_success() {
                    bail!("query {qid}: {status}: {text}");
                }
                if rankings.is_empty() {
                    ms = started.elapsed().as_secs_f64() * 1000.0;
                }
                let v: Value = serde_json::from_str(&text)?;
                let hits = v["results"]
                    .as_array()
                    .ok_or_else(|| anyhow!("query {qid}: no results array"))?;
                if rankings.is_empty() {
                    // The k = 20 ranking, with the scores its run file keeps.
                    scored = doc_scores(hits);
                    rankings.push(scored.iter().map(|(d, _)| d.clone()).collect());
                } else {
                    let ids = hits
                        .iter()
                        .map(|h| h["doc_id"].as_str().unwrap_or_default());
                    rankings.push(doc_ranking(ids));
                }
            }
            let deep = rankings.pop().unwrap_or_default();
            let shallow = rankings.pop().unwrap_or_default();
            Ok::<_, anyhow::Error>((i, shallow, deep, ms, scored))
        });
    }
    let mut bar = Progress::new("queries", queries.len() as u64);
    let mut done = 0u64;
    let mut per_query: Vec<Option<Scores>> = vec![None; queries.len()];
    let mut run = vec![Vec::new(); queries.len()];
    let mut latencies = Vec::with_capacity(queries.len());
    while let Some(res) = tasks.join_next().await {
        let (i, shallow, deep, ms, scored) = res??;
        per_query[i] = Some(Scores::of(&shallow, &deep, &dataset.qrels[&queries[i].0]));
        run[i] = scored;
        latencies.push(ms);
        done += 1;
        bar.set(done);
    }
    bar.finish(done);
    let all: Vec<Scores> = per_query.into_iter().flatten().collect();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        latencies[((latencies.len() as f64 - 1.0) * p).round() as usize]
    };
    let report = ConfigReport {
        request: fields.clone(),
        scores: Scores::mean(&all),
        queries: all.len(),
        latency_ms_p50: pct(0.5),
        latency_ms_p99: pct(0.99),
    };
    let qids = queries.iter().map(|(q, _)| q.clone());
    Ok((report, qids.zip(run).collect()))
}

fn print_table(r: &Report) {
    println!(
        "\n{} ({} split): {} documents, {} judged queries",
        r.dataset, r.split, r.documents, r.queries
    );
    println!(
        "{:<18} {:>8} {:>9} {:>10} {:>11} {:>8} {:>8} {:>8}",
        "config", "nDCG@10", "Recall@5", "Recall@10", "Recall@100", "MRR@10", "p50 ms", "p99 ms"
    );
    for (name, c) in &r.configs {
        println!(
            "{:<18} {:>8.4} {:>9.4} {:>10.4} {:>11.4} {:>8.4} {:>8.1} {:>8.1}",
            name,
            c.scores.ndcg10,
            c.scores.recall5,
            c.scores.recall10,
            c.scores.recall100,
            c.scores.mrr10,
            c.latency_ms_p50,
            c.latency_ms_p99
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_offsets_are_read_per_topic_and_a_wrong_topic_is_named() {
        let body = json!({"epoch": 3, "offsets": {"docs": {"0": 12, "1": 7}}, "chunks": 40});
        assert_eq!(
            offsets_of(&body, "docs").unwrap(),
            BTreeMap::from([(0, 12), (1, 7)])
        );
        let e = offsets_of(&body, "other").unwrap_err().to_string();
        assert!(e.contains("\"docs\"") && e.contains("other"), "{e}");
        // a new index without a commit yet: nothing served
        assert!(offsets_of(&json!({"offsets": {}}), "docs")
            .unwrap()
            .is_empty());
    }

    #[test]
    fn config_lists_split_outside_json() {
        let v =
            vec![r#"bm25,w={"fusion":{"method":"weighted","bm25_weight":0.2}},vector"#.to_string()];
        assert_eq!(
            split_configs(&v),
            [
                "bm25",
                r#"w={"fusion":{"method":"weighted","bm25_weight":0.2}}"#,
                "vector"
            ]
        );
        assert_eq!(
            split_configs(&["a,,b".to_string(), "c".to_string()]),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn configurations() {
        assert_eq!(parse_config("bm25").unwrap().1["mode"], "bm25");
        let (n, v) = parse_config(r#"mine={"mode":"vector","k":5}"#).unwrap();
        assert_eq!((n.as_str(), v["k"].as_u64()), ("mine", Some(5)));
        assert!(parse_config("nope").is_err());
        // --multi-query / --hyde: added to every configuration, named in a suffix.
        let t = transform_fields(Some(3), Some("auto"));
        let (n, v) = with_transform(parse_config("hybrid").unwrap(), &t);
        assert_eq!(n, "hybrid+mq3+hyde-auto");
        assert_eq!(v["transform"], json!({"multi_query": 3, "hyde": "auto"}));
        assert_eq!(v["mode"], "hybrid");
        assert!(transform_fields(None, None).is_none());
        let (n, v) = with_transform(parse_config("bm25").unwrap(), &None);
        assert_eq!((n.as_str(), v.get("transform")), ("bm25", None));
        assert!(parse_config("x=[1]").is_err());
        // Every preset is a valid request.
        for name in [
            "bm25",
            "vector",
            "hybrid",
            "hybrid-weighted",
            "hybrid-expand",
            "hybrid-parents",
            "hybrid-rerank",
        ] {
            let mut body = preset(name).unwrap();
            body["query"] = json!("q");
            freshet_query::request::parse(body.to_string().as_bytes())
                .unwrap_or_else(|e| panic!("{name}: {}", e.0));
        }
    }
}
