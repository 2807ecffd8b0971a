//! Replica mode (`[replica] enabled`): the node keeps its own tantivy index from the pipeline's
//! changelog topic (`freshet_core::changelog`, `docs/replicas.md`) instead of reading the
//! pipeline's index directory, so that it runs on any machine that reaches the broker and
//! Milvus. It searches the same Milvus collection as the pipeline's node.
//!
//! A thread ([`follow`]) reads the changelog from the position its index's last commit holds
//! ([`freshet_tantivy::CommitPayload::changelog_next`]: exactly once, no consumer group),
//! applies each complete batch and commits it with the source offsets of the batch's marker,
//! which `/v1/index/wait` answers for as on the pipeline's node. The node serves that index
//! directory as it serves the pipeline's: every commit is a state the pipeline committed.
//!
//! At start ([`start`]) an index that the topic can no longer bring up to date is built again
//! from the beginning of the topic: its position is below the topic's first offset or past its
//! end (the topic was made anew), its last commit is older than tombstones are kept, or the
//! changelog comes from another pipeline index. The node serves nothing until such an index has
//! caught up, so it never serves a state older than one it served before.

mod follow;
pub mod metrics;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Result};
use freshet_core::changelog::config::ReplicationConfig;
use freshet_kafka::KafkaConfig;
use serde::{Deserialize, Serialize};

pub use follow::Replica;

/// `[replica]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplicaConfig {
    /// Serve an index kept from the changelog (`[replication] changelog_topic`) instead of
    /// `[tantivy] path`.
    pub enabled: bool,
    /// This replica's own index directory (never the pipeline's). Default `index/replica`
    /// under the local stack's state directory.
    pub path: PathBuf,
    /// tantivy's indexing memory for the replica's writer, in bytes (at least 15 MB).
    pub writer_heap_bytes: usize,
    /// The longest a read of the changelog waits for records, in milliseconds (a record is
    /// handed over as soon as it arrives; this bounds how often the replica checks for stop).
    pub poll_wait_ms: u64,
    /// Margin taken off `[replication] min_compaction_lag_ms` and `delete_retention_ms` for the
    /// clocks of the broker, the pipeline and this machine, in milliseconds.
    pub clock_margin_ms: u64,
    /// Build a batch's segment as soon as its last change is read, while the pipeline commits
    /// it, so that the marker only records the commit (docs/replicas.md). Off for a replica on
    /// cores the pipeline uses: there the build competes with the pipeline's own commit.
    pub stage: bool,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        ReplicaConfig {
            enabled: false,
            path: freshet_config::run_dir().join("index/replica"),
            writer_heap_bytes: 50_000_000,
            poll_wait_ms: 200,
            clock_margin_ms: 60_000,
            stage: true,
        }
    }
}

impl ReplicaConfig {
    /// Settings that cannot work, with what to do.
    pub fn validate(
        &self,
        replication: &ReplicationConfig,
        tantivy_path: &std::path::Path,
        serving_pointer: &std::path::Path,
    ) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        if !replication.enabled() {
            bail!("[replica] enabled needs [replication] changelog_topic: the topic the pipeline publishes its changes to");
        }
        if let Err(e) = replication.validate() {
            bail!(e);
        }
        if self.path.as_os_str().is_empty() {
            bail!("replica.path is empty: name the replica's own index directory");
        }
        if self.path == tantivy_path {
            bail!(
                "replica.path {} is [tantivy] path, the pipeline's index: a replica keeps its own",
                self.path.display()
            );
        }
        if !serving_pointer.as_os_str().is_empty() {
            bail!("[replica] enabled and [query] serving_pointer together: a replica serves the index it keeps, not the pipeline's generations; set one of them");
        }
        if self.writer_heap_bytes < freshet_tantivy::MIN_HEAP_PER_THREAD {
            bail!(
                "replica.writer_heap_bytes must be at least {}",
                freshet_tantivy::MIN_HEAP_PER_THREAD
            );
        }
        if self.clock_margin_ms >= replication.min_compaction_lag_ms {
            bail!("replica.clock_margin_ms must be below replication.min_compaction_lag_ms");
        }
        Ok(())
    }
}

/// Opens (or builds) the replica's index, brings it up to the changelog's end when it was
/// built anew, and starts the thread that follows the changelog. The node serves
/// `config.path` once this returns.
pub fn start(
    kafka: &KafkaConfig,
    replication: &ReplicationConfig,
    config: &ReplicaConfig,
    metrics: metrics::ReplicaMetrics,
) -> Result<Arc<Replica>> {
    follow::Replica::start(kafka, replication, config, metrics)
}
