//! `freshet-tools eval-answers`: the quality of `/v1/answer` through the real system. Deletes
//! the dataset's removed documents from the index (so that their questions have no answer
//! left), waits until the query node serves that, asks every question (with the request fields
//! of `--body`), and reports citation precision and recall, context recall, refusal accuracy
//! on unanswerable questions and false refusals on answerable ones, invalid citations and
//! uncited sentences, faithfulness (lexical, and judged by the configured model with
//! `--grounding`), key phrases, latency and tokens. With a baseline it is a gate.
//! `dataset.rs` reads the questions, `score.rs` scores one answer.

mod dataset;
pub mod score;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::eval::beir::Dataset as Beir;
use crate::query_bench::Percentiles;
use score::{mean, AnswerScore};

/// `freshet-tools eval-answers`.
#[derive(clap::Args)]
pub struct EvalAnswersArgs {
    /// The questions (JSONL; docs/evaluation.md, "Answers").
    #[arg(long)]
    questions: PathBuf,
    /// A BEIR dataset the questions' `query_id`s refer to.
    #[arg(long)]
    beir: Option<PathBuf>,
    #[arg(long, default_value = "test")]
    split: String,
    /// Base URL of the query node (its `[llm]` answers).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, env = "FRESHET_EVAL_API_KEY")]
    api_key: Option<String>,
    /// Request fields of every answer, e.g. '{"mode":"hybrid","k":5}'.
    #[arg(long, default_value = "{}")]
    body: String,
    /// Ask the model to check each cited statement (a second call per answer).
    #[arg(long)]
    grounding: bool,
    #[arg(long, default_value_t = 2)]
    concurrency: usize,
    /// Seconds to wait until the node serves the deletions.
    #[arg(long, default_value_t = 600)]
    wait_secs: u64,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// A committed report: fail (exit 2) when a figure is more than --tolerance worse.
    #[arg(long)]
    baseline: Option<PathBuf>,
    #[arg(long, default_value_t = 0.02)]
    tolerance: f64,
}

impl crate::Run for EvalAnswersArgs {
    /// Exits with 2 when the gate fails.
    fn run(self, config: Option<&Path>) -> Result<i32> {
        let report = run(&self, config)?;
        print_report(&report);
        if let Some(p) = &self.json {
            std::fs::write(p, serde_json::to_string_pretty(&report)?)
                .with_context(|| format!("writing {}", p.display()))?;
        }
        match &self.baseline {
            Some(b) => {
                let base: Report = serde_json::from_str(
                    &std::fs::read_to_string(b)
                        .with_context(|| format!("reading {}", b.display()))?,
                )
                .with_context(|| format!("{} is not an eval-answers report", b.display()))?;
                let failures = gate(&report, &base, self.tolerance);
                for f in &failures {
                    eprintln!("answer gate: {f}");
                }
                Ok(if failures.is_empty() { 0 } else { 2 })
            }
            None => Ok(0),
        }
    }
}

/// A run's figures (means over the questions they apply to; `None` when none does).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub questions: usize,
    pub answerable: usize,
    pub unanswerable: usize,
    pub body: Value,
    pub grounding: bool,
    pub context_recall: Option<f64>,
    pub citation_precision: Option<f64>,
    pub citation_recall: Option<f64>,
    /// Answerable questions whose answer cites nothing (left out of citation precision).
    pub no_citation: usize,
    /// Unanswerable questions refused.
    pub refusal_accuracy: Option<f64>,
    /// Answerable questions refused.
    pub false_refusals: Option<f64>,
    /// Invalid markers of all markers.
    pub invalid_citation_rate: Option<f64>,
    /// Sentences without a valid citation, of all sentences.
    pub uncited_sentence_rate: Option<f64>,
    /// Cited sentences the lexical check supports, of all cited sentences.
    pub lexical_faithfulness: Option<f64>,
    /// Statements the model's grounding check found supported, of those it judged.
    pub judged_faithfulness: Option<f64>,
    pub key_phrases: Option<f64>,
    pub latency_ms: Percentiles,
    pub prompt_tokens_mean: Option<f64>,
    pub completion_tokens_mean: Option<f64>,
    pub per_question: BTreeMap<String, AnswerScore>,
}

fn ratio(a: usize, b: usize) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// Deletes the removed documents through the pipeline's topic and waits until the node
/// serves the deletions.
fn remove_docs(
    args: &EvalAnswersArgs,
    config: Option<&Path>,
    docs: &std::collections::BTreeSet<String>,
) -> Result<()> {
    use freshet_kafka::TopicProducer;
    use freshet_publishers::{publish_jsonl, Mapping};
    if docs.is_empty() {
        return Ok(());
    }
    let stack = crate::config::Config::load(config)?;
    let kafka = &stack.kafka;
    let path = std::env::temp_dir().join(format!("freshet-deletions-{}.jsonl", std::process::id()));
    let lines: Vec<String> = docs
        .iter()
        .map(|d| json!({"op": "delete", "id": d}).to_string())
        .collect();
    std::fs::write(&path, lines.join("\n"))?;
    let producer = TopicProducer::new(kafka, &kafka.topic).context("creating the producer")?;
    let report = publish_jsonl(&path, &producer, &Mapping::default());
    let _ = std::fs::remove_file(&path);
    let report = report?;
    eprintln!(
        "deleted {} documents through {}",
        report.deletes, kafka.topic
    );
    let high = crate::inspect::high_watermarks(kafka, "eval-answers")?;
    let options = crate::eval::Options {
        dataset: PathBuf::new(),
        split: String::new(),
        url: args.url.clone(),
        api_key: args.api_key.clone(),
        configs: Vec::new(),
        publish: true,
        wait: Duration::from_secs(args.wait_secs),
        concurrency: 1,
        json_out: None,
        runs_out: None,
        baseline: None,
        gate: Vec::new(),
        tolerance: 0.0,
        pipeline_config: None,
        transform: None,
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    crate::query_bench::runtime()?.block_on(crate::eval::wait_caught_up(
        &client,
        &options,
        &kafka.topic,
        &high,
    ))
}

fn run(args: &EvalAnswersArgs, config: Option<&Path>) -> Result<Report> {
    let beir = match &args.beir {
        Some(dir) => Some(Beir::load(dir, &args.split)?),
        None => None,
    };
    let qs = dataset::load(&args.questions, beir.as_ref())?;
    let body: Value = serde_json::from_str(&args.body).context("--body must be JSON")?;
    if !body.is_object() {
        bail!("--body must be a JSON object");
    }
    remove_docs(args, config, &qs.removed_docs)?;
    let questions = Arc::new(qs.questions);
    let url = format!("{}/v1/answer", args.url.trim_end_matches('/'));
    let client = crate::query_bench::client(args.concurrency)?;
    let results = crate::query_bench::runtime()?.block_on(async {
        let sem = Arc::new(tokio::sync::Semaphore::new(args.concurrency.max(1)));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..questions.len() {
            let q = &questions[i];
            let mut b = json!({"query": q.text, "grounding": args.grounding});
            if let Some(l) = &q.language {
                b["language"] = json!(l);
            }
            for (k, v) in body.as_object().into_iter().flatten() {
                b[k] = v.clone();
            }
            let (client, url, sem, key) = (
                client.clone(),
                url.clone(),
                sem.clone(),
                args.api_key.clone(),
            );
            tasks.spawn(async move {
                let _permit = sem.acquire_owned().await?;
                let t = Instant::now();
                let v = crate::query_bench::post(&client, &url, key.as_deref(), &b)
                    .await
                    .with_context(|| format!("question {i}"))?;
                Ok::<_, anyhow::Error>((i, v, t.elapsed().as_secs_f64() * 1000.0))
            });
        }
        let mut out = vec![None; questions.len()];
        let mut bar = crate::eval::Progress::new("answers", questions.len() as u64);
        let mut done = 0u64;
        while let Some(r) = tasks.join_next().await {
            let (i, v, ms) = r??;
            out[i] = Some((v, ms));
            done += 1;
            bar.set(done);
        }
        bar.finish(done);
        Ok::<_, anyhow::Error>(out)
    })?;
    let mut per_question = BTreeMap::new();
    let (mut latencies, mut prompt, mut completion) = (Vec::new(), Vec::new(), Vec::new());
    for (q, r) in questions.iter().zip(results) {
        let Some((v, ms)) = r else { continue };
        latencies.push(ms);
        prompt.push(v["usage"]["prompt_tokens"].as_f64());
        completion.push(v["usage"]["completion_tokens"].as_f64());
        per_question.insert(q.id.clone(), score::score(&v, &q.expected));
    }
    let scores: Vec<&AnswerScore> = per_question.values().collect();
    let (ans, unans): (Vec<&&AnswerScore>, Vec<&&AnswerScore>) =
        scores.iter().partition(|s| s.answerable);
    let sum = |f: &dyn Fn(&AnswerScore) -> usize| scores.iter().map(|s| f(s)).sum::<usize>();
    Ok(Report {
        questions: scores.len(),
        answerable: ans.len(),
        unanswerable: unans.len(),
        body,
        grounding: args.grounding,
        context_recall: mean(ans.iter().map(|s| s.context_recall)),
        citation_precision: mean(ans.iter().map(|s| s.citation_precision)),
        citation_recall: mean(ans.iter().map(|s| s.citation_recall)),
        no_citation: ans
            .iter()
            .filter(|s| s.citations == 0 && !s.refused)
            .count(),
        refusal_accuracy: ratio(unans.iter().filter(|s| s.refused).count(), unans.len()),
        false_refusals: ratio(ans.iter().filter(|s| s.refused).count(), ans.len()),
        invalid_citation_rate: ratio(
            sum(&|s| s.invalid_citations),
            sum(&|s| s.citations + s.invalid_citations),
        ),
        uncited_sentence_rate: ratio(sum(&|s| s.uncited_sentences), sum(&|s| s.sentences)),
        lexical_faithfulness: ratio(sum(&|s| s.lexically_supported), sum(&|s| s.cited_sentences)),
        judged_faithfulness: ratio(sum(&|s| s.judged_supported), sum(&|s| s.judged)),
        key_phrases: mean(scores.iter().map(|s| s.key_phrases)),
        latency_ms: Percentiles::of(latencies),
        prompt_tokens_mean: mean(prompt),
        completion_tokens_mean: mean(completion),
        per_question,
    })
}

/// The figures a gate compares: (name, value, higher is better).
fn figures(r: &Report) -> Vec<(&'static str, Option<f64>, bool)> {
    vec![
        ("context_recall", r.context_recall, true),
        ("citation_precision", r.citation_precision, true),
        ("citation_recall", r.citation_recall, true),
        ("refusal_accuracy", r.refusal_accuracy, true),
        ("false_refusals", r.false_refusals, false),
        ("invalid_citation_rate", r.invalid_citation_rate, false),
        ("uncited_sentence_rate", r.uncited_sentence_rate, false),
        ("lexical_faithfulness", r.lexical_faithfulness, true),
        ("judged_faithfulness", r.judged_faithfulness, true),
        ("key_phrases", r.key_phrases, true),
    ]
}

/// The figures of `r` more than `tolerance` worse than `base`'s, and a figure `base` has that
/// `r` lacks.
pub fn gate(r: &Report, base: &Report, tolerance: f64) -> Vec<String> {
    let mut out = Vec::new();
    if r.questions != base.questions {
        out.push(format!(
            "{} questions answered, the baseline has {}",
            r.questions, base.questions
        ));
    }
    for ((name, now, higher), (_, was, _)) in figures(r).into_iter().zip(figures(base)) {
        match (now, was) {
            (Some(n), Some(w)) => {
                let worse = if higher { w - n } else { n - w };
                if worse > tolerance {
                    out.push(format!("{name} {n:.3} against the baseline's {w:.3}"));
                }
            }
            (None, Some(w)) => out.push(format!("{name}: none (the baseline has {w:.3})")),
            _ => {}
        }
    }
    out
}

fn print_report(r: &Report) {
    let mut out = std::io::stdout().lock();
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    let _ = writeln!(
        out,
        "{} questions ({} answerable, {} unanswerable), request {}",
        r.questions, r.answerable, r.unanswerable, r.body
    );
    for (name, v, _) in figures(r) {
        let _ = writeln!(out, "  {name:<24} {}", f(v));
    }
    let _ = writeln!(
        out,
        "  {:<24} p50 {:.1} ms, p99 {:.1} ms; tokens: prompt {}, completion {}",
        "latency",
        r.latency_ms.p50,
        r.latency_ms.p99,
        f(r.prompt_tokens_mean),
        f(r.completion_tokens_mean)
    );
}
