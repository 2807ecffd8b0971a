//! The pipeline's Prometheus metrics (names and meanings: `pipeline/METRICS.md`); served by
//! [`crate::endpoint`].

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    pub outcome: String,
}

/// Buckets (seconds) of the latency histograms.
const LATENCY_BUCKETS: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabel {
    pub sink: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkOp {
    pub sink: String,
    pub op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StallAt {
    pub at: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Repair {
    pub sink: String,
    pub finding: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeadLetter {
    pub class: String,
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Partition {
    pub topic: String,
    pub partition: String,
}

/// Every metric the pipeline exports. Cheap to clone (handles are shared).
#[derive(Clone)]
pub struct Metrics {
    pub registry: Arc<Registry>,
    pub documents: Family<Outcome, Counter>,
    pub chunks: Family<Outcome, Counter>,
    pub embedding_texts: Family<Outcome, Counter>,
    pub embedding_calls: Counter,
    pub sink_ops: Family<SinkOp, Counter>,
    pub dlq_records: Family<DeadLetter, Counter>,
    pub consumer_lag: Family<Partition, Gauge>,
    pub commits: Counter,
    pub durable_epoch: Gauge,
    pub source_to_durable: Histogram,
    pub source_to_read: Histogram,
    pub source_to_sink: Histogram,
    pub embed_batch: Histogram,
    pub sink_write: Family<SinkLabel, Histogram>,
    pub stall_retries: Family<StallAt, Counter>,
    pub stalled: Gauge,
    pub index_repairs: Family<Repair, Counter>,
    pub quarantined_records: Gauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix("freshet_pipeline");
        let documents = Family::<Outcome, Counter>::default();
        r.register(
            "documents",
            "Documents read, by outcome (upsert, delete, unchanged, skipped, dlq)",
            documents.clone(),
        );
        let chunks = Family::<Outcome, Counter>::default();
        r.register(
            "chunks",
            "Chunk deltas applied, by outcome (upsert, delete)",
            chunks.clone(),
        );
        let embedding_texts = Family::<Outcome, Counter>::default();
        r.register(
            "embedding_texts",
            "Texts needing a vector, by outcome (embedded by the model, cache_hit)",
            embedding_texts.clone(),
        );
        let embedding_calls = Counter::default();
        r.register(
            "embedding_calls",
            "Batched calls into the embedding model",
            embedding_calls.clone(),
        );
        let sink_ops = Family::<SinkOp, Counter>::default();
        r.register(
            "sink_writes",
            "Records written to a sink, by sink and op",
            sink_ops.clone(),
        );
        let dlq_records = Family::<DeadLetter, Counter>::default();
        r.register(
            "dlq_records",
            "Records sent to the dead-letter topic, by error class and the stage that refused \
             them (decode, prepare, embed, sink)",
            dlq_records.clone(),
        );
        let consumer_lag = Family::<Partition, Gauge>::default();
        r.register(
            "consumer_lag_records",
            "High watermark minus next offset, per partition",
            consumer_lag.clone(),
        );
        let commits = Counter::default();
        r.register("commits", "Durable commits of both sinks", commits.clone());
        let durable_epoch = Gauge::default();
        r.register(
            "durable_epoch",
            "Newest epoch durably applied to both sinks",
            durable_epoch.clone(),
        );
        let source_to_durable = Histogram::new(LATENCY_BUCKETS);
        r.register(
            "source_to_durable_seconds",
            "Kafka record timestamp to durable in both sinks",
            source_to_durable.clone(),
        );
        let source_to_read = Histogram::new(LATENCY_BUCKETS);
        r.register(
            "source_to_read_seconds",
            "Kafka record timestamp to read by a worker (broker, fetch and batching wait)",
            source_to_read.clone(),
        );
        let source_to_sink = Histogram::new(LATENCY_BUCKETS);
        r.register(
            "source_to_sink_seconds",
            "Kafka record timestamp to the start of the index write that makes it durable \
             (read, dataflow, embedding and waiting for the write before)",
            source_to_sink.clone(),
        );
        let embed_batch = Histogram::new(LATENCY_BUCKETS);
        r.register(
            "embed_batch_seconds",
            "Duration of embedding one batch of chunk texts (cache lookups included)",
            embed_batch.clone(),
        );
        let sink_write = Family::<SinkLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(LATENCY_BUCKETS)
        });
        r.register(
            "sink_write_seconds",
            "Duration of one durable write per sink: milvus (delete + insert), tantivy (apply + commit)",
            sink_write.clone(),
        );
        let stall_retries = Family::<StallAt, Counter>::default();
        r.register(
            "stall_retries",
            "Failed writes tried again, failures not about one record, by where (milvus, \
             tantivy, dlq, embedding_cache)",
            stall_retries.clone(),
        );
        let stalled = Gauge::default();
        r.register(
            "stalled",
            "Writes being retried now (nothing is committed while one is), else 0",
            stalled.clone(),
        );
        let index_repairs = Family::<Repair, Counter>::default();
        r.register(
            "index_repairs",
            "Chunks a commit did not hold as it should, written again, by sink and finding \
             (stale: live but not of its document's version; absent: of the version but not \
             live; doubled: live twice)",
            index_repairs.clone(),
        );
        let quarantined_records = Gauge::default();
        r.register(
            "quarantined_records",
            "Records held at start for having been prepared in crash_loop_limit consecutive \
             crashes: each goes to the dead-letter topic (crash_loop) when it is read",
            quarantined_records.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            documents,
            chunks,
            embedding_texts,
            embedding_calls,
            sink_ops,
            dlq_records,
            consumer_lag,
            commits,
            durable_epoch,
            source_to_durable,
            source_to_read,
            source_to_sink,
            embed_batch,
            sink_write,
            stall_retries,
            stalled,
            index_repairs,
            quarantined_records,
        }
    }

    /// Observes the age now, in seconds, of each Kafka record timestamp (Unix ms) in `h`.
    pub fn observe_ages(h: &Histogram, timestamps_ms: &[i64]) {
        let now = freshet_operators::clock::now_ms() as i64;
        for ts in timestamps_ms {
            h.observe(((now - ts).max(0) as f64) / 1000.0);
        }
    }

    /// Records how long one write to `sink` took.
    pub fn sink_write(&self, sink: &str, seconds: f64) {
        self.sink_write
            .get_or_create(&SinkLabel { sink: sink.into() })
            .observe(seconds);
    }

    /// Counts one failed write at `at` that is tried again.
    pub fn stall_retry(&self, at: &str) {
        self.stall_retries
            .get_or_create(&StallAt { at: at.into() })
            .inc();
    }

    pub fn outcome(family: &Family<Outcome, Counter>, outcome: &str, n: u64) {
        family
            .get_or_create(&Outcome {
                outcome: outcome.to_string(),
            })
            .inc_by(n);
    }

    /// Counts `n` chunk ids of `sink` found wrong after a commit (`finding`) and written again.
    pub fn index_repaired(&self, sink: &str, finding: &str, n: u64) {
        if n > 0 {
            self.index_repairs
                .get_or_create(&Repair {
                    sink: sink.into(),
                    finding: finding.into(),
                })
                .inc_by(n);
        }
    }

    /// Counts one record sent to the dead-letter topic.
    pub fn dead_lettered(&self, class: &str, stage: &str) {
        self.dlq_records
            .get_or_create(&DeadLetter {
                class: class.into(),
                stage: stage.into(),
            })
            .inc();
    }

    pub fn sink(&self, sink: &str, op: &str, n: u64) {
        self.sink_ops
            .get_or_create(&SinkOp {
                sink: sink.into(),
                op: op.into(),
            })
            .inc_by(n);
    }

    /// Text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
