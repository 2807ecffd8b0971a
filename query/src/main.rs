//! `freshet-query`: the query node binary.
//!
//! - `freshet-query [serve] [--config freshet.toml]`: serve the HTTP API (see `/openapi.json`)
//!   until SIGINT/SIGTERM.
//! - `freshet-query mcp --url <node>`: an MCP server on stdin/stdout for an agent runtime to
//!   launch, carrying each tool call to that node's HTTP API with `FRESHET_API_KEY`.
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
    /// Serve MCP (search, fetch, answer) on stdin/stdout, answered by a query node's HTTP API
    /// with the key in FRESHET_API_KEY (unset: a node without auth). Logs go to stderr.
    Mcp {
        /// The query node's base URL, e.g. http://127.0.0.1:8080.
        #[arg(long, env = "FRESHET_QUERY_URL")]
        url: String,
        /// Seconds one tool call may take (an answer waits for the language model).
        #[arg(long, default_value_t = 120)]
        timeout_s: u64,
    },
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
        Command::Mcp { url, timeout_s } => {
            let key = std::env::var("FRESHET_API_KEY").ok();
            let backend = freshet_query::mcp::remote::HttpBackend::new(
                &url,
                key,
                std::time::Duration::from_secs(timeout_s.max(1)),
            )?;
            freshet_service::process::runtime()?
                .block_on(freshet_query::mcp::remote::serve_stdio(backend))
        }
    }
}
