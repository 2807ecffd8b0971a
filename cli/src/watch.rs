//! `freshet watch DIR…`: folder sync ([`freshet_publishers::watch`]) publishing to the configured
//! document topic, refused files to the dead-letter topic, until SIGINT/SIGTERM; with
//! `--metrics-listen`, `/metrics` (`freshet_watch_*`, listed in `docs/watch.md`), `/healthz` and
//! `/readyz` (ready once the start scan is published).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use freshet_service::metrics::{FloatGauge, Registrar, LATENCY};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use anyhow::{Context, Result};
use freshet_kafka::{admin, DlqProducer, ProduceMetrics, TopicProducer};
use freshet_publishers::watch::{
    watch, Filter, KafkaOutlet, State, SyncReport, Syncer, Tree, WatchSettings,
};

use freshet_pipeline::endpoint::{self, Readiness};

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
    /// The state file (default: `watch/<topic and directories>.redb` under the local stack's
    /// state directory, `$FRESHET_RUN_DIR` or `$FRESHET_HOME/run`).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// A burst of events ends after this many quiet milliseconds.
    #[arg(long, default_value_t = 20)]
    pub debounce_ms: u64,
    /// `host:port` serving `/metrics`, `/healthz` and `/readyz` (off by default: the
    /// pipeline's endpoint has `[metrics] listen`).
    #[arg(long)]
    pub metrics_listen: Option<String>,
    #[command(flatten)]
    pub acl: crate::publish::AclArgs,
}

/// The watcher's metrics (`freshet_watch_*`).
struct WatchMetrics {
    registry: Arc<Registry>,
    records: Family<Vec<(String, String)>, Counter>,
    dead_letters: Counter,
    files: Family<Vec<(String, String)>, Counter>,
    syncs: Family<Vec<(String, String)>, Counter>,
    sync_seconds: Histogram,
    last_sync: FloatGauge,
    /// The Kafka connector's produce calls (`kafka_produce_…`), handed to the producer.
    kafka: ProduceMetrics,
}

impl WatchMetrics {
    fn new() -> Self {
        let mut r = Registrar::new("watch");
        let records = r.counters("records", "Records published, by op (upsert, delete)");
        let dead_letters = r.counter("dead_letters", "Files sent to the dead-letter topic");
        let files = r.counters(
            "files_checked",
            "Files looked at by syncs, by result (unchanged, touched: same bytes, new times)",
        );
        let syncs = r.counters("syncs", "Syncs, by kind (scan: every root; events)");
        let sync_seconds = r.histogram(
            "sync_seconds",
            "One sync: reading the changed files, producing, waiting for the acks, the state",
            LATENCY,
        );
        let last_sync = r.float_gauge(
            "last_sync_timestamp_seconds",
            "When the last sync finished (Unix time)",
        );
        let kafka = ProduceMetrics::register(&mut r);
        WatchMetrics {
            registry: r.finish(),
            records,
            dead_letters,
            files,
            syncs,
            sync_seconds,
            last_sync,
            kafka,
        }
    }

    fn observe(&self, r: &SyncReport) {
        let label = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        self.records
            .get_or_create(&label("op", "upsert"))
            .inc_by(r.upserts as u64);
        self.records
            .get_or_create(&label("op", "delete"))
            .inc_by(r.deletes as u64);
        self.dead_letters.inc_by(r.dead_letters as u64);
        let files = &self.files;
        files
            .get_or_create(&label("result", "unchanged"))
            .inc_by(r.unchanged as u64);
        files
            .get_or_create(&label("result", "touched"))
            .inc_by(r.touched as u64);
        let kind = if r.full { "scan" } else { "events" };
        self.syncs.get_or_create(&label("kind", kind)).inc();
        self.sync_seconds.observe(r.elapsed.as_secs_f64());
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.last_sync.set(now.as_secs_f64());
    }
}

pub fn run(config: &Config, args: WatchArgs, stop: &AtomicBool) -> Result<()> {
    let kafka = &config.pipeline.kafka;
    let filter = Filter::new(&args.include, &args.exclude, args.max_file_bytes)?;
    let mapping = crate::publish::mapping(config, &args.acl)?;
    let mut tree = Tree::new(&args.dirs, filter)?;
    tree.follow_symlinks_outside_roots = config.files.follow_symlinks_outside_roots;
    let roots: Vec<String> = tree
        .roots
        .iter()
        .map(|r| r.dir.display().to_string())
        .collect();
    let identity = format!("topic={} dirs={}", kafka.topic, roots.join(","));
    let state_path = args.state.unwrap_or_else(|| {
        let key = blake3::hash(identity.as_bytes()).to_hex();
        freshet_config::run_dir()
            .join("watch")
            .join(format!("{}.redb", &key[..16]))
    });
    let state = State::open(&state_path, &identity)?;
    admin::ensure_topic(
        kafka,
        &kafka.topic,
        config.pipeline.pipeline.topic_partitions,
    )
    .context("creating the document topic")?;
    admin::ensure_topic(kafka, &kafka.dlq_topic, 1).context("creating the dead-letter topic")?;
    let metrics = WatchMetrics::new();
    let outlet = KafkaOutlet {
        producer: TopicProducer::new(kafka, &kafka.topic)
            .context("creating the producer")?
            .with_metrics(metrics.kafka.clone()),
        dlq: DlqProducer::new(kafka).context("creating the dead-letter producer")?,
    };
    tracing::info!(
        dirs = %roots.join(", "), topic = %kafka.topic, state = %state_path.display(),
        known = state.len(), "watching"
    );
    let mut syncer = Syncer::new(tree, state, outlet, mapping);
    let settings = WatchSettings {
        debounce: Duration::from_millis(args.debounce_ms),
        ..WatchSettings::default()
    };
    let ready = Readiness::new();
    ready.step("publishing what changed since the last run");
    if let Some(listen) = &args.metrics_listen {
        let addr = endpoint::serve(listen, metrics.registry.clone(), ready.clone(), None)?;
        tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    }
    let mut first = true;
    watch(&mut syncer, &settings, stop, |r| {
        metrics.observe(r);
        if first {
            ready.running();
        }
        if r.full || r.published() + r.dead_letters > 0 {
            tracing::info!(
                scan = r.full,
                seconds = r.elapsed.as_secs_f64(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_md_lists_exactly_the_registered_metrics() {
        let problems = freshet_service::metrics::spec::check(
            include_str!("../../docs/watch.md"),
            "freshet_watch_",
            &WatchMetrics::new().registry,
        );
        assert!(problems.is_empty(), "docs/watch.md: {problems:#?}");
    }
}
