//! What every publisher of documents hands the producer and gets back: [`DocumentRecord`] (one
//! record of the document topic), [`Placed`] (where the broker wrote it) and [`Produce`], "produce
//! these, in order, and tell me where each landed", which the folder sync, `freshet publish` and
//! the ingest service share. [`TopicProducer`] is the real one, over the [`DocumentProducer`].

use std::fmt;
use std::time::Instant;

use crate::{DocumentProducer, Error, KafkaConfig, ProduceMetrics, Result};

/// Upsert or delete: what one record asks of the pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Upsert,
    Delete,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Upsert => "upsert",
            Op::Delete => "delete",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One record to produce to the document topic: key = the document id, value = its envelope
/// (`None`: a tombstone). A delete may also be an envelope (`{"op":"delete",…}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentRecord {
    pub id: String,
    pub op: Op,
    pub value: Option<Vec<u8>>,
}

impl DocumentRecord {
    /// The upsert of document `id` with its envelope.
    pub fn upsert(id: impl Into<String>, envelope: Vec<u8>) -> Self {
        DocumentRecord {
            id: id.into(),
            op: Op::Upsert,
            value: Some(envelope),
        }
    }

    /// The tombstone of document `id` (a null value).
    pub fn tombstone(id: impl Into<String>) -> Self {
        DocumentRecord {
            id: id.into(),
            op: Op::Delete,
            value: None,
        }
    }

    /// The record's key and value as the producer sends them.
    fn key_value(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        (self.id.clone().into_bytes(), self.value.clone())
    }
}

/// Where the broker wrote a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub partition: i32,
    pub offset: i64,
}

/// Produces document records to one topic and says where each one landed (blocking).
pub trait Produce {
    /// The topic the records go to.
    fn topic(&self) -> &str;
    /// Produces `records` in order and returns where each went, in input order, once the
    /// broker has acknowledged every one; an error when any was not acknowledged (the others
    /// may have been written).
    fn produce(&self, records: &[DocumentRecord]) -> Result<Vec<Placed>>;
}

/// [`Produce`] over the idempotent, `acks=all` [`DocumentProducer`].
pub struct TopicProducer {
    producer: DocumentProducer,
    topic: String,
    metrics: Option<ProduceMetrics>,
}

impl TopicProducer {
    /// A producer for `topic` (no broker round trip: librdkafka connects lazily).
    pub fn new(cfg: &KafkaConfig, topic: &str) -> Result<Self> {
        Ok(TopicProducer {
            producer: DocumentProducer::new(cfg)?,
            topic: topic.to_owned(),
            metrics: None,
        })
    }

    /// This producer, recording its produce calls in `metrics`.
    pub fn with_metrics(mut self, metrics: ProduceMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn produce_unrecorded(&self, records: &[DocumentRecord]) -> Result<Vec<Placed>> {
        let placed = self
            .producer
            .send_placed(&self.topic, records.iter().map(DocumentRecord::key_value))?;
        if placed.len() != records.len() {
            return Err(Error::Fatal(format!(
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
}

impl Produce for TopicProducer {
    fn topic(&self) -> &str {
        &self.topic
    }

    fn produce(&self, records: &[DocumentRecord]) -> Result<Vec<Placed>> {
        let start = Instant::now();
        let res = self.produce_unrecorded(records);
        if let Some(m) = &self.metrics {
            m.record(res.as_ref().map(Vec::len), start.elapsed());
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_say_what_they_ask() {
        let up = DocumentRecord::upsert("a", b"{}".to_vec());
        assert_eq!((up.op, up.op.as_str()), (Op::Upsert, "upsert"));
        assert_eq!(up.key_value(), (b"a".to_vec(), Some(b"{}".to_vec())));
        let gone = DocumentRecord::tombstone("a");
        assert_eq!(gone.op.to_string(), "delete");
        assert_eq!(gone.key_value(), (b"a".to_vec(), None));
    }

    /// A producer whose broker never answers: its call fails once the message timeout passes,
    /// and counts as an error; a producer without metrics records nothing.
    #[test]
    fn a_failed_produce_counts_as_an_error() {
        let mut cfg = KafkaConfig {
            // Nothing listens on port 1.
            brokers: "127.0.0.1:1".into(),
            ..KafkaConfig::default()
        };
        cfg.client_properties
            .insert("message.timeout.ms".into(), "300".into());
        let mut r = freshet_metrics::Registrar::new("demo");
        let m = ProduceMetrics::register(&mut r);
        let registry = r.finish();
        let p = TopicProducer::new(&cfg, "docs").unwrap().with_metrics(m);
        let res = p.produce(&[DocumentRecord::upsert("a", b"{}".to_vec())]);
        assert!(matches!(res, Err(Error::Delivery { .. })), "{res:?}");
        let text = freshet_metrics::encode(&registry);
        for line in [
            r#"freshet_demo_kafka_produce_calls_total{outcome="error"} 1"#,
            "freshet_demo_kafka_produced_records_total 0",
            "freshet_demo_kafka_produce_seconds_count 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
