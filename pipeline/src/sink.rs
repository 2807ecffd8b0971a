//! The sink stage: one operator (on worker 0) that applies complete epochs to Milvus and then to
//! tantivy, whose commit carries the Kafka offsets it reflects. It holds the capability of every
//! epoch until that epoch is durable in both indexes, so a probe after it tells every worker which
//! offsets it may commit.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Routes every message to worker 0 and applies complete epochs there.
pub fn sink<'s>(
    input: Stream<'s, Time, Vec<SinkMsg>>,
    sinks: Option<Sinks>,
    fatal: Fatal,
) -> Stream<'s, Time, Vec<()>> {
    let mut sinks = sinks;
    input.unary_frontier::<CapacityContainerBuilder<Vec<()>>, _, _, _>(
        Exchange::new(|_m: &SinkMsg| 0u64),
        "Sink",
        move |_cap, _info| {
            let mut stash: BTreeMap<Time, (Capability<Time>, Vec<SinkMsg>)> = BTreeMap::new();
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
                let complete: Vec<Time> = stash
                    .keys()
                    .copied()
                    .take_while(|t| !frontier.less_equal(t))
                    .collect();
                if complete.is_empty() || fatal.lock().map(|f| f.is_some()).unwrap_or(true) {
                    return;
                }
                let Some(sinks) = sinks.as_mut() else {
                    // Only worker 0 has sinks, and all messages are routed to it.
                    stash.clear();
                    return;
                };
                let mut epochs = Vec::new();
                let mut caps = Vec::new();
                for t in &complete {
                    if let Some((cap, msgs)) = stash.remove(t) {
                        epochs.push((*t, msgs));
                        caps.push(cap);
                    }
                }
                if let Err(e) = apply_epochs(sinks, epochs) {
                    let msg = format!("{e:#}");
                    tracing::error!(error = %msg, "sink failed; stopping without committing");
                    if let Ok(mut f) = fatal.lock() {
                        *f = Some(msg);
                    }
                    // Keep the capabilities: nothing after this point may be committed.
                    std::mem::forget(caps);
                    return;
                }
                drop(caps);
            }
        },
    )
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
    if !deletes.is_empty() || !rows.is_empty() {
        let milvus = &sinks.milvus;
        with_retries("milvus", || {
            sinks.runtime.block_on(async {
                if !deletes.is_empty() {
                    milvus.delete(&deletes).await?;
                }
                if !rows.is_empty() {
                    milvus.upsert(&rows).await?;
                }
                Ok::<_, freshet_milvus::Error>(())
            })
        })
        .context("writing to Milvus")?;
        m.sink("milvus", "delete", deletes.len() as u64);
        m.sink("milvus", "upsert", rows.len() as u64);
    }
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
    m.sink("tantivy", "delete", deletes.len() as u64);
    m.sink("tantivy", "upsert", upserts.len() as u64);
    Metrics::outcome(&m.chunks, "upsert", upserts.len() as u64);
    Metrics::outcome(&m.chunks, "delete", deletes.len() as u64);
    m.commits.inc();
    m.durable_epoch.set(last_epoch as i64);
    let now = freshet_tantivy::now_ms() as i64;
    for ts in timestamps {
        m.source_to_durable
            .observe(((now - ts).max(0) as f64) / 1000.0);
    }
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
