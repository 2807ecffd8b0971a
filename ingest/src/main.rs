//! `freshet-ingest`: the ingest service binary.
//!
//! - `freshet-ingest [serve] [--config freshet.toml]`: serve the HTTP API (see `/openapi.json`
//!   and docs/ingest.md) until SIGINT/SIGTERM.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

use freshet_ingest::config::Config;

#[derive(Parser)]
#[command(
    name = "freshet-ingest",
    version,
    about = "Documents over HTTP onto the topic the freshet pipeline indexes"
)]
struct Cli {
    /// TOML configuration file (the pipeline's file; the [ingest] section is this service's).
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
    freshet_service::process::main("freshet-ingest", || run(Cli::parse()));
}

fn run(cli: Cli) -> Result<()> {
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let config = Config::load(cli.config.as_deref())?;
            freshet_service::process::runtime()?.block_on(async {
                let app = freshet_ingest::server::app(config)?;
                freshet_ingest::server::serve(app).await
            })
        }
    }
}
