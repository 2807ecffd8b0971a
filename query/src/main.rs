//! `freshet-query`: the query node binary.
//!
//! - `freshet-query [serve] [--config freshet.toml]`: serve the HTTP API (see `/openapi.json`)
//!   until SIGINT/SIGTERM.
//! - `freshet-query eval --dataset DIR`: BEIR retrieval-quality evaluation through the running
//!   pipeline and query node (publish, wait, query, report; optional CI gate).
//! - `freshet-query bench-latency` / `bench-freshness`: the README's query benchmarks.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use freshet_query::bench;
use freshet_query::config::Config;
use freshet_query::eval::{self, EvalArgs};

#[derive(Parser)]
#[command(
    name = "freshet-query",
    version,
    about = "Hybrid retrieval over the indexes the freshet pipeline keeps fresh"
)]
struct Cli {
    /// TOML configuration file (the pipeline's file; the [query] section is this node's).
    #[arg(long, global = true, env = "FRESHET_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve,
    /// Evaluate retrieval quality on a BEIR dataset through the pipeline and the query node.
    Eval {
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
        /// Committed baseline report: fail if a --gate configuration's nDCG@10 is more than
        /// --tolerance below it.
        #[arg(long)]
        baseline: Option<PathBuf>,
        #[arg(long, value_delimiter = ',', default_value = "bm25,hybrid")]
        gate: Vec<String>,
        #[arg(long, default_value_t = 0.01)]
        tolerance: f64,
    },
    /// Query latency under concurrency, measured with an HTTP client against a running node.
    BenchLatency {
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
    },
    /// Produce-to-visible time in both routes at a steady update rate (needs the pipeline).
    BenchFreshness {
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
    },
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FRESHET_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run(Cli::parse()) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("freshet-query: error: {e:#}");
            std::process::exit(1);
        }
    }
}

fn run(cli: Cli) -> Result<i32> {
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let config = Config::load(cli.config.as_deref())?;
            runtime()?.block_on(async {
                let engine = freshet_query::server::engine(config)?;
                freshet_query::server::serve(engine).await
            })?;
            Ok(0)
        }
        Command::Eval {
            dataset,
            split,
            url,
            api_key,
            configs,
            no_publish,
            wait_secs,
            concurrency,
            json,
            baseline,
            gate,
            tolerance,
        } => {
            let (_, passed) = eval::run(EvalArgs {
                dataset,
                split,
                url,
                api_key,
                configs: eval::split_configs(&configs),
                publish: !no_publish,
                wait: Duration::from_secs(wait_secs),
                concurrency,
                json_out: json,
                baseline,
                gate,
                tolerance,
                pipeline_config: cli.config,
            })?;
            Ok(if passed { 0 } else { 2 })
        }
        Command::BenchLatency {
            url,
            api_key,
            queries,
            body,
            concurrency,
            requests,
            warmup,
        } => {
            let body: serde_json::Value =
                serde_json::from_str(&body).context("--body must be a JSON object")?;
            let report = runtime()?.block_on(bench::latency(bench::LatencyArgs {
                url,
                api_key,
                queries,
                body,
                concurrency,
                requests,
                warmup,
            }))?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(0)
        }
        Command::BenchFreshness {
            url,
            api_key,
            rate,
            seconds,
            documents,
            poll_ms,
        } => {
            let report = runtime()?.block_on(bench::freshness(bench::FreshnessArgs {
                url,
                api_key,
                rate,
                seconds,
                documents,
                poll_ms,
                pipeline_config: cli.config,
            }))?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(0)
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
