//! `freshet`: the command line of the indexing pipeline and the publishers.
//!
//! - `freshet run [--config freshet.toml] [--new-index | --adopt-collection]
//!   [--allow-reconcile-deletes]`: consume the document topic and keep Milvus and tantivy in
//!   sync with it (until SIGINT/SIGTERM, then drain and commit).
//! - `freshet publish --jsonl FILE | --dir DIR`: publishes documents to the topic using the
//!   document contract.
//! - `freshet watch DIR…`: folder sync, keeping the topic equal to the directories' files (until
//!   SIGINT/SIGTERM).
//! - `freshet dlq list|show|replay`: the dead letters listed by class, key and time, one shown
//!   whole, and replayed to their source topics, each once.
//! - `freshet reindex switch|rollback|status`: the index generation the query nodes serve
//!   (docs/reindex.md).
//! - `freshet cache compact [--dry-run]`: the embedding cache compacted to the texts the index
//!   holds (refused while a pipeline holds the cache).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use freshet_pipeline::endpoint::{self, Readiness};
use freshet_pipeline::metrics::Metrics;
use freshet_pipeline::preflight::binding::BindFlags;
use freshet_pipeline::preflight::StartFlags;

mod cache;
mod config;
mod dlq;
mod publish;
mod reindex;
mod watch;

use config::Config;

#[derive(Parser)]
#[command(
    name = "freshet",
    version,
    about = "Streaming RAG indexing: Kafka → dataflow → Milvus + tantivy"
)]
struct Cli {
    /// TOML configuration file (every setting optional; FRESHET_<SECTION>_<KEY> overrides).
    #[arg(long, global = true, env = "FRESHET_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the indexing pipeline.
    Run(RunArgs),
    /// Publish documents to the document topic.
    Publish {
        /// A JSONL file of document envelopes or BEIR corpus lines.
        #[arg(long, conflicts_with = "dir")]
        jsonl: Option<PathBuf>,
        /// A directory of .md/.txt/.html/.csv/.docx/.epub files (id = relative path).
        #[arg(long)]
        dir: Option<PathBuf>,
        #[command(flatten)]
        acl: publish::AclArgs,
    },
    /// Keep the document topic in sync with directories: scan, then follow file-system events.
    Watch(watch::WatchArgs),
    /// The dead-letter topic: list, show and replay the records the pipeline refused.
    Dlq(dlq::DlqArgs),
    /// The index generation the query nodes serve: switch, roll back, status.
    Reindex(reindex::ReindexArgs),
    /// The embedding cache: compact it to the texts the index holds.
    Cache(cache::CacheArgs),
}

/// The choices a start can make that the configuration never makes (docs/faults.md, "Wrong
/// paths and foreign collections").
#[derive(clap::Args)]
struct RunArgs {
    /// Start a new tantivy index on purpose: read every topic from the beginning and take the
    /// Milvus collection over (its vectors are replaced). Refused when the index is not new.
    #[arg(long)]
    new_index: bool,
    /// Make the Milvus collection this existing index's although it belongs to another index
    /// (or to none), and reconcile it with the index whatever that deletes.
    #[arg(long, conflicts_with = "new_index")]
    adopt_collection: bool,
    /// Let this start's reconcile delete more of the collection than
    /// `[pipeline] reconcile_max_delete_share` allows.
    #[arg(long)]
    allow_reconcile_deletes: bool,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FRESHET_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log file or a pipe gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Err(e) = real_main() {
        eprintln!("freshet: error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    let config = Config::load(cli.config.as_deref())?;
    match cli.command {
        Command::Run(args) => {
            let flags = StartFlags {
                bind: BindFlags {
                    new_index: args.new_index,
                    adopt_collection: args.adopt_collection,
                },
                allow_reconcile_deletes: args.allow_reconcile_deletes,
            };
            freshet_pipeline::faults::install()?;
            let stop = stop_flag()?;
            let metrics = Metrics::new();
            let ready = Readiness::new();
            if !config.pipeline.metrics.listen.is_empty() {
                let env = |name: &str| std::env::var(name).ok();
                let status = endpoint::StatusSource {
                    board: metrics.board.clone(),
                    kafka: config.pipeline.kafka.clone(),
                    keys: config.pipeline.metrics.status_keys(&env)?,
                };
                let addr = endpoint::serve(
                    &config.pipeline.metrics.listen,
                    metrics.registry.clone(),
                    ready.clone(),
                    Some(status),
                )?;
                tracing::info!(%addr, "serving /metrics, /healthz, /readyz and /v1/status");
            }
            freshet_pipeline::run::run(config.pipeline, flags, stop.clone(), metrics, ready)?;
            if stop.load(Ordering::SeqCst) {
                tracing::info!("stopped cleanly");
            }
            Ok(())
        }
        Command::Publish { jsonl, dir, acl } => publish::publish(&config, jsonl, dir, &acl),
        Command::Watch(args) => watch::run(&config, args, &*stop_flag()?),
        Command::Dlq(args) => dlq::run(&config, args),
        Command::Reindex(args) => reindex::run(&config, args),
        Command::Cache(args) => cache::run(&config, args),
    }
}

/// A flag set by SIGINT or SIGTERM.
fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    Ok(stop)
}
