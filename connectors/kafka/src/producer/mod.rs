//! Producers: [`DocumentProducer`] for publishing documents, [`DlqProducer`] for dead letters.
//!
//! Both wait for the broker's acknowledgement before returning, so a successful return means
//! the record is durable (`acks=all`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};

use crate::client::{client_config, log_client_error, log_line};
use crate::{Error, KafkaConfig, Result};

mod dlq;
#[cfg(test)]
pub(crate) use dlq::dlq_header_list;
pub use dlq::{DlqProducer, Failure};

/// Producer settings shared by both producers; all can be overridden by
/// [`KafkaConfig::client_properties`].
const PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    ("acks", "all"),
    // Idempotence keeps per-partition order and avoids duplicates across internal retries
    // while many batches are in flight.
    ("enable.idempotence", "true"),
    // Snappy batches break tansu's fetch path; lz4 works.
    ("compression.type", "lz4"),
    // Every send here waits for its acknowledgement right after enqueueing, so a linger is
    // added whole to each synchronous publish (the sink's changelog write before its commit,
    // the marker after it, a dead letter, an ingest request). Records enqueued while a request
    // is in flight are still batched together, so a bulk publish keeps its batches.
    ("linger.ms", "0"),
    // Same key -> same partition as the Java client, whoever publishes.
    ("partitioner", "murmur2_random"),
    ("message.timeout.ms", "60000"),
    // Records as large as the pipeline takes (`[limits] max_value_bytes`, 8 MiB by default,
    // e.g. a DOCX as base64) plus headers; librdkafka's own default is 1 MB. The broker must take
    // them too (Apache Kafka: the topic's `max.message.bytes`).
    ("message.max.bytes", "16777216"),
];

/// How long `flush` waits.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

type Outcome = std::result::Result<(i32, i64), KafkaError>;

/// Identifies one produced record to its waiter.
struct Ticket {
    index: usize,
    tx: mpsc::Sender<(usize, Outcome)>,
}

struct DeliveryContext;

impl ClientContext for DeliveryContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        log_line(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(&error, reason);
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Ticket>;

    fn delivery(&self, result: &DeliveryResult<'_>, ticket: Box<Ticket>) {
        let outcome = match result {
            Ok(msg) => Ok((msg.partition(), msg.offset())),
            Err((e, _)) => Err(e.clone()),
        };
        // The waiter may have given up; nothing to do then.
        let _ = ticket.tx.send((ticket.index, outcome));
    }
}

/// How long one poll of the delivery-report queue may wait. rdkafka's own `ThreadedProducer`
/// polls every 100 ms and, as a poll's last millisecond rounds down to a zero timeout, spins
/// through it: about 1% of a core per idle producer. A 1 s poll spins 0.1% and still hands each
/// report on as soon as it arrives; it bounds how long dropping a producer waits for its thread.
const POLL: Duration = Duration::from_secs(1);

/// The shared machinery: a producer whose delivery reports go to per-call channels, polled by
/// a thread of its own.
struct Inner {
    producer: Arc<BaseProducer<DeliveryContext>>,
    stop: Arc<AtomicBool>,
    poller: Option<JoinHandle<()>>,
    /// Upper bound on waiting for one delivery report (librdkafka's message timeout plus
    /// slack); reports always come before it unless the client is wedged.
    report_timeout: Duration,
}

impl Drop for Inner {
    /// Stops the poll thread (within one [`POLL`]); the producer itself purges and flushes
    /// when its last handle goes.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.poller.take() {
            let _ = t.join();
        }
    }
}

/// A record with its headers, to produce: key, value (`None`: a tombstone), headers in order.
pub type HeadedRecord = (Vec<u8>, Option<Vec<u8>>, Vec<(String, Option<Vec<u8>>)>);

/// One record to produce, borrowed: raw key, value and headers.
struct RawRecord<'a> {
    /// The partition to write to; `None`: the partitioner's choice by key.
    partition: Option<i32>,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: Option<OwnedHeaders>,
}

impl Inner {
    fn new(cfg: &KafkaConfig, what: &'static str) -> Result<Self> {
        let cc = client_config(cfg, PRODUCER_DEFAULTS, &[]);
        // `delivery.timeout.ms` is an alias of `message.timeout.ms`; take the larger if both.
        let message_timeout_ms: u64 = ["message.timeout.ms", "delivery.timeout.ms"]
            .iter()
            .filter_map(|k| cc.get(k)?.parse().ok())
            .max()
            .unwrap_or(300_000);
        let producer: Arc<BaseProducer<DeliveryContext>> = Arc::new(
            cc.create_with_context(DeliveryContext)
                .map_err(Error::kafka(what))?,
        );
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (producer, stop) = (producer.clone(), stop.clone());
            std::thread::Builder::new()
                .name("freshet-producer-poll".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        producer.poll(POLL);
                    }
                })
                .map_err(|e| Error::Fatal(format!("starting the producer's poll thread: {e}")))?
        };
        Ok(Inner {
            producer,
            stop,
            poller: Some(poller),
            report_timeout: if message_timeout_ms == 0 {
                // 0 = librdkafka retries forever.
                Duration::from_secs(365 * 24 * 3600)
            } else {
                Duration::from_millis(message_timeout_ms) + Duration::from_secs(30)
            },
        })
    }

    /// Enqueues one record, waiting (and collecting reports) while librdkafka's queue is full.
    fn enqueue(
        &self,
        topic: &str,
        rec: RawRecord<'_>,
        ticket: Ticket,
        rx: &mpsc::Receiver<(usize, Outcome)>,
        reports: &mut Vec<(usize, Outcome)>,
    ) -> std::result::Result<(), KafkaError> {
        let mut record: BaseRecord<'_, [u8], [u8], Box<Ticket>> =
            BaseRecord::with_opaque_to(topic, Box::new(ticket));
        if let Some(k) = rec.key {
            record = record.key(k);
        }
        if let Some(v) = rec.value {
            record = record.payload(v);
        }
        if let Some(h) = rec.headers {
            record = record.headers(h);
        }
        if let Some(p) = rec.partition {
            record = record.partition(p);
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    // The polling thread delivers reports meanwhile; wait for one to free room.
                    if let Ok(r) = rx.recv_timeout(Duration::from_millis(10)) {
                        reports.push(r);
                    }
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    fn produce_one(&self, topic: &str, rec: RawRecord<'_>) -> Result<(i32, i64)> {
        let mut batch = Batch::new(self, topic);
        batch.push(rec);
        let mut placed = batch.finish()?;
        placed.pop().ok_or_else(|| {
            Error::Fatal("delivery report missing for a produced record".to_string())
        })
    }

    fn flush(&self) -> Result<()> {
        self.producer
            .flush(FLUSH_TIMEOUT)
            .map_err(Error::kafka("flushing producer"))
    }
}

/// Records produced with many in flight, then awaited together.
struct Batch<'p> {
    inner: &'p Inner,
    topic: &'p str,
    tx: mpsc::Sender<(usize, Outcome)>,
    rx: mpsc::Receiver<(usize, Outcome)>,
    /// Reports received while waiting for queue room.
    early: Vec<(usize, Outcome)>,
    /// (partition, offset) per pushed record, once acknowledged.
    placed: Vec<Option<(i32, i64)>>,
    in_flight: usize,
    failed: usize,
    first: Option<KafkaError>,
}

impl<'p> Batch<'p> {
    fn new(inner: &'p Inner, topic: &'p str) -> Self {
        let (tx, rx) = mpsc::channel();
        Batch {
            inner,
            topic,
            tx,
            rx,
            early: Vec::new(),
            placed: Vec::new(),
            in_flight: 0,
            failed: 0,
            first: None,
        }
    }

    /// Enqueues one record (librdkafka copies key, value and headers).
    fn push(&mut self, rec: RawRecord<'_>) {
        let ticket = Ticket {
            index: self.placed.len(),
            tx: self.tx.clone(),
        };
        self.placed.push(None);
        match self
            .inner
            .enqueue(self.topic, rec, ticket, &self.rx, &mut self.early)
        {
            Ok(()) => self.in_flight += 1,
            Err(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: KafkaError) {
        self.failed += 1;
        self.first.get_or_insert(e);
    }

    fn absorb(&mut self, (index, outcome): (usize, Outcome)) {
        self.in_flight -= 1;
        match outcome {
            Ok(pos) => self.placed[index] = Some(pos),
            Err(e) => self.fail(e),
        }
    }

    /// Waits for every report. Returns each record's (partition, offset) in push order, or the
    /// delivery error if any record failed.
    fn finish(mut self) -> Result<Vec<(i32, i64)>> {
        for r in std::mem::take(&mut self.early) {
            self.absorb(r);
        }
        while self.in_flight > 0 {
            match self.rx.recv_timeout(self.inner.report_timeout) {
                Ok(r) => self.absorb(r),
                Err(_) => {
                    return Err(Error::Timeout {
                        what: format!(
                            "{} delivery report(s) from {:?}",
                            self.in_flight, self.topic
                        ),
                        waited: self.inner.report_timeout,
                    })
                }
            }
        }
        match self.first {
            Some(first) => Err(Error::Delivery {
                topic: self.topic.to_string(),
                failed: self.failed,
                total: self.placed.len(),
                first,
            }),
            None => Ok(self.placed.into_iter().flatten().collect()),
        }
    }
}

fn check_topic(topic: &str) -> Result<()> {
    if topic.is_empty() {
        Err(Error::InvalidArgument("empty topic name".into()))
    } else {
        Ok(())
    }
}

/// The producer behind [`DocumentProducer`] and [`DlqProducer`], replaced by a fresh one after
/// a failed delivery. An idempotent producer whose deliveries timed out while the broker was
/// away can be left unable to produce once it is back (tansu answers the epoch bump that
/// follows with an unknown error, forever); a new producer gets a new producer id and starts
/// clean. The records of the failed call are the caller's to send again.
struct Renewing {
    cfg: KafkaConfig,
    what: &'static str,
    current: RwLock<Arc<Inner>>,
}

impl Renewing {
    fn new(cfg: &KafkaConfig, what: &'static str) -> Result<Self> {
        Ok(Renewing {
            cfg: cfg.clone(),
            what,
            current: RwLock::new(Arc::new(Inner::new(cfg, what)?)),
        })
    }

    fn current(&self) -> Result<Arc<Inner>> {
        self.current
            .read()
            .map(|g| g.clone())
            .map_err(|_| Error::Fatal("producer lock poisoned".into()))
    }

    /// Runs `f` on the current producer; a failed delivery renews it.
    fn run<T>(&self, f: impl FnOnce(&Inner) -> Result<T>) -> Result<T> {
        let inner = self.current()?;
        let out = f(&inner);
        if matches!(out, Err(Error::Delivery { .. } | Error::Timeout { .. })) {
            self.renew(&inner);
        }
        out
    }

    fn renew(&self, failed: &Arc<Inner>) {
        match Inner::new(&self.cfg, self.what) {
            Ok(fresh) => {
                if let Ok(mut g) = self.current.write() {
                    // Another caller may have renewed it already.
                    if Arc::ptr_eq(&g, failed) {
                        *g = Arc::new(fresh);
                        tracing::warn!("a delivery failed: the producer is replaced by a new one");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "a delivery failed and no new producer could be made")
            }
        }
    }
}

/// Publishes keyed documents (lz4, `acks=all`, idempotent). Used by the source connectors, the
/// sample publisher, tests and benchmarks.
pub struct DocumentProducer {
    inner: Renewing,
}

impl std::fmt::Debug for DocumentProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocumentProducer").finish_non_exhaustive()
    }
}

impl DocumentProducer {
    pub fn new(cfg: &KafkaConfig) -> Result<Self> {
        Ok(DocumentProducer {
            inner: Renewing::new(cfg, "creating document producer")?,
        })
    }

    /// Produces one record and waits for its acknowledgement. `value: None` is a tombstone.
    /// Returns the partition and offset it was written at.
    pub fn send(&self, topic: &str, key: &[u8], value: Option<&[u8]>) -> Result<(i32, i64)> {
        check_topic(topic)?;
        self.inner.run(|inner| {
            inner.produce_one(
                topic,
                RawRecord {
                    partition: None,
                    key: Some(key),
                    value,
                    headers: None,
                },
            )
        })
    }

    /// Produces one record as given, to `partition` of `topic`, with its `headers` in order,
    /// and waits for its acknowledgement: a record written again where it was read (a replayed
    /// dead letter). Returns the partition and offset it was written at.
    pub fn send_record(
        &self,
        topic: &str,
        partition: i32,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(String, Option<Vec<u8>>)],
    ) -> Result<(i32, i64)> {
        check_topic(topic)?;
        if partition < 0 {
            return Err(Error::InvalidArgument(format!(
                "negative partition {partition}"
            )));
        }
        let owned = owned_headers(headers);
        self.inner.run(|inner| {
            inner.produce_one(
                topic,
                RawRecord {
                    partition: Some(partition),
                    key,
                    value,
                    headers: Some(owned),
                },
            )
        })
    }

    /// Produces all `records` (key, value, headers; `None` value = tombstone) to `partition`
    /// of `topic`, in order, with many in flight, then waits for every acknowledgement.
    /// Returns where each was written, in input order; [`Error::Delivery`] if any failed (the
    /// others may still have been written). A changelog's batch goes out this way.
    pub fn send_to_partition(
        &self,
        topic: &str,
        partition: i32,
        records: &[HeadedRecord],
    ) -> Result<Vec<(i32, i64)>> {
        check_topic(topic)?;
        if partition < 0 {
            return Err(Error::InvalidArgument(format!(
                "negative partition {partition}"
            )));
        }
        self.inner.run(|inner| {
            let mut batch = Batch::new(inner, topic);
            for (key, value, headers) in records {
                batch.push(RawRecord {
                    partition: Some(partition),
                    key: Some(key),
                    value: value.as_deref(),
                    headers: Some(owned_headers(headers)),
                });
            }
            batch.finish()
        })
    }

    /// Produces all `records` (key, value; `None` value = tombstone) with many in flight, then
    /// waits for every acknowledgement. Returns how many were written; if any failed, returns
    /// [`Error::Delivery`] (the others may still have been written). Records with the same key
    /// keep their relative order.
    pub fn send_many(
        &self,
        topic: &str,
        records: impl IntoIterator<Item = (Vec<u8>, Option<Vec<u8>>)>,
    ) -> Result<usize> {
        Ok(self.send_placed(topic, records)?.len())
    }

    /// [`DocumentProducer::send_many`], returning where each record was written (partition,
    /// offset), in input order.
    pub fn send_placed(
        &self,
        topic: &str,
        records: impl IntoIterator<Item = (Vec<u8>, Option<Vec<u8>>)>,
    ) -> Result<Vec<(i32, i64)>> {
        check_topic(topic)?;
        self.inner.run(|inner| {
            let mut batch = Batch::new(inner, topic);
            for (key, value) in records {
                batch.push(RawRecord {
                    partition: None,
                    key: Some(&key),
                    value: value.as_deref(),
                    headers: None,
                });
            }
            batch.finish()
        })
    }

    /// Waits until everything enqueued has been delivered.
    pub fn flush(&self) -> Result<()> {
        self.inner.current()?.flush()
    }
}

/// `headers` as librdkafka takes them, in order.
fn owned_headers(headers: &[(String, Option<Vec<u8>>)]) -> OwnedHeaders {
    let mut owned = OwnedHeaders::new_with_capacity(headers.len());
    for (k, v) in headers {
        owned = owned.insert(Header {
            key: k,
            value: v.as_deref(),
        });
    }
    owned
}
