//! Dead letters: a record that cannot be indexed goes to the dead-letter topic, logged and
//! counted (`dlq_records_total{class, stage}`), acknowledged by the broker before the commit
//! that moves the offsets past it, and written once.
//!
//! Once: only the sink writes dead letters, just before the index commit that covers their
//! records (the sources hand the records they refuse to the sink as [`Refused`]), and each commit
//! notes how far the dead-letter topic reached ([`freshet_tantivy::CommitPayload`]'s
//! `dead_letters_next`). A restart reads the dead-letter topic from there to its end
//! ([`already_sent`]): the dead letters written after the last commit, for records that will be
//! read again; the sink does not write those a second time. A record below the durable offsets
//! (read again by a process resuming from older group offsets) was dead-lettered before the
//! commit that covered it. This module holds the records and the scan; the sink's writer is
//! [`crate::sink`]'s `dead_letters` service.
//!
//! The day-2 side (`freshet dlq list|show|replay`, and whatever else shows dead letters):
//! [`letters`] reads the topic for people, [`replay`] writes dead letters back to their source
//! topics, each once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use freshet_kafka::{admin, dlq_headers, Failure, KafkaConfig, PartitionReader, Record};
use serde::{Deserialize, Serialize};

use crate::sink::plan::RecordRef;

pub mod letters;
pub mod replay;
#[cfg(test)]
mod tests;

/// How long reading the dead-letter topic at start may take.
const SCAN_TIMEOUT: Duration = Duration::from_secs(120);

/// A record refused before the sink (decoding, limits, preparation), on its way to the sink,
/// which dead-letters it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    pub at: RecordRef,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp_ms: Option<i64>,
    pub class: String,
    pub stage: String,
    pub message: String,
}

impl Refused {
    pub fn new(record: Record, at: RecordRef, failure: &Failure<'_>) -> Self {
        Refused {
            at,
            key: record.key,
            value: record.value,
            headers: record.headers,
            timestamp_ms: record.timestamp_ms,
            class: failure.class.to_string(),
            stage: failure.stage.to_string(),
            message: failure.message.to_string(),
        }
    }

    /// The record as read from `topic`.
    pub fn record(&self, topic: &str) -> Record {
        Record {
            topic: topic.to_string(),
            partition: self.at.partition,
            offset: self.at.offset,
            key: self.key.clone(),
            value: self.value.clone(),
            headers: self.headers.clone(),
            timestamp_ms: self.timestamp_ms,
        }
    }
}

/// Source records (topic name, partition, offset) with a dead letter on the topic, and where
/// that dead letter is (partition, offset).
pub type Sent = BTreeMap<(String, i32, i64), (i32, i64)>;

/// What [`already_sent`] found.
#[derive(Debug, Default)]
pub struct Scan {
    /// The dead letters of records not below the resume offsets.
    pub sent: Sent,
    /// Where the scan ended, per partition (the high watermark when it started).
    pub ends: BTreeMap<i32, i64>,
}

/// Reads the dead-letter topic from `from` (partition → offset; a partition it does not name
/// from its earliest record) to its end, and returns the dead letters of source records not
/// below `resume` (topic → partition → next offset to read; a topic it does not name counts
/// from 0).
pub fn already_sent(
    kafka: &KafkaConfig,
    from: &BTreeMap<i32, i64>,
    resume: &BTreeMap<String, BTreeMap<i32, i64>>,
) -> Result<Scan> {
    let topic = &kafka.dlq_topic;
    let partitions = admin::partitions(kafka, topic)
        .with_context(|| format!("listing the partitions of {topic}"))?;
    let start: BTreeMap<i32, i64> = partitions
        .iter()
        .map(|p| (*p, from.get(p).copied().unwrap_or(-2)))
        .collect();
    let mut cfg = kafka.clone();
    cfg.group_id = format!("{}-dead-letter-scan", kafka.group_id);
    let mut reader = PartitionReader::new(&cfg, topic, &partitions, &start)
        .with_context(|| format!("reading {topic}"))?;
    // Where each partition's scan starts and ends.
    let mut todo: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    let mut ends = BTreeMap::new();
    for (p, (low, high)) in reader.watermarks()? {
        ends.insert(p, high);
        let first = start
            .get(&p)
            .copied()
            .filter(|o| *o >= 0)
            .unwrap_or(low)
            .max(low);
        if first < high {
            todo.insert(p, (first, high));
        }
    }
    let mut sent = Sent::new();
    let mut scanned = 0usize;
    let deadline = Instant::now() + SCAN_TIMEOUT;
    while !todo.is_empty() {
        if Instant::now() > deadline {
            bail!("reading {topic} took over {SCAN_TIMEOUT:?}; still to read: {todo:?}");
        }
        for r in reader.poll_batch(10_000, Duration::from_millis(500))? {
            scanned += 1;
            if let Some((_, end)) = todo.get(&r.partition).copied() {
                if r.offset + 1 >= end {
                    todo.remove(&r.partition);
                }
            }
            let Some((t, p, o)) = source_of(&r) else {
                continue;
            };
            let next = resume.get(&t).and_then(|m| m.get(&p)).copied().unwrap_or(0);
            if o >= next {
                sent.insert((t, p, o), (r.partition, r.offset));
            }
        }
    }
    if scanned > 0 {
        tracing::info!(
            topic,
            scanned,
            pending = sent.len(),
            "read the dead letters written since the last commit"
        );
    }
    Ok(Scan { sent, ends })
}

/// The `dead_letters_next` of a commit: per dead-letter partition, `next` (past every dead
/// letter written or read so far), lowered to the first dead letter still `pending` (of a
/// record the commit does not cover), which the next restart must read again.
pub fn resume_marks(next: &BTreeMap<i32, i64>, pending: &Sent) -> BTreeMap<i32, i64> {
    let mut out = next.clone();
    for (p, o) in pending.values() {
        let e = out.entry(*p).or_insert(*o);
        *e = (*e).min(*o);
    }
    out
}

/// The source record a dead letter names (its `freshet.source.*` headers).
fn source_of(r: &Record) -> Option<(String, i32, i64)> {
    let text = |name: &str| {
        r.header(name)
            .flatten()
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::to_string)
    };
    let topic = text(dlq_headers::SOURCE_TOPIC)?;
    let partition = text(dlq_headers::SOURCE_PARTITION)?.parse().ok()?;
    let offset = text(dlq_headers::SOURCE_OFFSET)?.parse().ok()?;
    Some((topic, partition, offset))
}
