//! `freshet-tools eval`'s command line, resolved into the [`Options`] of a run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;

use super::{baseline, run, split_configs, Options};

/// `freshet-tools eval`.
#[derive(clap::Args)]
pub struct EvalArgs {
    /// BEIR directory (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).
    #[arg(long, default_value = "../shared/datasets/scifact")]
    dataset: PathBuf,
    #[arg(long, default_value = "test")]
    split: String,
    /// Base URL of the query node.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    #[arg(long, env = "FRESHET_EVAL_API_KEY")]
    api_key: Option<String>,
    /// Comma-separated configurations: bm25, vector, hybrid, hybrid-weighted,
    /// hybrid-expand, hybrid-parents, hybrid-rerank, or name={request JSON} (commas inside
    /// the JSON are fine). May be repeated.
    #[arg(
        long,
        default_value = "bm25,vector,hybrid,hybrid-weighted,hybrid-expand"
    )]
    configs: Vec<String>,
    /// Do not publish the corpus (it is already indexed).
    #[arg(long)]
    no_publish: bool,
    /// Seconds to wait for the pipeline to index the corpus.
    #[arg(long, default_value_t = 3600)]
    wait_secs: u64,
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write each configuration's ranking as a TREC run file here (`<name>.run`: qid Q0 doc
    /// rank score name), for trec_eval, pytrec_eval or ranx, or to compare two runs.
    #[arg(long)]
    runs: Option<PathBuf>,
    /// Committed baseline report: fail if a --gate configuration's nDCG@10 is more than
    /// --tolerance below it. A configuration may carry a tolerance of its own
    /// (`--gate bm25,vector:0.03`).
    #[arg(long)]
    baseline: Option<PathBuf>,
    #[arg(long, value_delimiter = ',', default_value = "bm25,hybrid")]
    gate: Vec<String>,
    #[arg(long, default_value_t = 0.01)]
    tolerance: f64,
    /// Query transformation in every configuration (needs `[llm]` on the query node): this
    /// many multi-query rewrites ...
    #[arg(long)]
    multi_query: Option<usize>,
    /// ... and HyDE (`off`, `on`, `auto`). Each configuration's name gets the transformation
    /// as a suffix (`hybrid+mq3+hyde-auto`).
    #[arg(long, value_parser = ["off", "on", "auto"])]
    hyde: Option<String>,
}

impl EvalArgs {
    /// The run these arguments ask for, reading the pipeline's configuration from `config`.
    fn options(self, config: Option<&Path>) -> Result<Options> {
        Ok(Options {
            dataset: self.dataset,
            split: self.split,
            url: self.url,
            api_key: self.api_key,
            configs: split_configs(&self.configs),
            transform: super::transform_fields(self.multi_query, self.hyde.as_deref()),
            publish: !self.no_publish,
            wait: Duration::from_secs(self.wait_secs),
            concurrency: self.concurrency,
            json_out: self.json,
            runs_out: self.runs,
            baseline: self.baseline,
            gate: baseline::parse(&self.gate)?,
            tolerance: self.tolerance,
            pipeline_config: config.map(Path::to_path_buf),
        })
    }
}

impl crate::Run for EvalArgs {
    /// Exits with 2 when the gate fails.
    fn run(self, config: Option<&Path>) -> Result<i32> {
        let (_, passed) = run(self.options(config)?)?;
        Ok(if passed { 0 } else { 2 })
    }
}
