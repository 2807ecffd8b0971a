//! The dead-letter topic's service: each refused record of a batch ([`DeadLetter`], built from
//! the batch) written once, before the commit that moves the offsets past it, by
//! [`DeadLetters`], which keeps the bookkeeping that makes it once ([`crate::dlq`]): the dead
//! letters written since the last commit, and how far the topic reaches.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use freshet_kafka::{DlqProducer, Failure, KafkaConfig, PartitionReader, Record};
use freshet_operators::intake::Stage;

use super::plan::{Batch, Offsets, RecordRef, TopicPartition};
use super::refusals::{Refusals, EMBED_FAILED};
use super::Service;
use crate::dlq::{Refused, Scan, Sent};
use crate::metrics::Metrics;
use crate::stall::Stall;

/// How long reading a refused record back from the topic may take.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(30);

/// A record to dead-letter.
pub enum DeadLetter<'a> {
    /// A record refused before the sink, as it was read.
    Refused(&'a Refused),
    /// The record of a refused document version, read back from its topic by offset; a
    /// stand-in keyed by the document id when the topic no longer holds it (or `record` is
    /// unknown).
    Version {
        doc_id: &'a str,
        record: Option<RecordRef>,
        failure: Failure<'a>,
    },
}

impl<'a> DeadLetter<'a> {
    /// The dead letters of `batch`, in the order they are written: the records refused before
    /// the sink (but those below `durable_before`, the offsets durable before the batch: a
    /// process resuming from older group offsets read them again, and they were written before
    /// the commit that covered them), the records whose text the embedder refused, then the
    /// versions refused at the sink.
    pub fn build(
        batch: &'a Batch,
        refused: &'a Refusals,
        durable_before: &Offsets,
    ) -> Vec<DeadLetter<'a>> {
        let before_sink = batch
            .refused
            .iter()
            .filter(|r| {
                let tp = TopicPartition {
                    topic: r.at.topic,
                    partition: r.at.partition,
                };
                durable_before
                    .get(&tp)
                    .is_none_or(|next| r.at.offset >= *next)
            })
            .map(DeadLetter::Refused);
        let embedder = batch.embed_refusals.iter().map(|r| DeadLetter::Version {
            doc_id: &r.doc_id,
            record: r.record,
            failure: Failure {
                class: EMBED_FAILED,
                stage: Stage::Embed.as_str(),
                message: &r.error,
            },
        });
        let at_sink = refused.at_sink().map(|(doc, r)| DeadLetter::Version {
            doc_id: doc,
            record: batch.records.get(doc).copied(),
            failure: Failure {
                class: r.class,
                stage: r.stage.as_str(),
                message: &r.message,
            },
        });
        before_sink.chain(embedder).chain(at_sink).collect()
    }
}

/// The dead-letter producer, with what it needs to write each record once.
pub struct DeadLetters {
    producer: DlqProducer,
    /// The broker's settings (refused versions are read back from their topic).
    kafka: KafkaConfig,
    /// The topics read, by index ([`TopicPartition::topic`]).
    topics: Vec<String>,
    /// Source records already dead-lettered that may be read again ([`crate::dlq::already_sent`]).
    sent: Sent,
    /// Dead-letter partition → the offset past every dead letter written or read at start
    /// (with the pending ones, each commit's `dead_letters_next`: [`crate::dlq::resume_marks`]).
    next: BTreeMap<i32, i64>,
    stall: Stall,
    metrics: Metrics,
}

impl DeadLetters {
    /// `scan`: what the start read of the dead-letter topic.
    pub fn new(
        producer: DlqProducer,
        kafka: KafkaConfig,
        topics: Vec<String>,
        scan: Scan,
        stall: Stall,
        metrics: Metrics,
    ) -> DeadLetters {
        DeadLetters {
            producer,
            kafka,
            topics,
            sent: scan.sent,
            next: scan.ends,
            stall,
            metrics,
        }
    }

    /// The `dead_letters_next` of a commit whose offsets are `durable` (topic → partition →
    /// next offset): the dead letters of the records it covers are never written again (see
    /// [`DeadLetter::build`]), so only the rest stays pending.
    pub fn resume_marks(
        &mut self,
        durable: &BTreeMap<String, BTreeMap<i32, i64>>,
    ) -> BTreeMap<i32, i64> {
        self.sent.retain(|(t, p, o), _| {
            durable
                .get(t)
                .and_then(|m| m.get(p))
                .is_none_or(|next| o >= next)
        });
        crate::dlq::resume_marks(&self.next, &self.sent)
    }

    /// The name of the topic of index `t`.
    fn topic_name(&self, t: usize) -> Result<&str> {
        self.topics
            .get(t)
            .map(String::as_str)
            .ok_or_else(|| anyhow!("a record of unknown topic {t}"))
    }

    /// Sends the record of a refused document version, read back from the document topic by
    /// its offset. When the topic no longer holds it (retention), a record keyed by the
    /// document id with a null value stands in, and the message says so.
    fn version(
        &mut self,
        doc_id: &str,
        record: Option<RecordRef>,
        failure: &Failure<'_>,
    ) -> Result<()> {
        let topic = match record {
            Some(r) => self.topic_name(r.topic)?,
            None => self
                .topics
                .first()
                .map(String::as_str)
                .ok_or_else(|| anyhow!("no topics"))?,
        };
        if record.is_some_and(|r| self.sent_before(topic, r.partition, r.offset)) {
            return Ok(());
        }
        let topic = topic.to_string();
        let original = match record {
            Some(r) => PartitionReader::read_one(
                &self.kafka,
                &topic,
                r.partition,
                r.offset,
                READ_BACK_TIMEOUT,
            )
            .with_context(|| format!("reading back {topic} {}@{}", r.partition, r.offset))?,
            None => None,
        };
        let message;
        let (original, failure) = match original {
            Some(o) => (o, *failure),
            None => {
                message = format!(
                    "{} (the original record of document {doc_id:?} is no longer on the topic)",
                    failure.message
                );
                let stand_in = Record {
                    topic: topic.clone(),
                    partition: record.map_or(-1, |r| r.partition),
                    offset: record.map_or(-1, |r| r.offset),
                    key: Some(doc_id.as_bytes().to_vec()),
                    value: None,
                    headers: Vec::new(),
                    timestamp_ms: None,
                };
                let f = Failure {
                    message: &message,
                    ..*failure
                };
                (stand_in, f)
            }
        };
        self.send_once(&original, &failure)
            .with_context(|| format!("dead-lettering the record of {doc_id:?}"))
    }

    /// Whether the record at `topic` `partition`@`offset` has a dead letter from before a
    /// restart (logged when it has).
    fn sent_before(&self, topic: &str, partition: i32, offset: i64) -> bool {
        let sent = self
            .sent
            .contains_key(&(topic.to_string(), partition, offset));
        if sent {
            tracing::info!(
                topic,
                partition,
                offset,
                "already on the dead-letter topic (written before the restart)"
            );
        }
        sent
    }

    /// Dead-letters `record` unless it was before a restart; notes how far the topic reaches.
    fn send_once(&mut self, record: &Record, failure: &Failure<'_>) -> Result<()> {
        if record.offset >= 0 && self.sent_before(&record.topic, record.partition, record.offset) {
            return Ok(());
        }
        let (p, o) = self
            .stall
            .retry("writing to the dead-letter topic", "dlq", |_| {
                self.send(record, failure)
            })?;
        let next = self.next.entry(p).or_insert(o + 1);
        *next = (*next).max(o + 1);
        Ok(())
    }

    /// Sends `record` with the `failure` headers and waits for the broker's acknowledgement;
    /// returns where the dead letter was written (partition, offset).
    fn send(&self, record: &Record, failure: &Failure<'_>) -> Result<(i32, i64)> {
        tracing::warn!(
            partition = record.partition,
            offset = record.offset,
            class = failure.class,
            stage = failure.stage,
            message = failure.message,
            "record to DLQ"
        );
        let at = self.producer.send(record, failure).with_context(|| {
            format!(
                "writing partition {} offset {} to the DLQ",
                record.partition, record.offset
            )
        })?;
        self.metrics.dead_lettered(failure.class, failure.stage);
        Ok(at)
    }
}

impl Service<DeadLetter<'_>> for DeadLetters {
    type Response = ();

    fn call(&mut self, letter: DeadLetter<'_>) -> Result<()> {
        match letter {
            DeadLetter::Refused(r) => {
                let record = r.record(self.topic_name(r.at.topic)?);
                let failure = Failure {
                    class: &r.class,
                    stage: &r.stage,
                    message: &r.message,
                };
                self.send_once(&record, &failure)
            }
            DeadLetter::Version {
                doc_id,
                record,
                failure,
            } => self.version(doc_id, record, &failure),
        }
    }
}
