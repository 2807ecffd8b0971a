//! Producing to the document topic: [`Publisher`] is what the HTTP handlers call (the shared
//! [`Produce`] and a readiness check, a trait so that the handlers are tested without a
//! broker), [`KafkaPublisher`] the real one over [`TopicProducer`] (`acks=all`, idempotent: a
//! call returns only once the broker has acknowledged every record). The blocking calls run on
//! tokio's blocking pool, bounded by a deadline a little past the producer's own timeout, so a
//! request never waits forever and never succeeds without an acknowledgement.

use std::sync::Arc;
use std::time::Duration;

use freshet_kafka::{
    admin, DocumentRecord, KafkaConfig, Placed, Produce, ProduceMetrics, TopicProducer,
};

/// Why records were not (all) acknowledged: the broker is unreachable, timed out or refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProduceError(pub String);

/// What the handlers produce through: [`Produce`] (keyed records to one topic, answered with
/// where each went once acknowledged; blocking) and whether the broker is ready.
pub trait Publisher: Produce + Send + Sync + 'static {
    /// Whether the broker answers and knows the topic.
    fn ready(&self) -> Result<(), String>;
}

/// The real publisher.
pub struct KafkaPublisher {
    producer: TopicProducer,
    kafka: KafkaConfig,
    ready_timeout: Duration,
}

impl KafkaPublisher {
    /// A producer for `kafka.topic` (no broker round trip: librdkafka connects lazily).
    /// Its produce calls are recorded in `metrics`.
    pub fn new(
        kafka: KafkaConfig,
        ready_timeout: Duration,
        metrics: ProduceMetrics,
    ) -> anyhow::Result<Self> {
        Ok(KafkaPublisher {
            producer: TopicProducer::new(&kafka, &kafka.topic)?.with_metrics(metrics),
            kafka,
            ready_timeout,
        })
    }
}

impl Produce for KafkaPublisher {
    fn topic(&self) -> &str {
        self.producer.topic()
    }

    fn produce(&self, records: &[DocumentRecord]) -> freshet_kafka::Result<Vec<Placed>> {
        self.producer.produce(records)
    }
}

impl Publisher for KafkaPublisher {
    fn ready(&self) -> Result<(), String> {
        admin::partitions_with_timeout(&self.kafka, &self.kafka.topic, self.ready_timeout)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// [`Produce::produce`] off the async runtime, failing after `deadline`.
pub async fn send_all(
    publisher: Arc<dyn Publisher>,
    records: Vec<DocumentRecord>,
    deadline: Duration,
) -> Result<Vec<Placed>, ProduceError> {
    let task = tokio::task::spawn_blocking(move || {
        publisher
            .produce(&records)
            .map_err(|e| ProduceError(e.to_string()))
    });
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
