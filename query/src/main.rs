//! `freshet-query`: the query node binary. `freshet-query [--config freshet.toml]` serves the
//! HTTP API (see `/openapi.json`) until SIGINT/SIGTERM.

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;

use freshet_query::config::Config;

#[derive(Parser)]
#[command(
    name = "freshet-query",
    version,
    about = "Hybrid retrieval over the indexes the freshet pipeline keeps fresh"
)]
struct Cli {
    /// TOML configuration file (the pipeline's file; the [query] section is this node's).
    #[arg(long, env = "FRESHET_CONFIG")]
    config: Option<PathBuf>,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FRESHET_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    if let Err(e) = run(Cli::parse()) {
        eprintln!("freshet-query: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let config = Config::load(cli.config.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let engine = freshet_query::server::engine(config)?;
        freshet_query::server::serve(engine).await
    })
}
