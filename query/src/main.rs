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
    freshet_service::process::main("freshet-query", || run(Cli::parse()));
}

fn run(cli: Cli) -> Result<()> {
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let config = Config::load(cli.config.as_deref())?;
            freshet_service::process::runtime()?.block_on(async {
                let node = freshet_query::server::node(config)?;
                freshet_query::server::serve(node).await
            })
        }
    }
}
