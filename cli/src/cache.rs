//! `freshet cache compact [--dry-run]`: the embedding cache compacted to the texts the index
//! holds, by `freshet_pipeline::cache::compact_offline` (docs/models.md, "The embedding
//! cache"). Refused while a pipeline holds the cache.

use anyhow::Result;
use clap::Subcommand;

use crate::config::Config;

#[derive(clap::Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    command: CacheCommand,
}

#[derive(Subcommand)]
enum CacheCommand {
    /// Keep only the entries of texts the index holds under the configured model: a new file
    /// written beside the cache, synced and renamed over it. Stop the pipeline first.
    Compact {
        /// Report what would be kept and dropped; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

pub fn run(config: &Config, args: CacheArgs) -> Result<()> {
    match args.command {
        CacheCommand::Compact { dry_run } => {
            let report = freshet_pipeline::cache::compact_offline(&config.pipeline, dry_run)?;
            println!("{report}");
            Ok(())
        }
    }
}
