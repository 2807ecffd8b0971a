//! `freshet-tools gate`: the retrieval gate of a re-index (docs/reindex.md). It scores the
//! candidate generation through a query node serving it (`--candidate`), and the generation
//! served through its node (`--serving`, when there is one), with the `eval` run of a BEIR-style
//! set and the canary queries of `canary`, and writes a verdict that `freshet reindex switch
//! --gate` requires: passed, and bound to the index id the candidate node served.
//!
//! The candidate passes when, on both the set and the canaries, its nDCG@10 is at least
//! `--floor` and, with `--serving`, no more than `--tolerance` below the served generation's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::canary::{parse_canaries, score};
use crate::eval::metrics::doc_ranking;
use crate::eval::{self, Options};
use crate::Run;

#[derive(clap::Args)]
pub struct GateArgs {
    /// A query node serving the candidate generation (its [tantivy] path and [milvus]
    /// collection, no serving pointer).
    #[arg(long)]
    candidate: String,
    /// A query node serving the generation served now (left out for a first generation).
    #[arg(long)]
    serving: Option<String>,
    /// A BEIR-style directory (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) whose corpus
    /// the topics hold.
    #[arg(long)]
    dataset: PathBuf,
    #[arg(long, default_value = "test")]
    split: String,
    /// The canary queries (`freshet-tools canary`'s file).
    #[arg(long)]
    canary: PathBuf,
    /// The request fields of the evaluation (a preset of `eval --config`, or name=JSON).
    #[arg(long, default_value = "hybrid")]
    eval_config: String,
    /// How far below the served generation's nDCG@10 the candidate's may be.
    #[arg(long, default_value_t = 0.02)]
    tolerance: f64,
    /// The lowest nDCG@10 the candidate may have, whatever the served generation's.
    #[arg(long, default_value_t = 0.0)]
    floor: f64,
    /// The k of the canary queries.
    #[arg(long, default_value_t = 10)]
    k: usize,
    /// An API key of the nodes (X-API-Key / Bearer).
    #[arg(long, env = "FRESHET_GATE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// How long to wait for the candidate to serve the topics' ends.
    #[arg(long, default_value_t = 300)]
    wait_s: u64,
    /// Where to write the verdict.
    #[arg(long)]
    out: PathBuf,
}

/// One generation's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    pub node: String,
    pub index_id: String,
    pub epoch: u64,
    #[serde(rename = "ndcg@10")]
    pub ndcg10: f64,
    #[serde(rename = "canary_ndcg@k")]
    pub canary_ndcg: f64,
    #[serde(rename = "canary_recall@k")]
    pub canary_recall: f64,
}

/// What `freshet reindex switch --gate` reads.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub passed: bool,
    /// The candidate's index id (the switch checks it is the generation it switches to).
    pub index_id: String,
    pub at_ms: u64,
    pub dataset: String,
    pub tolerance: f64,
    pub floor: f64,
    pub candidate: Figures,
    pub serving: Option<Figures>,
    /// Why it failed (empty when it passed).
    pub reasons: Vec<String>,
}

/// The gate's rule over the figures (see the module docs).
pub fn judge(
    candidate: &Figures,
    serving: Option<&Figures>,
    tolerance: f64,
    floor: f64,
) -> Vec<String> {
    let mut reasons = Vec::new();
    let checks = [
        (
            "nDCG@10 of the set",
            candidate.ndcg10,
            serving.map(|s| s.ndcg10),
        ),
        (
            "canary nDCG",
            candidate.canary_ndcg,
            serving.map(|s| s.canary_ndcg),
        ),
    ];
    for (what, got, served) in checks {
        if got < floor {
            reasons.push(format!("{what} {got:.4} is below the floor {floor:.4}"));
        }
        if let Some(s) = served {
            if got < s - tolerance {
                reasons.push(format!(
                    "{what} {got:.4} is more than {tolerance:.4} below the served generation's {s:.4}"
                ));
            }
        }
    }
    reasons
}

impl Run for GateArgs {
    fn run(self, config: Option<&Path>) -> Result<i32> {
        let text = std::fs::read_to_string(&self.canary)
            .with_context(|| format!("reading {}", self.canary.display()))?;
        let canaries = parse_canaries(&text, self.k)
            .with_context(|| format!("canary file {}", self.canary.display()))?;
        ensure!(self.tolerance >= 0.0, "--tolerance must not be negative");
        let candidate = self.figures(&self.candidate, config, &canaries)?;
        let serving = match &self.serving {
            Some(node) => Some(self.figures(node, config, &canaries)?),
            None => None,
        };
        let reasons = judge(&candidate, serving.as_ref(), self.tolerance, self.floor);
        let verdict = Verdict {
            passed: reasons.is_empty(),
            index_id: candidate.index_id.clone(),
            at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            dataset: self.dataset.display().to_string(),
            tolerance: self.tolerance,
            floor: self.floor,
            candidate,
            serving,
            reasons,
        };
        let body = serde_json::to_string_pretty(&verdict)?;
        std::fs::write(&self.out, format!("{body}\n"))
            .with_context(|| format!("writing {}", self.out.display()))?;
        println!("{body}");
        if verdict.passed {
            eprintln!("gate passed: verdict in {}", self.out.display());
            Ok(0)
        } else {
            eprintln!("gate failed: {}", verdict.reasons.join("; "));
            Ok(1)
        }
    }
}

impl GateArgs {
    fn figures(
        &self,
        node: &str,
        config: Option<&Path>,
        canaries: &[crate::canary::Canary],
    ) -> Result<Figures> {
        let (report, _) = eval::run(Options {
            dataset: self.dataset.clone(),
            split: self.split.clone(),
            url: node.to_string(),
            api_key: self.api_key.clone(),
            configs: vec![self.eval_config.clone()],
            publish: false,
            wait: Duration::from_secs(self.wait_s),
            concurrency: 4,
            json_out: None,
            runs_out: None,
            baseline: None,
            gate: Vec::new(),
            tolerance: self.tolerance,
            pipeline_config: config.map(Path::to_path_buf),
            transform: None,
        })
        .with_context(|| format!("evaluating {node}"))?;
        let Some(scores) = report.configs.values().next() else {
            bail!("the evaluation of {node} scored no configuration");
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let rankings = rt.block_on(canary_rankings(node, self.api_key.as_deref(), canaries))?;
        let (canary_ndcg, canary_recall, _) =
            score(&rankings, canaries, self.k).context("no canary query was answered")?;
        // The commit scored: the node may have loaded a newer one of the same index meanwhile,
        // never one of another index.
        let (index_id, epoch) = rt.block_on(served_index(node, self.api_key.as_deref()))?;
        Ok(Figures {
            node: node.to_string(),
            index_id,
            epoch,
            ndcg10: scores.scores.ndcg10,
            canary_ndcg,
            canary_recall,
        })
    }
}

/// The rankings of the canary queries on `node`; every query must be answered.
async fn canary_rankings(
    node: &str,
    api_key: Option<&str>,
    canaries: &[crate::canary::Canary],
) -> Result<Vec<Option<Vec<String>>>> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let url = format!("{}/v1/retrieve", node.trim_end_matches('/'));
    let mut rankings = Vec::with_capacity(canaries.len());
    for c in canaries {
        let mut req = http.post(&url).json(&c.request);
        if let Some(k) = api_key {
            req = req.header("X-API-Key", k);
        }
        let r = req.send().await.with_context(|| format!("POST {url}"))?;
        let status = r.status();
        let text = r.text().await?;
        ensure!(
            status.is_success(),
            "canary query on {node}: {status}: {text}"
        );
        let v: Value = serde_json::from_str(&text).context("the answer is not JSON")?;
        let hits = v["results"]
            .as_array()
            .context("no results in the answer")?;
        rankings.push(Some(doc_ranking(
            hits.iter().filter_map(|h| h["doc_id"].as_str()),
        )));
    }
    Ok(rankings)
}

/// The index id and epoch of the commit `node` serves (`GET /v1/index`).
async fn served_index(node: &str, api_key: Option<&str>) -> Result<(String, u64)> {
    let url = format!("{}/v1/index", node.trim_end_matches('/'));
    let mut req = reqwest::Client::new().get(&url);
    if let Some(k) = api_key {
        req = req.header("X-API-Key", k);
    }
    let r = req.send().await.with_context(|| format!("GET {url}"))?;
    let status = r.status();
    let v: Value = serde_json::from_str(&r.text().await?).context("GET /v1/index: not JSON")?;
    ensure!(status.is_success(), "GET {url}: {status}: {v}");
    let id = v["index_id"]
        .as_str()
        .filter(|s| !s.is_empty())
        .with_context(|| format!("{node} serves an index without an index id: {v}"))?;
    Ok((id.to_string(), v["epoch"].as_u64().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(ndcg: f64, canary: f64) -> Figures {
        Figures {
            node: String::new(),
            index_id: "i".into(),
            epoch: 1,
            ndcg10: ndcg,
            canary_ndcg: canary,
            canary_recall: canary,
        }
    }

    #[test]
    fn the_command_line_parses_with_the_global_config() {
        use clap::{CommandFactory, Parser};
        crate::Cli::command().debug_assert();
        let cli = crate::Cli::try_parse_from([
            "freshet-tools",
            "--config",
            "b.toml",
            "gate",
            "--candidate",
            "http://c",
            "--dataset",
            "set",
            "--canary",
            "c.jsonl",
            "--out",
            "v.json",
        ])
        .unwrap();
        assert_eq!(cli.config.as_deref(), Some(Path::new("b.toml")));
    }

    #[test]
    fn a_candidate_within_the_tolerance_and_above_the_floor_passes() {
        assert!(judge(&figures(0.70, 0.9), Some(&figures(0.71, 0.9)), 0.02, 0.5).is_empty());
        assert!(judge(&figures(0.60, 0.8), None, 0.02, 0.5).is_empty());
    }

    #[test]
    fn a_worse_candidate_fails_with_the_figures() {
        let r = judge(&figures(0.60, 0.9), Some(&figures(0.70, 0.9)), 0.02, 0.0);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].contains("0.6000") && r[0].contains("0.7000"), "{r:?}");
        let r = judge(&figures(0.70, 0.30), Some(&figures(0.70, 0.9)), 0.02, 0.5);
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(
            r.iter()
                .any(|m| m.contains("canary") && m.contains("floor")),
            "{r:?}"
        );
    }
}
