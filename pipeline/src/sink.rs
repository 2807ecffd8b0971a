//! The sink stage: one operator (on worker 0) that hands complete epochs to a writer thread,
//! which applies them to Milvus and then to tantivy, whose commit carries the Kafka offsets it
//! reflects. The operator holds the capability of every epoch until that epoch is durable in both
//! indexes, so a probe after it tells every worker which offsets it may commit.

use std::collections::BTreeMap;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use freshet_milvus::MilvusSink;
use freshet_operators::chunk::{Chunk, ChunkKind};
use freshet_operators::dataflow::{SinkRecord, Time};
use freshet_tantivy::{ChunkIndexWriter, CommitPayload};
use serde::{Deserialize, Serialize};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::Capability;
use timely::dataflow::Stream;
use timely::scheduling::SyncActivator;

use crate::metrics::Metrics;

/// What flows into the sink: chunk records, and each worker's read progress for the epoch.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum SinkMsg {
    Record(Box<SinkRecord>),
    Progress {
        next_offsets: BTreeMap<i32, i64>,
        timestamps_ms: Vec<i64>,
    },
}

/// The writers, owned by the sink operator.
pub struct Sinks {
    pub topic: String,
    pub tantivy: ChunkIndexWriter,
    pub milvus: MilvusSink,
    pub runtime: tokio::runtime::Runtime,
    /// Offsets already durable (from the last tantivy commit), updated as epochs commit.
    pub offsets: BTreeMap<i32, i64>,
    pub metrics: Metrics,
}

/// Set when the sink cannot go on; the driver stops the pipeline without committing.
pub type Fatal = Arc<Mutex<Option<String>>>;

/// Routes every message to worker 0, where complete epochs go to a writer thread
/// ([`SinkWriter`]) one batch at a time: while it writes, worker 0 keeps reading and computing,
/// and everything that completes meanwhile forms the next batch. The capabilities of a batch
/// are held until the writer reports it durable.
pub fn sink<'s>(
    input: Stream<'s, Time, Vec<SinkMsg>>,
    sinks: Option<Sinks>,
    fatal: Fatal,
) -> Stream<'s, Time, Vec<()>> {
    let scope = input.scope();
    input.unary_frontier::<CapacityContainerBuilder<Vec<()>>, _, _, _>(
        Exchange::new(|_m: &SinkMsg| 0u64),
        "Sink",
        move |_cap, info| {
            let activator = scope.worker().sync_activator_for(info.address.to_vec());
            let mut writer = sinks.map(|s| SinkWriter::spawn(s, activator));
            let mut stash: BTreeMap<Time, (Capability<Time>, Vec<SinkMsg>)> = BTreeMap::new();
            let mut in_flight: Option<Vec<Capability<Time>>> = None;
            let fail = move |msg: String, caps: Option<Vec<Capability<Time>>>| {
                tracing::error!(error = %msg, "sink failed; stopping without committing");
                if let Ok(mut f) = fatal.lock() {
                    f.get_or_insert(msg);
                }
                // Keep the capabilities: nothing after this point may be committed.
                std::mem::forget(caps);
            };
            move |(input, frontier), output| {
                input.for_each(|cap, data| {
                    for msg in data.drain(..) {
                        let time = *cap.least().expect("a message has a time");
                        stash
                            .entry(time)
                            .or_insert_with(|| {
                                (cap.delayed(&time, output.output_index()), Vec::new())
                            })
                            .1
                            .push(msg);
                    }
                });
                let Some(w) = writer.as_mut() else {
                    // Only worker 0 has sinks, and all messages are routed to it.
                    stash.clear();
                    return;
                };
                if w.failed {
                    return;
                }
                match w.done.try_recv() {
                    Ok(Ok(())) => in_flight = None,
                    Ok(Err(msg)) => {
                        w.failed = true;
                        fail(msg, in_flight.take());
                        return;
                    }
                    Err(mpsc::TryRecvError::Empty) => {}
                    Err(mpsc::TryRecvError::Disconnected) => {
                        if in_flight.is_some() {
                            w.failed = true;
                            fail("the sink writer thread ended".into(), in_flight.take());
                            return;
                        }
                    }
                }
                if in_flight.is_some() {
                    return;
                }
                let complete: Vec<Time> = stash
                    .keys()
                    .copied()
                    .take_while(|t| !frontier.less_equal(t))
                    .collect();
                if complete.is_empty() {
                    return;
                }
                let mut epochs = Vec::new();
                let mut caps = Vec::new();
                for t in &complete {
                    if let Some((cap, msgs)) = stash.remove(t) {
                        epochs.push((*t, msgs));
                        caps.push(cap);
                    }
                }
                if w.jobs.as_ref().is_none_or(|j| j.send(epochs).is_err()) {
                    w.failed = true;
                    fail("the sink writer thread is gone".into(), Some(caps));
                    return;
                }
                in_flight = Some(caps);
            }
        },
    )
}

/// Epochs handed to the writer thread as one batch.
type Batch = Vec<(Time, Vec<SinkMsg>)>;

/// The thread that owns the [`Sinks`] and applies batches in order with [`apply_epochs`],
/// reporting each result and waking the sink operator.
pub struct SinkWriter {
    jobs: Option<mpsc::Sender<Batch>>,
    done: mpsc::Receiver<std::result::Result<(), String>>,
    thread: Option<std::thread::JoinHandle<()>>,
    failed: bool,
}

impl SinkWriter {
    fn spawn(mut sinks: Sinks, activator: SyncActivator) -> SinkWriter {
        let (jobs, inbox) = mpsc::channel::<Batch>();
        let (report, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("freshet-sink".into())
            .spawn(move || {
                for batch in inbox {
                    let result = apply_epochs(&mut sinks, batch).map_err(|e| format!("{e:#}"));
                    let failed = result.is_err();
                    if report.send(result).is_err() {
                        break;
                    }
                    let _ = activator.activate();
                    if failed {
                        break;
                    }
                }
            });
        match thread {
            Ok(t) => SinkWriter {
                jobs: Some(jobs),
                done,
                thread: Some(t),
                failed: false,
            },
            // No thread: the first batch reports the failure through the closed channel.
            Err(e) => {
                tracing::error!(error = %e, "cannot start the sink writer thread");
                SinkWriter {
                    jobs: None,
                    done,
                    thread: None,
                    failed: false,
                }
            }
        }
    }
}

impl Drop for SinkWriter {
    /// Lets the thread finish its batch and close the indexes.
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A chunk and its vector (`None` for parents, which only go to tantivy).
type ChunkRow = (Chunk, Option<Vec<f32>>);

/// Applies complete epochs (in time order) to both indexes, durably.
pub fn apply_epochs(sinks: &mut Sinks, epochs: Vec<(Time, Vec<SinkMsg>)>) -> Result<()> {
    let last_epoch = epochs.last().map(|(t, _)| *t).unwrap_or(0);
    // Final state per chunk id across these epochs: later epochs win.
    let mut latest: BTreeMap<String, Option<ChunkRow>> = BTreeMap::new();
    let mut timestamps = Vec::new();
    for (_time, msgs) in epochs {
        for msg in msgs {
            match msg {
                SinkMsg::Record(record) => match *record {
                    SinkRecord::Upsert { chunk, vector } => {
                        latest.insert(chunk.chunk_id.clone(), Some((chunk, vector)));
                    }
                    SinkRecord::Delete { chunk_id, .. } => {
                        latest.insert(chunk_id, None);
                    }
                    SinkRecord::Failed { error } => {
                        anyhow::bail!("embedding failed: {error}");
                    }
                },
                SinkMsg::Progress {
                    next_offsets,
                    timestamps_ms,
                } => {
                    for (p, o) in next_offsets {
                        let e = sinks.offsets.entry(p).or_insert(o);
                        *e = (*e).max(o);
                    }
                    timestamps.extend(timestamps_ms);
                }
            }
        }
    }
    let mut deletes = Vec::new();
    let mut upserts = Vec::new();
    let mut rows = Vec::new();
    for (id, state) in latest {
        match state {
            None => deletes.push(id),
            Some((chunk, vector)) => {
                if chunk.kind == ChunkKind::Leaf {
                    match vector {
                        Some(v) => rows.push((chunk.clone(), v)),
                        None => anyhow::bail!("leaf chunk {id} reached the sink without a vector"),
                    }
                } else {
                    // A parent may replace a leaf of the same id only in theory (ids include the
                    // kind); delete from Milvus to be safe.
                    deletes.push(id.clone());
                }
                upserts.push(chunk);
            }
        }
    }
    let m = &sinks.metrics;
    Metrics::observe_ages(&m.source_to_sink, &timestamps);
    if !deletes.is_empty() || !rows.is_empty() {
        let milvus = &sinks.milvus;
        let started = Instant::now();
        with_retries("milvus", || {
            sinks.runtime.block_on(milvus.replace(&deletes, &rows))
        })
        .context("writing to Milvus")?;
        m.sink_write("milvus", started.elapsed().as_secs_f64());
        m.sink("milvus", "delete", deletes.len() as u64);
        m.sink("milvus", "upsert", rows.len() as u64);
    }
    let started = Instant::now();
    sinks
        .tantivy
        .apply(&upserts, &deletes)
        .context("writing to tantivy")?;
    let mut offsets = BTreeMap::new();
    offsets.insert(sinks.topic.clone(), sinks.offsets.clone());
    let payload = CommitPayload::new(offsets, last_epoch);
    sinks
        .tantivy
        .commit(&payload)
        .context("committing tantivy")?;
    m.sink_write("tantivy", started.elapsed().as_secs_f64());
    m.sink("tantivy", "delete", deletes.len() as u64);
    m.sink("tantivy", "upsert", upserts.len() as u64);
    Metrics::outcome(&m.chunks, "upsert", upserts.len() as u64);
    Metrics::outcome(&m.chunks, "delete", deletes.len() as u64);
    m.commits.inc();
    m.durable_epoch.set(last_epoch as i64);
    Metrics::observe_ages(&m.source_to_durable, &timestamps);
    tracing::debug!(
        epoch = last_epoch,
        upserts = upserts.len(),
        deletes = deletes.len(),
        "epochs durable"
    );
    Ok(())
}

fn with_retries<T, E: std::fmt::Display>(
    what: &str,
    mut f: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let mut attempt = 0;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if attempt < 3 => {
                attempt += 1;
                tracing::warn!(error = %e, attempt, "{what} write failed, retrying");
                std::thread::sleep(Duration::from_millis(500 * attempt));
            }
            Err(e) => return Err(e),
        }
    }
}
