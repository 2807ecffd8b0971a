//! `freshet`: the indexing pipeline binary.
//!
//! - `freshet run [--config freshet.toml]`: consume the document topic and keep Milvus and
//!   tantivy in sync with it (until SIGINT/SIGTERM, then drain and commit).
//! - `freshet publish --jsonl FILE | --dir DIR`: a source connector that publishes documents to
//!   the topic using the document contract.
//! - `freshet watch DIR…`: folder sync, keeping the topic equal to the directories' files (until
//!   SIGINT/SIGTERM).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use freshet_pipeline::config::Config;
use freshet_pipeline::endpoint::{self, Readiness};
use freshet_pipeline::metrics::Metrics;

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
    Run,
    /// Publish documents to the document topic.
    Publish {
        /// A JSONL file of document envelopes or BEIR corpus lines.
        #[arg(long, conflicts_with = "dir")]
        jsonl: Option<PathBuf>,
        /// A directory of .md/.txt/.html/.csv/.docx/.epub files (id = relative path).
        #[arg(long)]
        dir: Option<PathBuf>,
        #[command(flatten)]
        acl: freshet_pipeline::publish::AclArgs,
    },
    /// Keep the document topic in sync with directories: scan, then follow file-system events.
    Watch(freshet_pipeline::watch::WatchArgs),
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
        Command::Run => {
            freshet_pipeline::faults::install()?;
            let stop = stop_flag()?;
            let metrics = Metrics::new();
            let ready = Readiness::new();
            if !config.metrics.listen.is_empty() {
                let addr = endpoint::serve(
                    &config.metrics.listen,
                    metrics.registry.clone(),
                    ready.clone(),
                )?;
                tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
            }
            freshet_pipeline::run::run(config, stop.clone(), metrics, ready)?;
            if stop.load(Ordering::SeqCst) {
                tracing::info!("stopped cleanly");
            }
            Ok(())
        }
        Command::Publish { jsonl, dir, acl } => {
            freshet_pipeline::publish::publish(&config, jsonl, dir, &acl)
        }
        Command::Watch(args) => freshet_pipeline::watch::run(&config, args, &*stop_flag()?),
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
