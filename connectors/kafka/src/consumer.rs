//! [`PartitionReader`]: a consumer with manual partition assignment and explicit commits.

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::client::{consumer_config, is_permanent, TracingContext, REQUEST_TIMEOUT};
use crate::{Error, KafkaConfig, Record, Result};

/// How often a commit is attempted before its error is returned.
const COMMIT_ATTEMPTS: u32 = 5;

/// Reads a fixed set of partitions of one topic.
///
/// The partitions are assigned manually: there is no group membership and so no rebalance;
/// the group id (from [`KafkaConfig::group_id`]) is used only to store and fetch committed
/// offsets. Offsets are never committed or stored automatically: the caller commits with
/// [`PartitionReader::commit`] once the records before those offsets are durable downstream.
pub struct PartitionReader {
    consumer: BaseConsumer<TracingContext>,
    topic: String,
    partitions: Vec<i32>,
}

impl std::fmt::Debug for PartitionReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionReader")
            .field("topic", &self.topic)
            .field("partitions", &self.partitions)
            .finish_non_exhaustive()
    }
}

impl PartitionReader {
    /// Assigns `partitions` of `topic` to a new consumer.
    ///
    /// `start` gives, per partition, the next offset to read. A partition missing from `start`
    /// resumes at the group's committed offset, or at the earliest offset when the group has
    /// none (or when the committed offset is out of range). Negative values are librdkafka's
    /// logical offsets: `-2` earliest, `-1` latest.
    pub fn new(
        cfg: &KafkaConfig,
        topic: &str,
        partitions: &[i32],
        start: &BTreeMap<i32, i64>,
    ) -> Result<Self> {
        if topic.is_empty() {
            return Err(Error::InvalidArgument("empty topic name".into()));
        }
        let mut parts = partitions.to_vec();
        parts.sort_unstable();
        parts.dedup();
        if let Some(p) = parts.iter().find(|p| **p < 0) {
            return Err(Error::InvalidArgument(format!("negative partition {p}")));
        }
        if let Some(p) = start.keys().find(|p| parts.binary_search(p).is_err()) {
            return Err(Error::InvalidArgument(format!(
                "start offset given for partition {p}, which is not among the assigned {parts:?}"
            )));
        }
        if cfg.group_id.is_empty() {
            return Err(Error::InvalidArgument("empty group id".into()));
        }

        let consumer: BaseConsumer<TracingContext> = consumer_config(
            cfg,
            &[
                ("auto.offset.reset", "earliest"),
                ("enable.partition.eof", "false"),
                ("fetch.wait.max.ms", "100"),
            ],
            &[
                ("group.id", cfg.group_id.as_str()),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
            ],
        )
        .create_with_context(TracingContext)
        .map_err(Error::kafka("creating consumer"))?;

        let mut tpl = TopicPartitionList::with_capacity(parts.len());
        for p in &parts {
            let offset = match start.get(p) {
                Some(o) => Offset::from_raw(*o),
                None => Offset::Stored,
            };
            tpl.add_partition_offset(topic, *p, offset)
                .map_err(Error::kafka("building assignment"))?;
        }
        consumer
            .assign(&tpl)
            .map_err(Error::kafka("assigning partitions"))?;
        tracing::info!(topic, partitions = ?parts, start = ?start, group = %cfg.group_id, "partition reader assigned");
        Ok(PartitionReader {
            consumer,
            topic: topic.to_string(),
            partitions: parts,
        })
    }

    /// The topic read.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The assigned partitions, ascending.
    pub fn partitions(&self) -> &[i32] {
        &self.partitions
    }

    /// Calls `wake` (from librdkafka's own thread) whenever the reader's queue goes from empty
    /// to holding something: fetched records, or an event such as an error, so a caller that
    /// polls with no wait ([`PartitionReader::poll_batch`] with `Duration::ZERO`) and then
    /// parks can be woken to poll again. `wake` must be cheap and must not call back into the
    /// reader (an unpark, a flag, a channel send). Replaces any earlier `wake`.
    pub fn wake_on_records<F>(&mut self, wake: F)
    where
        F: Fn() + Send + Sync + 'static,
    {
        self.consumer.set_nonempty_callback(wake);
    }

    /// Reads up to `max_records` records. Waits up to `max_wait` for the first record; once
    /// one has arrived, takes whatever else is already fetched (up to `max_records`) and
    /// returns without waiting for more, so a record is handed on as soon as it is read.
    /// Records of one partition come in offset order.
    ///
    /// Transient errors (broker unreachable, leader change, ...) are logged and polling goes
    /// on; librdkafka reconnects and refetches by itself. Reaching the end of a partition is
    /// not an error. Only errors that retrying cannot fix are returned.
    pub fn poll_batch(&mut self, max_records: usize, max_wait: Duration) -> Result<Vec<Record>> {
        let mut out = Vec::new();
        if max_records == 0 {
            return Ok(out);
        }
        let deadline = Instant::now() + max_wait;
        loop {
            // Whole milliseconds: librdkafka waits in milliseconds (rounding down), and
            // rust-rdkafka spins through a sub-millisecond remainder.
            let left = if out.is_empty() {
                let ms = deadline
                    .saturating_duration_since(Instant::now())
                    .as_millis();
                Duration::from_millis(ms as u64)
            } else {
                Duration::ZERO
            };
            match self.consumer.poll(left) {
                None => {
                    if !out.is_empty() || left.is_zero() {
                        break;
                    }
                }
                Some(Ok(msg)) => {
                    out.push(to_record(&msg));
                    if out.len() >= max_records {
                        break;
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(e)) => {
                    self.on_poll_error(e)?;
                    // Do not spin on a repeating error.
                    let pause = Duration::from_millis(100)
                        .min(deadline.saturating_duration_since(Instant::now()));
                    thread::sleep(pause);
                }
            }
        }
        Ok(out)
    }

    /// The record at `offset` of `partition`, read by a reader of its own (no group offsets
    /// are touched): for a record that is needed again after it was processed, such as one a
    /// sink refused. `Ok(None)` when the partition no longer holds that offset (retention or
    /// compaction removed it) or nothing arrives within `timeout`.
    pub fn read_one(
        cfg: &KafkaConfig,
        topic: &str,
        partition: i32,
        offset: i64,
        timeout: Duration,
    ) -> Result<Option<Record>> {
        let mut reader = PartitionReader::new(
            cfg,
            topic,
            &[partition],
            &BTreeMap::from([(partition, offset)]),
        )?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let wait = deadline.saturating_duration_since(Instant::now());
            if let Some(record) = reader.poll_batch(1, wait)?.into_iter().next() {
                return Ok((record.offset == offset).then_some(record));
            }
        }
        Ok(None)
    }

    fn on_poll_error(&self, e: KafkaError) -> Result<()> {
        if let Some((code, reason)) = self.consumer.client().fatal_error() {
            return Err(Error::Fatal(format!("{code}: {reason} (after {e})")));
        }
        match &e {
            KafkaError::MessageConsumptionFatal(code) => {
                Err(Error::Fatal(format!("consuming {}: {code}", self.topic)))
            }
            _ => match e.rdkafka_error_code() {
                Some(code) if is_permanent(code) => Err(Error::Kafka {
                    op: "consuming",
                    source: e,
                }),
                _ => {
                    tracing::warn!(topic = %self.topic, error = %e, "transient consume error; retrying");
                    Ok(())
                }
            },
        }
    }

    /// Commits `next_offsets` (partition -> offset of the next record to read, i.e. last
    /// processed offset + 1) as the group's offsets, synchronously. Every partition must be
    /// assigned to this reader. Transient failures (coordinator moving, timeouts) are retried
    /// a few times before the error is returned.
    #[expect(
        clippy::disallowed_methods,
        reason = "the one place offsets are committed"
    )]
    pub fn commit(&self, next_offsets: &BTreeMap<i32, i64>) -> Result<()> {
        let Some(tpl) = self.offset_list(next_offsets)? else {
            return Ok(());
        };
        let mut attempt = 1;
        loop {
            let result = self
                .consumer
                .commit(&tpl, CommitMode::Sync)
                .and_then(|()| partition_errors(&tpl, KafkaError::ConsumerCommit));
            match result {
                Ok(()) => return Ok(()),
                Err(e) if attempt < COMMIT_ATTEMPTS && is_retriable_commit(&e) => {
                    tracing::warn!(topic = %self.topic, error = %e, attempt, "offset commit failed; retrying");
                    thread::sleep(Duration::from_millis(200) * attempt);
                    attempt += 1;
                }
                Err(e) => {
                    return Err(Error::Kafka {
                        op: "committing offsets",
                        source: e,
                    })
                }
            }
        }
    }

    /// Like [`PartitionReader::commit`], but only hands the commit to librdkafka, which sends
    /// it in the background (no round trip on the caller's thread); a failure is logged when a
    /// later poll serves its callback. For callers whose offsets are also stored elsewhere.
    #[expect(
        clippy::disallowed_methods,
        reason = "the one place offsets are committed"
    )]
    pub fn commit_async(&self, next_offsets: &BTreeMap<i32, i64>) -> Result<()> {
        let Some(tpl) = self.offset_list(next_offsets)? else {
            return Ok(());
        };
        self.consumer
            .commit(&tpl, CommitMode::Async)
            .map_err(|source| Error::Kafka {
                op: "committing offsets",
                source,
            })
    }

    /// The commit list for `next_offsets` (`None` when empty), checked against the assignment.
    fn offset_list(&self, next_offsets: &BTreeMap<i32, i64>) -> Result<Option<TopicPartitionList>> {
        if next_offsets.is_empty() {
            return Ok(None);
        }
        let mut tpl = TopicPartitionList::with_capacity(next_offsets.len());
        for (p, o) in next_offsets {
            if self.partitions.binary_search(p).is_err() {
                return Err(Error::InvalidArgument(format!(
                    "commit for partition {p}, which is not among the assigned {:?}",
                    self.partitions
                )));
            }
            if *o < 0 {
                return Err(Error::InvalidArgument(format!(
                    "commit of negative offset {o} for partition {p}"
                )));
            }
            tpl.add_partition_offset(&self.topic, *p, Offset::Offset(*o))
                .map_err(Error::kafka("building commit"))?;
        }
        Ok(Some(tpl))
    }

    /// The group's committed offsets (next offset to read) for the assigned partitions; a
    /// partition without a committed offset is absent.
    pub fn committed(&self) -> Result<BTreeMap<i32, i64>> {
        let mut tpl = TopicPartitionList::with_capacity(self.partitions.len());
        for p in &self.partitions {
            tpl.add_partition(&self.topic, *p);
        }
        let tpl = self
            .consumer
            .committed_offsets(tpl, REQUEST_TIMEOUT)
            .map_err(Error::kafka("fetching committed offsets"))?;
        partition_errors(&tpl, KafkaError::OffsetFetch)
            .map_err(Error::kafka("fetching committed offsets"))?;
        Ok(tpl
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) if o >= 0 => Some((e.partition(), o)),
                _ => None,
            })
            .collect())
    }

    /// The high watermark (offset of the next record to be written) of every assigned
    /// partition, queried from the broker; consumer lag is this minus the next offset to read.
    pub fn high_watermarks(&self) -> Result<BTreeMap<i32, i64>> {
        Ok(self
            .watermarks()?
            .into_iter()
            .map(|(p, (_, high))| (p, high))
            .collect())
    }

    /// The high watermark of `partition` as the newest fetch response gave it, without a
    /// request to the broker (librdkafka keeps it per partition); `None` before any response.
    /// It is at least the offset after every record this reader has returned, and may be behind
    /// the broker's. [`Self::high_watermarks`] asks the broker, and waits behind a fetch in
    /// flight on the same connection: a slow broker serving a large fetch can time it out.
    pub fn fetched_high_watermark(&self, partition: i32) -> Option<i64> {
        use rdkafka::bindings::{rd_kafka_get_watermark_offsets, rd_kafka_resp_err_t};
        let topic = std::ffi::CString::new(self.topic.as_str()).ok()?;
        let (mut low, mut high) = (-1i64, -1i64);
        // SAFETY: the handle is the live consumer's (borrowed from `self` for the call), the
        // topic a NUL-terminated string that outlives it, and both out-pointers locals. The
        // call only reads librdkafka's cached partition state (rdkafka 0.39 does not wrap it).
        let err = unsafe {
            rd_kafka_get_watermark_offsets(
                self.consumer.client().native_ptr(),
                topic.as_ptr(),
                partition,
                &mut low,
                &mut high,
            )
        };
        (err == rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
    }

    /// The low (earliest offset still held) and high watermarks of every assigned partition.
    pub fn watermarks(&self) -> Result<BTreeMap<i32, (i64, i64)>> {
        let mut out = BTreeMap::new();
        for p in &self.partitions {
            let marks = self
                .consumer
                .fetch_watermarks(&self.topic, *p, REQUEST_TIMEOUT)
                .map_err(Error::kafka("fetching watermarks"))?;
            out.insert(*p, marks);
        }
        Ok(out)
    }
}

fn partition_errors(
    tpl: &TopicPartitionList,
    wrap: fn(RDKafkaErrorCode) -> KafkaError,
) -> std::result::Result<(), KafkaError> {
    for e in tpl.elements() {
        if let Err(err) = e.error() {
            return Err(match err.rdkafka_error_code() {
                Some(code) => wrap(code),
                None => err,
            });
        }
    }
    Ok(())
}

fn is_retriable_commit(e: &KafkaError) -> bool {
    match e.rdkafka_error_code() {
        Some(code) => matches!(
            code,
            RDKafkaErrorCode::CoordinatorNotAvailable
                | RDKafkaErrorCode::NotCoordinator
                | RDKafkaErrorCode::CoordinatorLoadInProgress
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::OperationTimedOut
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::NetworkException
                | RDKafkaErrorCode::WaitingForCoordinator
                | RDKafkaErrorCode::TimedOutQueue
        ),
        None => false,
    }
}

pub(crate) fn to_record(msg: &BorrowedMessage<'_>) -> Record {
    let headers = msg
        .headers()
        .map(|hs| {
            hs.iter()
                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                .collect()
        })
        .unwrap_or_default();
    Record {
        topic: msg.topic().to_string(),
        partition: msg.partition(),
        offset: msg.offset(),
        key: msg.key().map(<[u8]>::to_vec),
        value: msg.payload().map(<[u8]>::to_vec),
        headers,
        timestamp_ms: msg.timestamp().to_millis(),
    }
}
