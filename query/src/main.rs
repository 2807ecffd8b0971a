//! `freshet-query`: the query node binary.
//!
//! - `freshet-query [serve] [--config freshet.toml]`: serve the HTTP API (see `/openapi.json`)
//!   until SIGINT/SIGTERM.
//!
//! Evaluation and benchmarks of the node are `freshet-tools` commands (`eval`, `bench-latency`,
//! `bench-freshness`).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

use freshet_query::config::Config;

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
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
