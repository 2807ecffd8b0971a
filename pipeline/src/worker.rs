//! One timely worker of `freshet run`: its partition readers (one per topic) and model, the
//! dataflow it builds (chunk deltas → embed → sink), and the loop that feeds the dataflow one
//! epoch per poll, holds back while too many of its epochs are not durable, commits the group
//! offsets of durable epochs, and drains on stop. The dataflow closure only builds operators;
//! the loops, the commits and shutdown are here.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use freshet_embedding::{CachedEmbedder, EmbeddingConfig};
use freshet_kafka::{KafkaConfig, PartitionReader};
use freshet_operators::dataflow::{chunk_deltas, embed_deltas, DocUpdate, Time, BOOTSTRAP_TIME};
use freshet_operators::embed::Embedder;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::vec::Map;
use timely::dataflow::operators::{Concat, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use timely::worker::Worker;

use crate::config::PipelineConfig;
use crate::embedder::{Models, SharedCache, WorkerEmbedder};
use crate::endpoint::Readiness;
use crate::epochs::{self, next_epoch, Poll, ReadEpochs};
use crate::metrics::Metrics;
use crate::preflight::IndexedState;
use crate::sink::plan::{Offsets, TopicPartition};
use crate::sink::{sink, Fatal, SinkMsg, Sinks};
use crate::source::{Processing, Source, Sources};
use crate::topics::{assign, Topic};

/// What every worker of the process shares.
pub struct Shared {
    pub pipeline: PipelineConfig,
    pub kafka: KafkaConfig,
    pub embedding: EmbeddingConfig,
    /// The topics read, each with its record format.
    pub topics: Vec<Topic>,
    /// Each topic's partitions, in the order of `topics`.
    pub partitions: Vec<Vec<i32>>,
    /// Next offset per topic partition from the last tantivy commit (process 0; others resume
    /// from the group's offsets).
    pub start_offsets: Offsets,
    pub cache: SharedCache,
    /// The embedding models the workers take turns on.
    pub models: Models,
    pub processing: Arc<Processing>,
    /// The records quarantined, and the workers' slots for the record each prepares.
    pub quarantine: crate::quarantine::Started,
    pub metrics: Metrics,
    pub stop: Arc<AtomicBool>,
    pub fatal: Fatal,
    /// Process 0's sinks, taken by worker 0.
    pub sinks: Mutex<Option<Sinks>>,
    /// The indexed state, replayed by worker 0.
    pub bootstrap: Mutex<Option<IndexedState>>,
    pub ready: Readiness,
    /// The newest epoch at which a worker of the process read records.
    pub read_epochs: ReadEpochs,
}

impl Shared {
    /// Records the first fatal error; every worker stops without committing further.
    fn fail(&self, worker: usize, msg: String) {
        tracing::error!(worker, "{msg}");
        if let Ok(mut f) = self.fatal.lock() {
            f.get_or_insert(msg);
        }
    }

    fn is_fatal(&self) -> bool {
        self.fatal.lock().map(|f| f.is_some()).unwrap_or(true)
    }
}

/// The dataflow's inputs and the epoch they are at.
struct Inputs {
    docs: InputHandle<Time, CapacityContainerBuilder<Vec<DocUpdate>>>,
    progress: InputHandle<Time, CapacityContainerBuilder<Vec<SinkMsg>>>,
    epoch: Time,
}

impl Inputs {
    fn advance(&mut self) {
        self.advance_to(next_epoch(self.epoch, freshet_operators::clock::now_ms()));
    }

    fn advance_to(&mut self, epoch: Time) {
        self.epoch = epoch;
        self.docs.advance_to(self.epoch);
        self.progress.advance_to(self.epoch);
    }
}

/// Runs one worker until the process is told to stop (then drains) or a fatal error.
pub fn run_worker(worker: &mut Worker, shared: &Shared) {
    let index = worker.index();
    // First, so that the threads the worker starts (model, consumer, sink) inherit it.
    match crate::priority::lower_thread(shared.pipeline.nice) {
        Ok(n) if index == 0 => tracing::info!(nice = n, "ingest threads' CPU priority"),
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(worker = index, error = %e, "could not lower the worker's CPU priority; it runs at the priority it has")
        }
    }
    let mut source = open_sources(shared, index, worker.peers());
    shared.ready.worker_reading();
    let embedder = load_embedder(shared, index);
    let sinks = if index == 0 {
        let taken = shared.sinks.lock().ok().and_then(|mut s| s.take());
        if taken.is_none() {
            shared.fail(index, "worker 0 has no sinks to write to".into());
        }
        taken
    } else {
        None
    };
    let mut inputs = Inputs {
        docs: InputHandle::new(),
        progress: InputHandle::new(),
        epoch: BOOTSTRAP_TIME,
    };
    let probe = ProbeHandle::new();
    worker.dataflow::<Time, _, _>(|scope| {
        let deltas = chunk_deltas(inputs.docs.to_stream(scope));
        let msgs = embed_deltas(deltas, embedder)
            .map(|r| SinkMsg::Record(Box::new(r)))
            .concat(inputs.progress.to_stream(scope));
        sink(msgs, sinks, shared.fatal.clone()).probe_with(&probe);
    });
    if index == 0 {
        if let Some(docs) = shared.bootstrap.lock().ok().and_then(|mut b| b.take()) {
            tracing::info!(
                documents = docs.len(),
                "replaying indexed state into the dataflow"
            );
            for (doc, chunks) in docs {
                inputs.docs.send((doc, Some(chunks), BOOTSTRAP_TIME));
            }
        }
    }
    inputs.advance();
    let mut pending = VecDeque::new();
    feed(
        worker,
        shared,
        &mut inputs,
        &probe,
        source.as_mut(),
        &mut pending,
    );
    drain(
        worker,
        shared,
        inputs,
        &probe,
        source.as_ref(),
        &mut pending,
    );
}

/// This worker's share of the topics' partitions ([`assign`]), if any: a reader per topic.
fn open_sources(shared: &Shared, index: usize, peers: usize) -> Option<Sources> {
    let mut sources = Vec::new();
    for (t, mine) in assign(&shared.partitions, index, peers)
        .into_iter()
        .enumerate()
    {
        let Some(topic) = shared.topics.get(t).filter(|_| !mine.is_empty()) else {
            continue;
        };
        let start: BTreeMap<i32, i64> = mine
            .iter()
            .filter_map(|p| {
                let tp = TopicPartition {
                    topic: t,
                    partition: *p,
                };
                shared.start_offsets.get(&tp).map(|o| (*p, *o))
            })
            .collect();
        match PartitionReader::new(&shared.kafka, &topic.name, &mine, &start) {
            Ok(r) => sources.push(Source::new(r, t, topic.format.clone())),
            Err(e) => {
                shared.fail(
                    index,
                    format!(
                        "worker {index}: cannot read partitions {mine:?} of {}: {e}",
                        topic.name
                    ),
                );
                return None;
            }
        }
    }
    let local = index % shared.pipeline.workers.max(1);
    let sources = Sources::new(
        sources,
        shared.processing.clone(),
        shared.metrics.clone(),
        shared.quarantine.quarantine.clone(),
        shared.quarantine.slot(local),
    );
    (!sources.is_empty()).then_some(sources)
}

/// This worker's model ([`Models`]) behind the process's cache.
fn load_embedder(shared: &Shared, index: usize) -> WorkerEmbedder {
    let local = index % shared.pipeline.workers.max(1);
    let model = match shared.models.for_worker(local, &shared.metrics) {
        Ok(m) => {
            shared.metrics.board.model_loaded(m.model_id());
            Some(CachedEmbedder::new(
                m,
                shared.cache.clone(),
                shared.embedding.batch_size,
            ))
        }
        Err(e) => {
            shared.metrics.board.model_failed(e.clone());
            shared.fail(
                index,
                format!("worker {index}: loading the embedding model: {e}"),
            );
            None
        }
    };
    let stall = crate::stall::Stall::new(
        Duration::from_secs(shared.pipeline.stall_limit_s),
        shared.stop.clone(),
        shared.ready.clone(),
        shared.metrics.clone(),
    );
    WorkerEmbedder::new(model, shared.metrics.clone(), stall)
}

/// Reads one epoch per poll until stopped: sends the updates and the read progress, holds back
/// while `max_epochs_in_flight` of this worker's epochs are not durable, and commits the group
/// offsets of the durable ones. Between polls the worker parks, not inside Kafka's poll: it
/// wakes when a record is fetched, when another worker sends it data or progress, when the sink's
/// writer reports a batch durable, or when time has to move on ([`epochs::advance`]), so that an
/// update passes each step of the dataflow as soon as the step before it is done.
fn feed(
    worker: &mut Worker,
    shared: &Shared,
    inputs: &mut Inputs,
    probe: &ProbeHandle<Time>,
    mut source: Option<&mut Sources>,
    pending: &mut VecDeque<(Time, Offsets)>,
) {
    let index = worker.index();
    let p = &shared.pipeline;
    let tick = epochs::idle_tick(p);
    let mut in_flight: VecDeque<Time> = VecDeque::new();
    if let Some(src) = source.as_deref_mut() {
        src.wake_on_records(std::thread::current());
    }
    let mut advanced = Instant::now();
    // The lag is measured at once, then every 5 s.
    let mut last_lag: Option<Instant> = None;
    while !shared.stop.load(Ordering::SeqCst) && !shared.is_fatal() {
        let mut read_any = false;
        if let Some(src) = source.as_deref_mut() {
            match src.poll(p.batch_max_records, Duration::ZERO) {
                Ok(batch) => {
                    read_any = batch.records_read > 0;
                    Metrics::observe_ages(&shared.metrics.source_to_read, &batch.timestamps_ms);
                    for (id, update) in batch.updates {
                        inputs.docs.send((id, update, inputs.epoch));
                    }
                    if !batch.next_offsets.is_empty() {
                        pending.push_back((inputs.epoch, batch.next_offsets.clone()));
                        inputs.progress.send(SinkMsg::Progress {
                            next_offsets: batch.next_offsets,
                            timestamps_ms: batch.timestamps_ms,
                            records: batch.records,
                            refused: batch.refused,
                            removals: batch.removals,
                        });
                    }
                }
                Err(e) => {
                    shared.metrics.board.kafka_failed(format!("{e:#}"));
                    shared.fail(index, format!("worker {index}: {e:#}"));
                    break;
                }
            }
        }
        // Time moves on after every poll that read something, at once when another worker of
        // the process read (an idle worker must not hold back the others' epochs), and every
        // tick otherwise. Only epochs that carry records count against `max_epochs_in_flight`:
        // empty ones cost nothing.
        if read_any {
            shared.read_epochs.read_at(inputs.epoch);
        }
        let poll = Poll {
            epoch: inputs.epoch,
            read: read_any,
            newest_read: shared.read_epochs.newest(),
            held: advanced.elapsed(),
            tick,
            now_ms: freshet_operators::clock::now_ms(),
        };
        if let Some(next) = epochs::advance(poll) {
            if read_any {
                in_flight.push_back(inputs.epoch);
            }
            inputs.advance_to(next);
            advanced = Instant::now();
            worker.step();
        } else {
            worker.step_or_park(Some(tick.saturating_sub(advanced.elapsed())));
        }
        // Back-pressure: park (not spin) while too many of this worker's epochs are not
        // durable yet, so the cores stay with the embedding model and the sink.
        loop {
            while in_flight.front().is_some_and(|e| !probe.less_equal(e)) {
                in_flight.pop_front();
            }
            if in_flight.len() < p.max_epochs_in_flight as usize || shared.is_fatal() {
                break;
            }
            worker.step_or_park(Some(Duration::from_millis(5)));
        }
        commit_durable(shared, probe, pending, source.as_deref(), index, false);
        if last_lag.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
            last_lag = Some(Instant::now());
            if let Some(src) = source.as_deref() {
                report_lag(src, &shared.metrics);
            }
        }
    }
}

/// Closes the inputs and lets everything already read become durable (up to
/// `shutdown_timeout_s`), then commits what is durable. After a fatal error or at the deadline,
/// what is not durable stays uncommitted and is replayed after a restart.
fn drain(
    worker: &mut Worker,
    shared: &Shared,
    inputs: Inputs,
    probe: &ProbeHandle<Time>,
    source: Option<&Sources>,
    pending: &mut VecDeque<(Time, Offsets)>,
) {
    let index = worker.index();
    if shared.stop.load(Ordering::SeqCst) {
        shared.ready.stopping();
    }
    inputs.docs.close();
    inputs.progress.close();
    let deadline = Instant::now() + Duration::from_secs(shared.pipeline.shutdown_timeout_s);
    while !probe.done() && !shared.is_fatal() && Instant::now() < deadline {
        worker.step_or_park(Some(Duration::from_millis(5)));
    }
    commit_durable(shared, probe, pending, source, index, true);
    if let Some(src) = source {
        report_lag(src, &shared.metrics);
    }
    if !probe.done() {
        tracing::warn!(
            worker = index,
            "stopping with epochs not durable; they will be replayed"
        );
        // Drop the dataflow so that the worker can exit.
        for id in worker.installed_dataflows() {
            worker.drop_dataflow(id);
        }
    }
}

/// Commits the Kafka offsets of every epoch the probe reports durable: in the background while
/// running (a round trip per epoch would hold up the worker), synchronously when stopping.
/// Nothing after a fatal error: the probe may have moved on without a durable write.
fn commit_durable(
    shared: &Shared,
    probe: &ProbeHandle<Time>,
    pending: &mut VecDeque<(Time, Offsets)>,
    source: Option<&Sources>,
    index: usize,
    sync: bool,
) {
    if shared.is_fatal() {
        return;
    }
    let mut offsets = BTreeMap::new();
    while let Some((e, _)) = pending.front() {
        if probe.less_equal(e) {
            break;
        }
        if let Some((_, o)) = pending.pop_front() {
            offsets.extend(o);
        }
    }
    let Some(src) = source.filter(|_| !offsets.is_empty()) else {
        return;
    };
    // The index commit already holds these offsets; the group commit is where processes other
    // than 0 resume, and what lag monitoring reads; a failure is logged, not fatal.
    fail::fail_point!("offsets.before_commit");
    for e in src.commit(&offsets, sync) {
        tracing::warn!(worker = index, error = %format!("{e:#}"), "committing Kafka offsets failed");
    }
    fail::fail_point!("offsets.after_commit");
}

/// The lag of this worker's partitions, in `consumer_lag_records` and on the status board.
fn report_lag(sources: &Sources, metrics: &Metrics) {
    for reader in sources.readers() {
        let (high, committed) = match (reader.high_watermarks(), reader.committed()) {
            (Ok(h), Ok(c)) => (h, c),
            (Err(e), _) | (_, Err(e)) => {
                metrics.board.kafka_failed(format!(
                    "asking for the offsets of {}: {e:#}",
                    reader.topic()
                ));
                continue;
            }
        };
        for (p, h) in high {
            metrics
                .board
                .lag(reader.topic(), p, committed.get(&p).copied(), h);
            let next = committed.get(&p).copied().unwrap_or(0).max(0);
            metrics
                .consumer_lag
                .get_or_create(&crate::metrics::Partition {
                    topic: reader.topic().to_string(),
                    partition: p.to_string(),
                })
                .set((h - next).max(0));
        }
    }
}
