//! One worker's source: Kafka records → decoded, prepared document updates for one epoch.
//! Bad records go to the dead-letter topic (durably, before their offset can be committed).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use freshet_kafka::{DlqProducer, PartitionReader, Record};
use freshet_operators::chunk::{Chunk, ChunkerConfig, TokenCounter};
use freshet_operators::document::Change;
use freshet_operators::envelope::{decode, DecodeLimits};
use freshet_operators::prepare::prepare;

use crate::metrics::Metrics;

/// A document id and its new chunks (`None`: deleted).
type Update = (String, Option<Vec<Chunk>>);
/// Why a record was rejected: error class (the DLQ header) and message.
type Rejected = (&'static str, String);

/// What one poll produced.
#[derive(Default)]
pub struct SourceBatch {
    /// Latest update per document id in this batch (`None` deletes).
    pub updates: Vec<(String, Option<Vec<Chunk>>)>,
    /// Next offset to read, per partition read in this batch.
    pub next_offsets: BTreeMap<i32, i64>,
    /// Kafka timestamps (ms) of the records, for the source-to-durable latency.
    pub timestamps_ms: Vec<i64>,
    pub records: usize,
}

/// Shared, read-only processing settings.
pub struct Processing {
    pub limits: DecodeLimits,
    pub chunking: ChunkerConfig,
    pub tokens: Arc<dyn TokenCounter + Send + Sync>,
}

pub struct Source {
    reader: PartitionReader,
    dlq: Arc<DlqProducer>,
    processing: Arc<Processing>,
    metrics: Metrics,
}

impl Source {
    pub fn new(
        reader: PartitionReader,
        dlq: Arc<DlqProducer>,
        processing: Arc<Processing>,
        metrics: Metrics,
    ) -> Self {
        Source {
            reader,
            dlq,
            processing,
            metrics,
        }
    }

    pub fn reader(&self) -> &PartitionReader {
        &self.reader
    }

    /// Polls up to `max_records` records, waiting at most `max_wait`.
    pub fn poll(&mut self, max_records: usize, max_wait: Duration) -> Result<SourceBatch> {
        let records = self
            .reader
            .poll_batch(max_records, max_wait)
            .context("polling Kafka")?;
        let mut batch = SourceBatch {
            records: records.len(),
            ..Default::default()
        };
        let mut latest: HashMap<String, (usize, Option<Vec<Chunk>>)> = HashMap::new();
        for (seq, record) in records.into_iter().enumerate() {
            batch
                .next_offsets
                .insert(record.partition, record.offset + 1);
            if let Some(ts) = record.timestamp_ms {
                batch.timestamps_ms.push(ts);
            }
            match self.process(&record) {
                Ok((id, update)) => {
                    latest.insert(id, (seq, update));
                }
                Err((class, message)) => self.dead_letter(&record, class, &message)?,
            }
        }
        let mut updates: Vec<_> = latest.into_iter().collect();
        updates.sort_by_key(|(_, (seq, _))| *seq);
        batch.updates = updates.into_iter().map(|(id, (_, u))| (id, u)).collect();
        Ok(batch)
    }

    /// Decodes and prepares one record.
    fn process(&self, record: &Record) -> Result<Update, Rejected> {
        let change = decode(
            record.key.as_deref(),
            record.value.as_deref(),
            &self.processing.limits,
        )
        .map_err(|e| (e.class(), e.to_string()))?;
        match change {
            Change::Delete { id } => {
                Metrics::outcome(&self.metrics.documents, "delete", 1);
                Ok((id, None))
            }
            Change::Upsert(doc) => {
                let id = doc.id.clone();
                let chunks = prepare(
                    doc,
                    &self.processing.chunking,
                    self.processing.tokens.as_ref(),
                )
                .map_err(|e| (e.class(), e.to_string()))?;
                Metrics::outcome(&self.metrics.documents, "upsert", 1);
                Ok((id, Some(chunks)))
            }
        }
    }

    fn dead_letter(&self, record: &Record, class: &str, message: &str) -> Result<()> {
        tracing::warn!(
            partition = record.partition,
            offset = record.offset,
            class,
            message,
            "record to DLQ"
        );
        self.dlq.send(record, class, message).with_context(|| {
            format!(
                "writing partition {} offset {} to the DLQ",
                record.partition, record.offset
            )
        })?;
        Metrics::outcome(&self.metrics.documents, "dlq", 1);
        self.metrics
            .dlq_records
            .get_or_create(&crate::metrics::ErrorClass {
                class: class.to_string(),
            })
            .inc();
        Ok(())
    }
}
