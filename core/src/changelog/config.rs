//! `[replication]`: the changelog topic the pipeline writes for query replicas, and the
//! compaction settings it creates the topic with (a replica reads them too: they bound what it
//! may commit and when it must rebuild, `docs/replicas.md`).

use serde::{Deserialize, Serialize};

/// `[replication]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplicationConfig {
    /// The compacted topic of chunk changes; empty: no changelog (no replicas).
    pub changelog_topic: String,
    /// The topic's `min.compaction.lag.ms`: no record younger than this is compacted. A
    /// replica that reads records older than this commits only when it reaches the end of the
    /// log.
    pub min_compaction_lag_ms: u64,
    /// The topic's `delete.retention.ms`: how long a tombstone stays readable. A replica whose
    /// last commit is older than this rebuilds its index from the beginning of the topic.
    pub delete_retention_ms: u64,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            changelog_topic: String::new(),
            min_compaction_lag_ms: 3_600_000,
            delete_retention_ms: 7 * 24 * 3_600_000,
        }
    }
}

impl ReplicationConfig {
    /// Whether the pipeline writes a changelog.
    pub fn enabled(&self) -> bool {
        !self.changelog_topic.is_empty()
    }

    /// Settings that cannot work, with what to do.
    pub fn validate(&self) -> Result<(), String> {
        if !self.enabled() {
            return Ok(());
        }
        if self.min_compaction_lag_ms == 0 {
            return Err(
                "replication.min_compaction_lag_ms must be positive: a replica reading \
                        while the topic is compacted could otherwise commit a state the \
                        pipeline never had"
                    .into(),
            );
        }
        if self.delete_retention_ms < self.min_compaction_lag_ms {
            return Err(format!(
                "replication.delete_retention_ms ({}) must be at least \
                 replication.min_compaction_lag_ms ({})",
                self.delete_retention_ms, self.min_compaction_lag_ms
            ));
        }
        Ok(())
    }

    /// The topic configs the pipeline creates the changelog with, and checks on an existing one.
    pub fn topic_configs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("cleanup.policy", "compact".to_string()),
            (
                "min.compaction.lag.ms",
                self.min_compaction_lag_ms.to_string(),
            ),
            ("delete.retention.ms", self.delete_retention_ms.to_string()),
        ]
    }
}
