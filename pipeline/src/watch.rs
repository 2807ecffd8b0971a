//! `freshet watch DIR…`: folder sync ([`freshet_sources::watch`]) publishing to the configured
//! document topic, refused files to the dead-letter topic, until SIGINT/SIGTERM.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use freshet_kafka::{admin, DlqProducer, DocumentProducer};
use freshet_sources::watch::{watch, Filter, KafkaOutlet, State, Syncer, Tree, WatchSettings};
use freshet_sources::Mapping;

use crate::config::Config;

/// The command line of `freshet watch`.
#[derive(Clone, Debug, clap::Args)]
pub struct WatchArgs {
    /// Directories to keep on the topic (ids are paths relative to the directory; with several,
    /// prefixed by each directory's name).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Only files matching one of these globs (relative paths, e.g. `docs/**/*.md`).
    #[arg(long)]
    pub include: Vec<String>,
    /// Never files matching one of these globs (e.g. `**/drafts/**`).
    #[arg(long)]
    pub exclude: Vec<String>,
    /// Larger files go to the dead-letter topic (6 MiB: an 8 MiB record after base64).
    #[arg(long, default_value_t = 6 << 20)]
    pub max_file_bytes: u64,
    /// The state file (default: `$FRESHET_HOME/watch/<topic and directories>.redb`).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// A burst of events ends after this many quiet milliseconds.
    #[arg(long, default_value_t = 20)]
    pub debounce_ms: u64,
}

pub fn run(config: &Config, args: WatchArgs, stop: &AtomicBool) -> Result<()> {
    let kafka = &config.kafka;
    let filter = Filter::new(&args.include, &args.exclude, args.max_file_bytes)?;
    let tree = Tree::new(&args.dirs, filter)?;
    let roots: Vec<String> = tree
        .roots
        .iter()
        .map(|r| r.dir.display().to_string())
        .collect();
    let identity = format!("topic={} dirs={}", kafka.topic, roots.join(","));
    let state_path = args.state.unwrap_or_else(|| {
        let key = blake3::hash(identity.as_bytes()).to_hex();
        freshet_config::freshet_home()
            .join("watch")
            .join(format!("{}.redb", &key[..16]))
    });
    let state = State::open(&state_path, &identity)?;
    admin::ensure_topic(kafka, &kafka.topic, config.pipeline.topic_partitions)
        .context("creating the document topic")?;
    admin::ensure_topic(kafka, &kafka.dlq_topic, 1).context("creating the dead-letter topic")?;
    let outlet = KafkaOutlet {
        producer: DocumentProducer::new(kafka).context("creating the producer")?,
        dlq: DlqProducer::new(kafka).context("creating the dead-letter producer")?,
        topic: kafka.topic.clone(),
    };
    tracing::info!(
        dirs = %roots.join(", "), topic = %kafka.topic, state = %state_path.display(),
        known = state.len(), "watching"
    );
    let mut syncer = Syncer::new(tree, state, outlet, Mapping::default());
    let settings = WatchSettings {
        debounce: Duration::from_millis(args.debounce_ms),
        ..WatchSettings::default()
    };
    let mut first = true;
    watch(&mut syncer, &settings, stop, |r| {
        if first || r.published() + r.dead_letters > 0 {
            tracing::info!(
                scan = first,
                upserts = r.upserts,
                deletes = r.deletes,
                dead_letters = r.dead_letters,
                unchanged = r.unchanged,
                touched = r.touched,
                "synced"
            );
        }
        first = false;
    })?;
    tracing::info!("stopped");
    Ok(())
}
