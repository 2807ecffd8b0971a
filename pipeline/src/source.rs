//! One worker's source: Kafka records → decoded, prepared document updates for one epoch.
//! Bad records go to the dead-letter topic (durably, before their offset can be committed).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use freshet_kafka::{Failure, PartitionReader};
use freshet_operators::cdc::RecordFormat;
use freshet_operators::chunk::{Chunk, ChunkerConfig, TokenCounter};
use freshet_operators::ingest::{ingest_versioned, Ingested, Versions};
use freshet_operators::limits::RecordLimits;

use crate::dlq::DeadLetters;
use crate::metrics::Metrics;
use crate::sink::plan::RecordRef;

/// What one poll produced.
#[derive(Default)]
pub struct SourceBatch {
    /// Latest update per document id in this batch (`None` deletes).
    pub updates: Vec<(String, Option<Vec<Chunk>>)>,
    /// Where the latest record of each document in `updates` is.
    pub records: Vec<(String, RecordRef)>,
    /// Next offset to read, per partition read in this batch.
    pub next_offsets: BTreeMap<i32, i64>,
    /// Kafka timestamps (ms) of the records, for the source-to-durable latency.
    pub timestamps_ms: Vec<i64>,
    pub records_read: usize,
}

/// Shared, read-only processing settings.
pub struct Processing {
    pub limits: RecordLimits,
    pub chunking: ChunkerConfig,
    pub tokens: Arc<dyn TokenCounter + Send + Sync>,
}

pub struct Source {
    reader: PartitionReader,
    dlq: DeadLetters,
    processing: Arc<Processing>,
    metrics: Metrics,
    /// The latest version of each document this reader prepared: an identical re-send is
    /// recognised before cleaning and chunking.
    versions: Versions,
}

impl Source {
    pub fn new(
        reader: PartitionReader,
        dlq: DeadLetters,
        processing: Arc<Processing>,
        metrics: Metrics,
    ) -> Self {
        Source {
            reader,
            dlq,
            processing,
            metrics,
            versions: Versions::default(),
        }
    }

    pub fn reader(&self) -> &PartitionReader {
        &self.reader
    }

    /// Polls up to `max_records` records, waiting at most `max_wait`. A record that cannot be
    /// indexed goes to the dead-letter topic (acknowledged before this returns) and, when it
    /// names a document, deletes that document (see `freshet_operators::ingest`).
    pub fn poll(&mut self, max_records: usize, max_wait: Duration) -> Result<SourceBatch> {
        let records = self
            .reader
            .poll_batch(max_records, max_wait)
            .context("polling Kafka")?;
        let mut batch = SourceBatch {
            records_read: records.len(),
            ..Default::default()
        };
        type Latest = (usize, RecordRef, Option<Vec<Chunk>>);
        let mut latest: HashMap<String, Latest> = HashMap::new();
        for (seq, record) in records.into_iter().enumerate() {
            batch
                .next_offsets
                .insert(record.partition, record.offset + 1);
            if let Some(ts) = record.timestamp_ms {
                batch.timestamps_ms.push(ts);
            }
            let p = &self.processing;
            let ingested = ingest_versioned(
                &RecordFormat::Freshet,
                record.key.as_deref(),
                record.value.as_deref(),
                &p.limits,
                &p.chunking,
                p.tokens.as_ref(),
                &mut self.versions,
            );
            match &ingested {
                Ingested::Upsert { .. } => Metrics::outcome(&self.metrics.documents, "upsert", 1),
                Ingested::Delete { .. } => Metrics::outcome(&self.metrics.documents, "delete", 1),
                Ingested::Unchanged { .. } => {
                    Metrics::outcome(&self.metrics.documents, "unchanged", 1)
                }
                Ingested::Skipped => Metrics::outcome(&self.metrics.documents, "skipped", 1),
                Ingested::Rejected(r) => {
                    let failure = Failure {
                        class: r.class,
                        stage: r.stage.as_str(),
                        message: &r.message,
                    };
                    self.dlq.send(&record, &failure)?;
                    Metrics::outcome(&self.metrics.documents, "dlq", 1);
                }
            }
            if let Some((id, update)) = ingested.update() {
                let at = RecordRef {
                    partition: record.partition,
                    offset: record.offset,
                };
                latest.insert(id, (seq, at, update));
            }
        }
        let mut updates: Vec<_> = latest.into_iter().collect();
        updates.sort_by_key(|(_, (seq, _, _))| *seq);
        for (id, (_, at, update)) in updates {
            batch.records.push((id.clone(), at));
            batch.updates.push((id, update));
        }
        Ok(batch)
    }
}
