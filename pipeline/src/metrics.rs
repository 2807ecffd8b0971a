//! The pipeline's Prometheus metrics (names and meanings: `pipeline/METRICS.md`); served by
//! [`crate::endpoint`].

use std::sync::Arc;

use freshet_embedding::EmbeddingsMetrics;
use freshet_kafka::ProduceMetrics;
use freshet_milvus::{MilvusMetrics, SealMetrics};
use freshet_service::metrics::{FloatGauge, HistogramFamily, Registrar, PIPELINE_AGE};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::status::Board;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabel {
    pub sink: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabel {
    pub cause: String,
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

/// Where a write is retried (`stall_retries_total{at}`), exported from the start at 0.
pub const STALL_AT: [&str; 5] = [
    "milvus",
    "tantivy",
    "dlq",
    "embedding_cache",
    "embedding_server",
];

/// What a read-back of a tantivy commit finds (`index_repairs_total{finding}`), exported from
/// the start at 0.
pub const REPAIR_FINDINGS: [&str; 3] = ["stale", "absent", "doubled"];

/// A detected language (`corpus_chunks{language}`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LanguageLabel {
    pub language: &'static str,
}

/// Every metric the pipeline exports. Cheap to clone (handles are shared).
#[derive(Clone)]
pub struct Metrics {
    pub registry: Arc<Registry>,
    pub documents: Family<Outcome, Counter>,
    pub chunks: Family<Outcome, Counter>,
    pub embedding_texts: Family<Outcome, Counter>,
    pub embedding_calls: Counter,
    pub embedding_cache_bytes: Gauge,
    pub embedding_cache_entries: Gauge,
    pub embedding_cache_compactions: Counter,
    pub embedding_cache_dropped: Counter,
    pub sink_ops: Family<SinkOp, Counter>,
    pub dlq_records: Family<DeadLetter, Counter>,
    pub consumer_lag: Family<Partition, Gauge>,
    pub commits: Counter,
    pub durable_epoch: Gauge,
    pub source_to_durable: Histogram,
    pub delete_to_gone: Histogram,
    pub delete_receipts: Family<CauseLabel, Counter>,
    pub source_to_read: Histogram,
    pub source_to_sink: Histogram,
    pub embed_batch: Histogram,
    pub model_wait: Histogram,
    pub sink_write: HistogramFamily<SinkLabel>,
    pub tantivy_read_back: Histogram,
    pub stall_retries: Family<StallAt, Counter>,
    pub stalled: Gauge,
    pub index_repairs: Family<Repair, Counter>,
    pub quarantined_records: Gauge,
    /// Leaf chunks the index holds by detected language ([`crate::census`]).
    pub corpus_chunks: Family<LanguageLabel, Gauge>,
    pub corpus_uncovered_share: FloatGauge,
    /// The Milvus connector's calls (`milvus_requests_total`, `milvus_request_seconds`).
    pub milvus: MilvusMetrics,
    /// The sink's flushes by the sealing policy (`milvus_flushes_total`, `milvus_unflushed_rows`).
    pub milvus_seal: SealMetrics,
    /// A remote embedding model's requests (`remote_embedding_…`; `connectors/llm/METRICS.md`).
    pub remote_embedding: EmbeddingsMetrics,
    /// The Kafka connector's dead-letter calls (`kafka_dead_letter_…`).
    pub dead_letters: ProduceMetrics,
    /// The recent values `/v1/status` shows (lag, freshness, health), noted with the metrics.
    pub board: Board,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registrar::new("pipeline");
        let documents = r.counters(
            "documents",
            "Documents read, by outcome (upsert, delete, unchanged, skipped, dlq)",
        );
        let chunks = r.counters(
            "chunks",
            "Chunk deltas applied, by outcome (upsert, delete)",
        );
        let embedding_texts = r.counters(
            "embedding_texts",
            "Texts needing a vector, by outcome (embedded by the model, cache_hit)",
        );
        let embedding_calls =
            r.counter("embedding_calls", "Batched calls into the embedding model");
        let embedding_cache_bytes = r.gauge(
            "embedding_cache_bytes",
            "Size of this process's embedding cache file",
        );
        let embedding_cache_entries = r.gauge(
            "embedding_cache_entries",
            "Vectors in this process's embedding cache",
        );
        let embedding_cache_compactions = r.counter(
            "embedding_cache_compactions",
            "Compactions of the embedding cache to the texts the index holds",
        );
        let embedding_cache_dropped = r.counter(
            "embedding_cache_dropped_entries",
            "Embedding cache entries dropped by compactions (texts no longer indexed)",
        );
        let sink_ops = r.counters("sink_writes", "Records written to a sink, by sink and op");
        let dlq_records = r.counters(
            "dlq_records",
            "Records sent to the dead-letter topic, by error class and the stage that refused \
             them (decode, prepare, embed, sink)",
        );
        let consumer_lag = r.gauges(
            "consumer_lag_records",
            "High watermark minus next offset, per partition",
        );
        let commits = r.counter("commits", "Durable commits of both sinks");
        let durable_epoch = r.gauge(
            "durable_epoch",
            "Newest epoch durably applied to both sinks",
        );
        let source_to_durable = r.histogram(
            "source_to_durable_seconds",
            "Kafka record timestamp to durable in both sinks",
            PIPELINE_AGE,
        );
        let delete_to_gone = r.histogram(
            "delete_to_gone_seconds",
            "Kafka timestamp of a record that removes a document to the durable commit that \
             records its delete receipt",
            PIPELINE_AGE,
        );
        let delete_receipts = r.counters(
            "delete_receipts",
            "delete receipts recorded with the commit that removed their document, by cause",
        );
        let source_to_read = r.histogram(
            "source_to_read_seconds",
            "Kafka record timestamp to read by a worker (the broker and the consumer's fetch wait)",
            PIPELINE_AGE,
        );
        let source_to_sink = r.histogram(
            "source_to_sink_seconds",
            "Kafka record timestamp to the start of the index write that makes it durable \
             (read, dataflow, embedding and waiting for the write before)",
            PIPELINE_AGE,
        );
        let embed_batch = r.histogram(
            "embed_batch_seconds",
            "Duration of embedding one batch of chunk texts (cache lookups included)",
            PIPELINE_AGE,
        );
        let model_wait = r.histogram(
            "embedding_model_wait_seconds",
            "Time a worker waited for its turn on a local model copy it shares with other \
             workers ([pipeline] model_copies below workers), per model call",
            PIPELINE_AGE,
        );
        let sink_write = r.histograms(
            "sink_write_seconds",
            "Duration of one durable write per sink: milvus (delete + insert), tantivy (apply + \
             commit + read-back)",
            PIPELINE_AGE,
        );
        let tantivy_read_back = r.histogram(
            "tantivy_read_back_seconds",
            "Duration of reading one tantivy commit back for the documents of its batch (and \
             repairing it when it differs); part of sink_write_seconds{sink=\"tantivy\"}",
            PIPELINE_AGE,
        );
        let stall_retries = r.counters(
            "stall_retries",
            "Failed writes tried again, failures not about one record, by where (milvus, \
             tantivy, dlq, embedding_cache, embedding_server)",
        );
        let stalled = r.gauge(
            "stalled",
            "Writes being retried now (nothing is committed while one is), else 0",
        );
        let index_repairs = r.counters(
            "index_repairs",
            "Chunks a commit did not hold as it should, written again, by sink and finding \
             (stale: live but not of its document's version; absent: of the version but not \
             live; doubled: live twice)",
        );
        let quarantined_records = r.gauge(
            "quarantined_records",
            "Records held at start for having been prepared in crash_loop_limit consecutive \
             crashes: each goes to the dead-letter topic (crash_loop) when it is read",
        );
        let corpus_chunks = r.gauges(
            "corpus_chunks",
            "Leaf chunks the index holds, by detected language (ISO 639-1, und when it cannot \
             be told)",
        );
        let corpus_uncovered_share = r.float_gauge(
            "corpus_uncovered_share",
            "Share of the leaf chunks in languages the embedding model does not declare",
        );
        // The series of rare events start at 0, so that dashboards show 0 rather than no data
        // and `increase()` in an alert counts the first one (deploy/prometheus/alerts.yml).
        for outcome in ["embedded", "cache_hit"] {
            let _ = embedding_texts.get_or_create(&Outcome {
                outcome: outcome.into(),
            });
        }
        for at in STALL_AT {
            let _ = stall_retries.get_or_create(&StallAt { at: at.into() });
        }
        for finding in REPAIR_FINDINGS {
            let _ = index_repairs.get_or_create(&Repair {
                sink: "tantivy".into(),
                finding: finding.into(),
            });
        }
        for cause in [
            freshet_tantivy::receipts::cause::DELETE,
            freshet_tantivy::receipts::cause::REFUSED,
        ] {
            let _ = delete_receipts.get_or_create(&CauseLabel {
                cause: cause.into(),
            });
        }
        let milvus = MilvusMetrics::register(&mut r);
        let milvus_seal = SealMetrics::register(&mut r);
        let remote_embedding = EmbeddingsMetrics::register(&mut r);
        let dead_letters = ProduceMetrics::register_dead_letters(&mut r);
        Metrics {
            registry: r.finish(),
            documents,
            chunks,
            embedding_texts,
            embedding_calls,
            embedding_cache_bytes,
            embedding_cache_entries,
            embedding_cache_compactions,
            embedding_cache_dropped,
            sink_ops,
            dlq_records,
            consumer_lag,
            commits,
            durable_epoch,
            source_to_durable,
            delete_to_gone,
            delete_receipts,
            source_to_read,
            source_to_sink,
            embed_batch,
            model_wait,
            tantivy_read_back,
            sink_write,
            stall_retries,
            stalled,
            index_repairs,
            quarantined_records,
            corpus_chunks,
            corpus_uncovered_share,
            milvus,
            milvus_seal,
            remote_embedding,
            dead_letters,
            board: Board::default(),
        }
    }

    /// Records made durable now, by their Kafka timestamps (Unix ms): their ages go to
    /// `source_to_durable_seconds` and to the freshness of `/v1/status`.
    pub fn durable(&self, timestamps_ms: &[i64]) {
        let now = freshet_operators::clock::now_ms() as i64;
        let ages: Vec<i64> = timestamps_ms.iter().map(|ts| (now - ts).max(0)).collect();
        for age in &ages {
            self.source_to_durable.observe(*age as f64 / 1000.0);
        }
        self.board.durable(now, ages);
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
        freshet_service::metrics::encode(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_md_lists_exactly_the_registered_metrics() {
        let problems = freshet_service::metrics::spec::check(
            include_str!("../METRICS.md"),
            "freshet_pipeline_",
            &Metrics::new().registry,
        );
        assert!(problems.is_empty(), "pipeline/METRICS.md: {problems:#?}");
    }

    #[test]
    fn rare_event_counters_are_exported_at_zero_from_the_start() {
        let text = Metrics::new().encode();
        for at in STALL_AT {
            let line = format!("freshet_pipeline_stall_retries_total{{at=\"{at}\"}} 0");
            assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
        }
        for outcome in ["embedded", "cache_hit"] {
            let line = format!("freshet_pipeline_embedding_texts_total{{outcome=\"{outcome}\"}} 0");
            assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
        }
        for finding in REPAIR_FINDINGS {
            let line = format!(
                "freshet_pipeline_index_repairs_total{{sink=\"tantivy\",finding=\"{finding}\"}} 0"
            );
            assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
        }
    }
}
