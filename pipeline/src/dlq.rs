//! Dead letters: a record that cannot be indexed goes to the dead-letter topic, logged and
//! counted (`dlq_records_total{class, stage}`), acknowledged by the broker before this returns,
//! so that its offset may be committed afterwards.

use std::sync::Arc;

use anyhow::{Context, Result};
use freshet_kafka::{DlqProducer, Failure, Record};

use crate::metrics::Metrics;

/// The dead-letter topic's producer with the pipeline's metrics; cheap to clone.
#[derive(Clone)]
pub struct DeadLetters {
    producer: Arc<DlqProducer>,
    metrics: Metrics,
}

impl DeadLetters {
    pub fn new(producer: DlqProducer, metrics: Metrics) -> Self {
        DeadLetters {
            producer: Arc::new(producer),
            metrics,
        }
    }

    /// Sends `record` with the `failure` headers and waits for the broker's acknowledgement.
    pub fn send(&self, record: &Record, failure: &Failure<'_>) -> Result<()> {
        tracing::warn!(
            partition = record.partition,
            offset = record.offset,
            class = failure.class,
            stage = failure.stage,
            message = failure.message,
            "record to DLQ"
        );
        self.producer.send(record, failure).with_context(|| {
            format!(
                "writing partition {} offset {} to the DLQ",
                record.partition, record.offset
            )
        })?;
        self.metrics.dead_lettered(failure.class, failure.stage);
        Ok(())
    }
}
