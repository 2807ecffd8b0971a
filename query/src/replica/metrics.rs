//! The replica's metrics (`METRICS.md`, `replica_*`), registered by every query node (zero
//! on a node that is not a replica).

use freshet_service::metrics::{Registrar, LATENCY};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    pub op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BootstrapLabels {
    pub reason: &'static str,
}

#[derive(Clone)]
pub struct ReplicaMetrics {
    pub changes: Family<OpLabels, Counter>,
    pub commits: Counter,
    pub bootstraps: Family<BootstrapLabels, Counter>,
    pub lag_records: Gauge,
    pub lag_seconds: Histogram,
    pub read_lag_seconds: Histogram,
    pub commit_seconds: Histogram,
    pub stage_seconds: Histogram,
}

impl ReplicaMetrics {
    pub fn register(r: &mut Registrar) -> ReplicaMetrics {
        ReplicaMetrics {
            changes: r.counters(
                "replica_changes",
                "Chunk changes a replica applied from the changelog (op = upsert, delete)",
            ),
            commits: r.counter(
                "replica_commits",
                "Commits of a replica's index, each at a batch marker of the changelog",
            ),
            bootstraps: r.counters(
                "replica_bootstraps",
                "Indexes a replica built from the beginning of the changelog, by reason (new, \
                 behind: its position is no longer in the topic, stale: it was away longer than \
                 tombstones are kept, other_index: the pipeline's index was made anew)",
            ),
            lag_records: r.gauge(
                "replica_lag_records",
                "Changelog records past the replica's last commit (the high watermark minus its \
                 position)",
            ),
            lag_seconds: r.histogram(
                "replica_lag_seconds",
                "The pipeline's commit durable to the same batch committed and searchable on \
                 the replica",
                LATENCY,
            ),
            read_lag_seconds: r.histogram(
                "replica_read_lag_seconds",
                "The pipeline's commit durable to the batch's marker read by the replica: the \
                 part of replica_lag_seconds before the replica's own work (the marker's \
                 produce and the replica's fetch)",
                LATENCY,
            ),
            commit_seconds: r.histogram(
                "replica_commit_seconds",
                "A replica's commit of its index at a changelog marker (with its fsyncs)",
                LATENCY,
            ),
            stage_seconds: r.histogram(
                "replica_stage_seconds",
                "A replica's build of a batch's segment from its changes, before the batch's \
                 marker arrives (the commit at the marker then only records it)",
                LATENCY,
            ),
        }
    }

    /// Counts chunk changes applied to the index (staged or at a marker).
    pub fn count_changes(&self, upserts: u64, deletes: u64) {
        self.changes
            .get_or_create(&OpLabels { op: "upsert" })
            .inc_by(upserts);
        self.changes
            .get_or_create(&OpLabels { op: "delete" })
            .inc_by(deletes);
    }
}
