//! One worker's sources: Kafka records of each topic it reads → decoded, prepared document
//! updates for one epoch. Bad records go with them to the sink, which dead-letters them before
//! the commit that moves the offsets past them (see [`crate::dlq`]). Every record is marked in
//! flight in the worker's slot while it is prepared, and a quarantined one is refused unprepared
//! (see [`crate::quarantine`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use freshet_kafka::{Failure, PartitionReader};
use freshet_operators::cdc::RecordFormat;
use freshet_operators::chunk::{Chunk, ChunkerConfig, TokenCounter};
use freshet_operators::intake::{intake_versioned, Intake, Rejection, Stage, Versions};
use freshet_operators::limits::RecordLimits;

use crate::dlq::Refused;
use crate::metrics::Metrics;
use crate::quarantine::{Quarantine, RecordAt, Slot, CRASH_LOOP};
use crate::sink::plan::{Offsets, RecordRef, RemovalAsked, TopicPartition};

/// What one poll produced.
#[derive(Default)]
pub struct SourceBatch {
    /// Latest update per document id in this batch (`None` deletes).
    pub updates: Vec<(String, Option<Vec<Chunk>>)>,
    /// Where the latest record of each document in `updates` is.
    pub records: Vec<(String, RecordRef)>,
    /// Next offset to read, per topic partition read in this batch.
    pub next_offsets: Offsets,
    /// Kafka timestamps (ms) of the records, for the source-to-durable latency.
    pub timestamps_ms: Vec<i64>,
    pub records_read: usize,
    /// The records that cannot be indexed, for the dead-letter topic.
    pub refused: Vec<Refused>,
    /// The records that ask for their document's removal (deletes, and refused records that
    /// name a document), for the delete receipts.
    pub removals: Vec<RemovalAsked>,
}

/// Shared, read-only processing settings.
pub struct Processing {
    pub limits: RecordLimits,
    pub chunking: ChunkerConfig,
    pub tokens: Arc<dyn TokenCounter + Send + Sync>,
}

/// The partitions of one topic that a worker reads, and how their records are read.
pub struct Source {
    reader: PartitionReader,
    /// The topic's index in the configured topics.
    topic: usize,
    format: RecordFormat,
}

impl Source {
    pub fn new(reader: PartitionReader, topic: usize, format: RecordFormat) -> Self {
        Source {
            reader,
            topic,
            format,
        }
    }

    pub fn reader(&self) -> &PartitionReader {
        &self.reader
    }
}

/// Every topic partition one worker reads.
pub struct Sources {
    sources: Vec<Source>,
    processing: Arc<Processing>,
    metrics: Metrics,
    /// The latest version of each document this worker prepared: an identical re-send is
    /// recognised before cleaning and chunking (document ids are disjoint across topics).
    versions: Versions,
    /// The records refused unprepared, and this worker's slot for the record in flight.
    quarantine: Arc<Quarantine>,
    slot: Slot,
}

/// A record's update and where it is, by document id, with its place in the poll.
type Latest = HashMap<String, (usize, RecordRef, Option<Vec<Chunk>>)>;

impl Sources {
    pub fn new(
        sources: Vec<Source>,
        processing: Arc<Processing>,
        metrics: Metrics,
        quarantine: Arc<Quarantine>,
        slot: Slot,
    ) -> Self {
        Sources {
            sources,
            processing,
            metrics,
            versions: Versions::default(),
            quarantine,
            slot,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Unparks `thread` whenever one of the readers has records (or an event) waiting, so a
    /// worker that polls with no wait can park between polls and still read a record as soon
    /// as it is fetched.
    pub fn wake_on_records(&mut self, thread: std::thread::Thread) {
        for source in &mut self.sources {
            let thread = thread.clone();
            source.reader.wake_on_records(move || thread.unpark());
        }
    }

    /// Polls every topic for up to `max_records` records each, waiting at most `max_wait` in
    /// all (shared among the topics until one has records, then not at all). A record that
    /// cannot be indexed is returned among [`SourceBatch::refused`] and, when it names a
    /// document, deletes that document (see `freshet_operators::intake`).
    pub fn poll(&mut self, max_records: usize, max_wait: Duration) -> Result<SourceBatch> {
        let mut batch = SourceBatch::default();
        let mut latest: Latest = HashMap::new();
        let share = max_wait / self.sources.len().max(1) as u32;
        for i in 0..self.sources.len() {
            let wait = if batch.records_read > 0 {
                Duration::ZERO
            } else {
                share
            };
            self.poll_one(i, max_records, wait, &mut batch, &mut latest)?;
        }
        let mut updates: Vec<_> = latest.into_iter().collect();
        updates.sort_by_key(|(_, (seq, _, _))| *seq);
        for (id, (_, at, update)) in updates {
            batch.records.push((id.clone(), at));
            batch.updates.push((id, update));
        }
        Ok(batch)
    }

    fn poll_one(
        &mut self,
        i: usize,
        max_records: usize,
        max_wait: Duration,
        batch: &mut SourceBatch,
        latest: &mut Latest,
    ) -> Result<()> {
        let source = &mut self.sources[i];
        let records = source
            .reader
            .poll_batch(max_records, max_wait)
            .with_context(|| format!("polling Kafka topic {}", source.reader.topic()))?;
        for record in records {
            let seq = batch.records_read;
            batch.records_read += 1;
            let at = RecordRef {
                topic: source.topic,
                partition: record.partition,
                offset: record.offset,
            };
            let tp = TopicPartition {
                topic: source.topic,
                partition: record.partition,
            };
            batch.next_offsets.insert(tp, record.offset + 1);
            if let Some(ts) = record.timestamp_ms {
                batch.timestamps_ms.push(ts);
            }
            let p = &self.processing;
            let place = RecordAt {
                topic: source.reader.topic().to_string(),
                partition: record.partition,
                offset: record.offset,
            };
            let (key, value) = (record.key.as_deref(), record.value.as_deref());
            let intake = match self.quarantine.crashes(&place, key, value) {
                Some(crashes) => {
                    let doc_id = source.format.named_document(key, value, &p.limits);
                    if let Some(id) = &doc_id {
                        self.versions.forget(id);
                    }
                    Intake::Rejected(Rejection {
                        class: CRASH_LOOP,
                        stage: Stage::Prepare,
                        message: format!(
                            "the pipeline died {crashes} times in a row while preparing this \
                             record; it is not prepared again"
                        ),
                        doc_id,
                    })
                }
                None => {
                    self.slot.mark(&place);
                    crate::faults::before_prepare(key);
                    let intake = intake_versioned(
                        &source.format,
                        key,
                        value,
                        &p.limits,
                        &p.chunking,
                        p.tokens.as_ref(),
                        &mut self.versions,
                    );
                    self.slot.clear();
                    intake
                }
            };
            let removal = match &intake {
                Intake::Delete { id } => Some((id.clone(), None)),
                Intake::Rejected(r) => r.doc_id.clone().map(|id| (id, Some(r.class.to_string()))),
                _ => None,
            };
            if let Some((doc_id, refused)) = removal {
                batch.removals.push(RemovalAsked {
                    doc_id,
                    at,
                    timestamp_ms: record.timestamp_ms,
                    refused,
                });
            }
            let outcome = match &intake {
                Intake::Upsert { .. } => "upsert",
                Intake::Delete { .. } => "delete",
                Intake::Unchanged { .. } => "unchanged",
                Intake::Skipped => "skipped",
                Intake::Rejected(r) => {
                    let failure = Failure {
                        class: r.class,
                        stage: r.stage.as_str(),
                        message: &r.message,
                    };
                    batch.refused.push(Refused::new(record, at, &failure));
                    "dlq"
                }
            };
            Metrics::outcome(&self.metrics.documents, outcome, 1);
            if let Some((id, update)) = intake.update() {
                latest.insert(id, (seq, at, update));
            }
        }
        Ok(())
    }

    /// Commits the group offsets of `offsets` to the reader of each topic: in the background
    /// (`sync` false) or synchronously. Failures are returned per topic, after trying all.
    pub fn commit(&self, offsets: &Offsets, sync: bool) -> Vec<anyhow::Error> {
        let mut errors = Vec::new();
        for s in &self.sources {
            let mine: BTreeMap<i32, i64> = offsets
                .iter()
                .filter(|(tp, _)| tp.topic == s.topic)
                .map(|(tp, o)| (tp.partition, *o))
                .collect();
            if mine.is_empty() {
                continue;
            }
            let result = if sync {
                s.reader.commit(&mine)
            } else {
                s.reader.commit_async(&mine)
            };
            if let Err(e) = result {
                errors.push(anyhow::Error::new(e).context(format!("topic {}", s.reader.topic())));
            }
        }
        errors
    }

    /// Every source's reader, for lag reports.
    pub fn readers(&self) -> impl Iterator<Item = &PartitionReader> {
        self.sources.iter().map(|s| &s.reader)
    }
}
