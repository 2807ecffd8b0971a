//! The dead-letter producer ([`DlqProducer`]) and the headers a dead letter carries.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::{check_topic, owned_headers, RawRecord, Renewing};
use crate::{dlq_headers, KafkaConfig, ProduceMetrics, Record, Result};

/// Why a record goes to the dead-letter topic (its `freshet.error.*` headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure<'a> {
    /// Stable error class (`malformed_json`, `field_too_large`, ...).
    pub class: &'a str,
    /// Where it was refused (`decode`, `prepare`, `embed`, `sink`).
    pub stage: &'a str,
    pub message: &'a str,
}

/// Sends records that could not be processed to the dead-letter topic.
pub struct DlqProducer {
    inner: Renewing,
    topic: String,
    metrics: Option<ProduceMetrics>,
}

impl std::fmt::Debug for DlqProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DlqProducer")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl DlqProducer {
    /// A producer for `cfg.dlq_topic`, which should exist ([`crate::admin::ensure_topic`]):
    /// sends to a missing topic fail only after `message.timeout.ms` (60 s).
    pub fn new(cfg: &KafkaConfig) -> Result<Self> {
        check_topic(&cfg.dlq_topic)?;
        Ok(DlqProducer {
            inner: Renewing::new(cfg, "creating dlq producer")?,
            topic: cfg.dlq_topic.clone(),
            metrics: None,
        })
    }

    /// This producer, recording each dead letter's call in `metrics`
    /// ([`ProduceMetrics::register_dead_letters`]).
    pub fn with_metrics(mut self, metrics: ProduceMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The dead-letter topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Produces `original`'s key and value unchanged (a null stays null) to the dead-letter
    /// topic, with the [`dlq_headers`] followed by the original headers, and waits until the
    /// broker has acknowledged it, so that the source offset may be committed afterwards.
    /// Returns where the dead letter was written (partition, offset).
    pub fn send(&self, original: &Record, failure: &Failure<'_>) -> Result<(i32, i64)> {
        let failed_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let owned = owned_headers(&dlq_header_list(original, failure, failed_at_ms));
        let start = Instant::now();
        let res = self.inner.run(|inner| {
            inner.produce_one(
                &self.topic,
                RawRecord {
                    partition: None,
                    key: original.key.as_deref(),
                    value: original.value.as_deref(),
                    headers: Some(owned),
                },
            )
        });
        if let Some(m) = &self.metrics {
            m.record(res.as_ref().map(|_| 1), start.elapsed());
        }
        let (partition, offset) = res?;
        tracing::debug!(
            dlq = %self.topic, partition, offset,
            source_topic = %original.topic, source_partition = original.partition,
            source_offset = original.offset, class = failure.class, stage = failure.stage,
            "record sent to dead-letter topic"
        );
        Ok((partition, offset))
    }

    /// Waits until everything enqueued has been delivered.
    pub fn flush(&self) -> Result<()> {
        self.inner.current()?.flush()
    }
}

/// The headers of a dead-letter record: failure description, then the original headers.
pub(crate) fn dlq_header_list(
    original: &Record,
    failure: &Failure<'_>,
    failed_at_ms: i64,
) -> Vec<(String, Option<Vec<u8>>)> {
    let mut out: Vec<(String, Option<Vec<u8>>)> = vec![
        (dlq_headers::ERROR_CLASS.into(), Some(failure.class.into())),
        (dlq_headers::ERROR_STAGE.into(), Some(failure.stage.into())),
        (
            dlq_headers::ERROR_MESSAGE.into(),
            Some(failure.message.into()),
        ),
        (
            dlq_headers::SOURCE_TOPIC.into(),
            Some(original.topic.clone().into_bytes()),
        ),
        (
            dlq_headers::SOURCE_PARTITION.into(),
            Some(original.partition.to_string().into_bytes()),
        ),
        (
            dlq_headers::SOURCE_OFFSET.into(),
            Some(original.offset.to_string().into_bytes()),
        ),
        (
            dlq_headers::FAILED_AT_MS.into(),
            Some(failed_at_ms.to_string().into_bytes()),
        ),
    ];
    out.extend(original.headers.iter().cloned());
    out
}
