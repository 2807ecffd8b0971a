//! `freshet-tools`: looking at and measuring a freshet installation, apart from the two service
//! binaries (`freshet`, the pipeline, and `freshet-query`, the query node).
//!
//! - `status`, `search`: what both indexes hold against the topic, and their top hits.
//! - `eval`: BEIR retrieval quality through the running pipeline and query node (the CI gate).
//! - `eval-answers`: answer quality through `/v1/answer` (citations, refusals, faithfulness).
//! - `bench-ingest`: ingest, re-send and edit costs through Kafka and the real pipeline.
//! - `bench-latency`, `bench-freshness`: the query node under load, and produce-to-visible time.
//! - `bench-answer`: what `/v1/answer` adds to a retrieval with a model that answers at once.
//! - `bench-load`: query latency at a steady rate during an ingest against idle, and the
//!   ingest's throughput with and without the queries.
//! - `bench-replicate`: a large benchmark index from an indexed corpus, without re-embedding.
//! - `bench-index`: the vector index types side by side: search latency, recall against FLAT,
//!   Milvus' memory.
//! - `bench-bm25`: BM25 top-k latency in process, pruned against exhaustive, over an index.
//! - `bench-parse`: parsing throughput per format and its share of preparing and embedding.
//! - `bench-watch`: folder sync over many files: first scan, idle CPU, restart.
//! - `llm-standin`: the tests' deterministic OpenAI-compatible chat server (docs/llm.md).
//! - `ja-dict`: builds the Japanese dictionary of the BM25 index from MeCab's IPADIC sources.
//! - `canary`: live retrieval quality: canary queries with known answers against a query node
//!   on a schedule, their nDCG and recall served as Prometheus metrics (docs/monitoring.md).
//! - `gate`: the retrieval gate of a re-index: a candidate generation against the one served
//!   (docs/reindex.md).
//!
//! Every command reads the same `freshet.toml` and `FRESHET_<SECTION>_<KEY>` variables as the
//! services: the sections [`config`] names, or the pipeline's whole configuration for the two
//! benchmarks that run it in process.

mod answer_bench;
mod answers;
mod bm25_bench;
mod canary;
mod config;
mod cpu_time;
mod eval;
mod freshness_bench;
mod freshness_budget;
mod freshness_wait;
mod gate;
mod index_bench;
mod inspect;
mod ja_dict;
mod llm_standin;
mod load_bench;
mod parse_bench;
mod pipeline_bench;
mod procfs;
mod query_bench;
mod replicate;
mod seal_bench;
mod watch_bench;

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Parser, Subcommand};

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
    Status(inspect::StatusArgs),
    /// Query both indexes (BM25 and vector) and print the top hits of each.
    Search(inspect::SearchArgs),
    /// Benchmark the parsers: MB/s and pages/s per format, and parsing's share of preparing and
    /// embedding the same documents (no services needed; the configured model).
    BenchParse(parse_bench::ParseBenchArgs),
    /// Benchmark ingest, re-send and edit costs on a BEIR corpus (fresh topic, collection, index
    /// and cache; needs the broker and Milvus).
    BenchIngest(pipeline_bench::IngestBenchArgs),
    /// Build a benchmark index of N copies of an indexed corpus (perturbed vectors, no
    /// re-embedding) directly in a new tantivy index and Milvus collection.
    BenchReplicate(replicate::ReplicateArgs),
    /// Vector search latency on collections being written to, with the sink's sealing policy
    /// (`[milvus] flush_rows` / `flush_interval`) and without it, side by side (needs Milvus).
    BenchSeal(seal_bench::SealBenchArgs),
    /// The vector index types (`[milvus] index_type`) on the same rows side by side: search
    /// latency, recall@k against FLAT, Milvus' resident memory with each loaded (needs Milvus).
    BenchIndex(index_bench::IndexBenchArgs),
    /// BM25 top-k latency in process over an index directory, the pruned scorer against the
    /// exhaustive one side by side, and a check that both find the same top k.
    BenchBm25(bm25_bench::Bm25BenchArgs),
    /// Evaluate retrieval quality on a BEIR dataset through the pipeline and the query node.
    Eval(eval::EvalArgs),
    /// Evaluate /v1/answer on a dataset of questions: citations, refusals, faithfulness.
    EvalAnswers(answers::EvalAnswersArgs),
    /// Query latency under concurrency, measured with an HTTP client against a running node.
    BenchLatency(query_bench::LatencyArgs),
    /// What /v1/answer adds to a retrieval with a model that answers at once (the stand-in),
    /// and to the first token when streaming.
    BenchAnswer(answer_bench::AnswerBenchArgs),
    /// Produce-to-visible time in both routes at a steady update rate (needs the pipeline).
    BenchFreshness(freshness_bench::FreshnessArgs),
    /// Hybrid query latency at a steady request rate while the pipeline ingests a corpus, against
    /// the same rate idle, and the ingest's throughput with and without the queries (in-process
    /// pipeline, spawned query node; needs the broker and Milvus).
    BenchLoad(load_bench::LoadBenchArgs),
    /// Benchmark folder sync at scale: `freshet watch` over generated files (first scan, idle
    /// CPU, restart over unchanged files; needs the broker).
    BenchWatch(watch_bench::WatchBenchArgs),
    /// Serve the tests' deterministic OpenAI-compatible chat model (answers from the numbered
    /// passages of the prompt; faults chosen by the model name; docs/testing.md).
    LlmStandin(llm_standin::LlmStandinArgs),
    /// Build the Japanese (IPADIC) dictionary of the BM25 index from MeCab's IPADIC sources
    /// (`[tantivy] ja_dictionary`; deploy/install.sh runs it).
    JaDict(ja_dict::JaDictArgs),
    /// Run canary queries with known answers against a query node on a schedule and serve
    /// their nDCG@k and Recall@k as Prometheus metrics (freshet_canary_*, docs/monitoring.md).
    Canary(canary::CanaryArgs),
    /// The retrieval gate of a re-index: score a candidate generation's node against the
    /// served one's on a BEIR-style set and the canary queries, and write the verdict
    /// `freshet reindex switch --gate` requires (docs/reindex.md).
    Gate(gate::GateArgs),
}

/// What each command's arguments do: run the command with the configuration file given (or
/// none), returning the process's exit code.
trait Run {
    fn run(self, config: Option<&Path>) -> Result<i32>;
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

fn run(cli: Cli) -> Result<i32> {
    let config = cli.config.as_deref();
    match cli.command {
        Command::Status(args) => args.run(config),
        Command::Search(args) => args.run(config),
        Command::BenchParse(args) => args.run(config),
        Command::BenchIngest(args) => args.run(config),
        Command::BenchReplicate(args) => args.run(config),
        Command::BenchSeal(args) => args.run(config),
        Command::BenchIndex(args) => args.run(config),
        Command::BenchBm25(args) => args.run(config),
        Command::Eval(args) => args.run(config),
        Command::EvalAnswers(args) => args.run(config),
        Command::BenchLatency(args) => args.run(config),
        Command::BenchAnswer(args) => args.run(config),
        Command::BenchFreshness(args) => args.run(config),
        Command::BenchLoad(args) => args.run(config),
        Command::BenchWatch(args) => args.run(config),
        Command::LlmStandin(args) => args.run(config),
        Command::JaDict(args) => args.run(config),
        Command::Canary(args) => args.run(config),
        Command::Gate(args) => args.run(config),
    }
}
