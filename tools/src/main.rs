//! `freshet-tools`: looking at and measuring a freshet installation, apart from the two service
//! binaries (`freshet`, the pipeline, and `freshet-query`, the query node).
//!
//! - `status`, `search`: what both indexes hold against the topic, and their top hits.
//! - `eval`: BEIR retrieval quality through the running pipeline and query node (the CI gate).
//! - `bench-ingest`: ingest, re-send and edit costs through Kafka and the real pipeline.
//! - `bench-latency`, `bench-freshness`: the query node under load, and produce-to-visible time.
//! - `bench-load`: query latency at a steady rate during an ingest against idle, and the
//!   ingest's throughput with and without the queries.
//! - `bench-replicate`: a large benchmark index from an indexed corpus, without re-embedding.
//! - `bench-parse`: parsing throughput per format and its share of preparing and embedding.
//! - `bench-watch`: folder sync over many files: first scan, idle CPU, restart.
//!
//! Every command reads the same `freshet.toml` and `FRESHET_<SECTION>_<KEY>` variables as the
//! services.

mod eval;
mod inspect;
mod load_bench;
mod parse_bench;
mod pipeline_bench;
mod query_bench;
mod replicate;
mod watch_bench;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use eval::EvalArgs;
use freshet_pipeline::config::Config;

#[derive(Parser)]
#[command(
    name = "freshet-tools",
    version,
    about = "Look at and measure a freshet installation: status, search, eval, benchmarks"
)]
struct Cli {
    /// TOML configuration file (the services' file; every setting optional,
    /// FRESHET_<SECTION>_<KEY> overrides).
    #[arg(long, global = true, env = "FRESHET_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what both indexes hold against the topic.
    Status {
        /// Wait up to this many seconds until every record on the topic is indexed.
        #[arg(long)]
        wait_secs: Option<u64>,
    },
    /// Query both indexes (BM25 and vector) and print the top hits of each.
    Search {
        query: String,
        #[arg(long, default_value_t = 3)]
        k: usize,
    },
    /// Benchmark the parsers: MB/s and pages/s per format, and parsing's share of preparing and
    /// embedding the same documents (no services needed; the configured model).
    BenchParse {
        /// A directory of files (every format `freshet publish --dir` sends).
        #[arg(long)]
        dir: PathBuf,
        /// Parses per file (the mean is reported).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Also write the report as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Benchmark ingest, re-send and edit costs on a BEIR corpus (fresh topic, collection, index
    /// and cache; needs the broker and Milvus).
    BenchIngest {
        /// BEIR corpus.jsonl.
        #[arg(long, default_value = "../shared/datasets/scifact/corpus.jsonl")]
        corpus: PathBuf,
        /// Fraction of documents to edit in the edit phase.
        #[arg(long, default_value_t = 0.01)]
        edit_fraction: f64,
        /// Use only the first N documents.
        #[arg(long)]
        limit: Option<usize>,
        /// Also write the report as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Build a benchmark index of N copies of an indexed corpus (perturbed vectors, no
    /// re-embedding) directly in a new tantivy index and Milvus collection.
    BenchReplicate {
        /// The pipeline index to copy.
        #[arg(long)]
        from_index: PathBuf,
        #[arg(long)]
        to_index: PathBuf,
        #[arg(long)]
        to_collection: String,
        #[arg(long, default_value_t = 10)]
        replicas: u32,
        /// Norm of the Gaussian noise added to each copy's vector (before re-normalising).
        #[arg(long, default_value_t = 0.3)]
        noise: f32,
    },
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
        /// Save the updates as files in this directory, followed by a running `freshet watch`
        /// (file saved → visible), instead of producing them to the topic.
        #[arg(long)]
        watched_dir: Option<PathBuf>,
    },
    /// Hybrid query latency at a steady request rate while the pipeline ingests a corpus, against
    /// the same rate idle, and the ingest's throughput with and without the queries (in-process
    /// pipeline, spawned query node; needs the broker and Milvus).
    BenchLoad(load_bench::LoadBenchArgs),
    /// Benchmark folder sync at scale: `freshet watch` over generated files (first scan, idle
    /// CPU, restart over unchanged files; needs the broker).
    BenchWatch(watch_bench::WatchBenchArgs),
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FRESHET_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("freshet-tools: error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// The pipeline's configuration, for the commands that read the indexes or the topic directly.
fn pipeline_config(path: &Option<PathBuf>) -> Result<Config> {
    Config::load(path.as_deref())
}

fn run(cli: Cli) -> Result<i32> {
    let config = cli.config;
    match cli.command {
        Command::Status { wait_secs } => {
            let wait = wait_secs.map(Duration::from_secs);
            inspect::print_status(&pipeline_config(&config)?, wait)?;
            Ok(0)
        }
        Command::Search { query, k } => {
            inspect::search(&pipeline_config(&config)?, &query, k)?;
            Ok(0)
        }
        Command::BenchParse { dir, rounds, json } => {
            let report = parse_bench::bench(&pipeline_config(&config)?, &dir, rounds)?;
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            Ok(0)
        }
        Command::BenchIngest {
            corpus,
            edit_fraction,
            limit,
            json,
        } => {
            let args = pipeline_bench::BenchArgs {
                corpus,
                edit_fraction,
                limit,
                json_out: json,
            };
            pipeline_bench::bench(&pipeline_config(&config)?, &args)?;
            Ok(0)
        }
        Command::BenchReplicate {
            from_index,
            to_index,
            to_collection,
            replicas,
            noise,
        } => {
            let args = replicate::ReplicateArgs {
                from_index,
                to_index,
                to_collection,
                replicas,
                noise,
            };
            replicate::replicate(&pipeline_config(&config)?, &args)?;
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
                pipeline_config: config.clone(),
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
            let report = runtime()?.block_on(query_bench::latency(query_bench::LatencyArgs {
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
            watched_dir,
        } => {
            let report =
                runtime()?.block_on(query_bench::freshness(query_bench::FreshnessArgs {
                    url,
                    api_key,
                    rate,
                    seconds,
                    documents,
                    poll_ms,
                    pipeline_config: config.clone(),
                    watched_dir,
                }))?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(0)
        }
        Command::BenchLoad(args) => {
            load_bench::run(&pipeline_config(&config)?, config.as_deref(), &args)?;
            Ok(0)
        }
        Command::BenchWatch(args) => {
            let report = watch_bench::run(&pipeline_config(&config)?, &args)?;
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
