//! Producing to the document topic: [`Publisher`] is what the HTTP handlers call (a trait, so
//! that the handlers are tested without a broker), [`KafkaPublisher`] the real one over
//! [`DocumentProducer`] (`acks=all`, idempotent: a call returns only once the broker has
//! acknowledged every record). The blocking calls run on tokio's blocking pool, bounded by a
//! deadline a little past the producer's own timeout, so a request never waits forever and never
//! succeeds without an acknowledgement.

use std::sync::Arc;
use std::time::Duration;

use freshet_kafka::{admin, DocumentProducer, KafkaConfig};

use crate::decode::Outgoing;

/// Where a record was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub partition: i32,
    pub offset: i64,
}

/// Why records were not (all) acknowledged: the broker is unreachable, timed out or refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProduceError(pub String);

/// Produces keyed records to one topic and waits for their acknowledgements (blocking).
pub trait Publisher: Send + Sync + 'static {
    /// The topic records go to.
    fn topic(&self) -> &str;
    /// Produces `records` in order (a `None` value is a tombstone); returns where each went.
    fn send_all(&self, records: &[Outgoing]) -> Result<Vec<Placed>, ProduceError>;
    /// Whether the broker answers and knows the topic.
    fn ready(&self) -> Result<(), String>;
}

/// The real publisher.
pub struct KafkaPublisher {
    producer: DocumentProducer,
    kafka: KafkaConfig,
    ready_timeout: Duration,
}

impl KafkaPublisher {
    /// A producer for `kafka.topic` (no broker round trip: librdkafka connects lazily).
    pub fn new(kafka: KafkaConfig, ready_timeout: Duration) -> anyhow::Result<Self> {
        Ok(KafkaPublisher {
            producer: DocumentProducer::new(&kafka)?,
            kafka,
            ready_timeout,
        })
    }
}

impl Publisher for KafkaPublisher {
    fn topic(&self) -> &str {
        &self.kafka.topic
    }

    fn send_all(&self, records: &[Outgoing]) -> Result<Vec<Placed>, ProduceError> {
        let placed = self
            .producer
            .send_placed(
                &self.kafka.topic,
                records
                    .iter()
                    .map(|r| (r.id.clone().into_bytes(), r.value.clone())),
            )
            .map_err(|e| ProduceError(e.to_string()))?;
        if placed.len() != records.len() {
            return Err(ProduceError(format!(
                "{} of {} records acknowledged",
                placed.len(),
                records.len()
            )));
        }
        Ok(placed
            .into_iter()
            .map(|(partition, offset)| Placed { partition, offset })
            .collect())
    }

    fn ready(&self) -> Result<(), String> {
        admin::partitions_with_timeout(&self.kafka, &self.kafka.topic, self.ready_timeout)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// [`Publisher::send_all`] off the async runtime, failing after `deadline`.
pub async fn send_all(
    publisher: Arc<dyn Publisher>,
    records: Vec<Outgoing>,
    deadline: Duration,
) -> Result<Vec<Placed>, ProduceError> {
    let task = tokio::task::spawn_blocking(move || publisher.send_all(&records));
    match tokio::time::timeout(deadline, task).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(ProduceError(format!("producer task failed: {e}"))),
        Err(_) => Err(ProduceError(format!(
            "no acknowledgement from the broker within {} ms",
            deadline.as_millis()
        ))),
    }
}

/// [`Publisher::ready`] off the async runtime.
pub async fn ready(publisher: Arc<dyn Publisher>, deadline: Duration) -> Result<(), String> {
    let task = tokio::task::spawn_blocking(move || publisher.ready());
    match tokio::time::timeout(deadline, task).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(format!("readiness task failed: {e}")),
        Err(_) => Err(format!(
            "the broker did not answer within {} ms",
            deadline.as_millis()
        )),
    }
}
