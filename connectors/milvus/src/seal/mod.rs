//! [`Sealer`]: flushes a collection that is being written to, off the write path, so that
//! Milvus seals its growing segments and searches them through their index.
//!
//! The writer tells the sealer how many rows each write wrote ([`Sealer::wrote`], which never
//! blocks); a thread of the sealer's own, with its own connection to Milvus, flushes the
//! collection when the [`FlushPolicy`] asks ([`policy`]). Writes go on while a flush runs: a
//! flush only seals the segments that hold rows already written and acknowledged, so it never
//! delays, reorders or acknowledges a write. A failed flush is logged and tried again later.
//!
//! What it does is counted in [`SealMetrics`] (`milvus_flushes_total`,
//! `milvus_unflushed_rows`) and, through the connector's [`MilvusMetrics`], in
//! `milvus_requests_total{op="flush"}`.

pub mod policy;
#[cfg(test)]
mod tests;

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Instant;

use freshet_metrics::Registrar;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::config::MilvusConfig;
use crate::error::Result;
use crate::metrics::MilvusMetrics;
use crate::metrics::Op;
use crate::sink::MilvusSink;
pub use policy::{Decision, FlushPolicy, SealState, Trigger};

/// One segment of the collection as the query nodes hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedSegment {
    pub id: i64,
    pub rows: i64,
    /// Growing (searched by brute force) or sealed (`Sealed`, `Flushed`, `Flushing`). Milvus
    /// 2.3.5 lists sealed segments only.
    pub growing: bool,
    /// The name of the index the query node searches it through (empty: none).
    pub index_name: String,
}

impl MilvusSink {
    /// The collection's segments loaded on the query nodes (`GetQuerySegmentInfo`, counted as
    /// `op="describe"`).
    pub async fn loaded_segments(&self) -> Result<Vec<LoadedSegment>> {
        use milvus::v2::prelude::{ListQuerySegmentsRequest, SegmentState};
        let req = ListQuerySegmentsRequest::builder()
            .collection_name(self.coll())
            .build()?;
        let resp = self
            .rpc(Op::Describe, self.client.list_query_segments(req))
            .await?;
        Ok(resp
            .segments()
            .iter()
            .map(|s| LoadedSegment {
                id: s.get_segment_id(),
                rows: s.get_row_count(),
                growing: s.get_state() == SegmentState::Growing,
                index_name: s.get_index_name().to_owned(),
            })
            .collect())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlushLabel {
    trigger: &'static str,
    outcome: &'static str,
}

/// The sealer's metrics: `milvus_flushes_total{trigger, outcome}` and `milvus_unflushed_rows`.
#[derive(Clone, Debug)]
pub struct SealMetrics {
    flushes: Family<FlushLabel, Counter>,
    unflushed: Gauge,
}

impl SealMetrics {
    /// Registers the sealer's metrics with `r`.
    pub fn register(r: &mut Registrar) -> SealMetrics {
        SealMetrics {
            flushes: r.counters(
                "milvus_flushes",
                "Flushes of the collection by the sealing policy, by trigger (rows, age, retry) and outcome (ok, error)",
            ),
            unflushed: r.gauge(
                "milvus_unflushed_rows",
                "Rows written to Milvus (inserted or deleted) that no finished flush covers yet",
            ),
        }
    }
}

enum Msg {
    Wrote(u64),
    Stop,
}

/// Flushes one collection by a [`FlushPolicy`], on a thread of its own. Dropping it stops the
/// thread once a flush in progress ends (without waiting for it).
pub struct Sealer {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

impl Sealer {
    /// The policy of `cfg` (`flush_rows`, `flush_interval`); `None` when it never flushes.
    pub fn policy(cfg: &MilvusConfig) -> Option<FlushPolicy> {
        let p = FlushPolicy {
            rows: cfg.flush_rows,
            interval: (!cfg.flush_interval.is_zero()).then_some(cfg.flush_interval),
        };
        p.enabled().then_some(p)
    }

    /// Starts the sealer of `cfg`'s collection, or `None` when its policy never flushes. The
    /// thread connects on its first flush (and again after a failed one).
    pub fn start(
        cfg: MilvusConfig,
        milvus: Option<MilvusMetrics>,
        metrics: Option<SealMetrics>,
    ) -> std::io::Result<Option<Sealer>> {
        let Some(policy) = Sealer::policy(&cfg) else {
            return Ok(None);
        };
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("milvus-sealer".into())
            .spawn(move || run(cfg, policy, rx, milvus, metrics))?;
        Ok(Some(Sealer {
            tx,
            thread: Some(thread),
        }))
    }

    /// `rows` rows were written (inserted or deleted) and acknowledged. Never blocks.
    pub fn wrote(&self, rows: u64) {
        if rows > 0 {
            // A stopped thread means no more flushes, never a lost write.
            let _ = self.tx.send(Msg::Wrote(rows));
        }
    }
}

impl Drop for Sealer {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        // Detached: a flush in progress may take up to the RPC timeout, and stopping must not.
        drop(self.thread.take());
    }
}

/// The sealer's thread: waits for writes and deadlines, flushes when the policy says.
fn run(
    cfg: MilvusConfig,
    policy: FlushPolicy,
    rx: Receiver<Msg>,
    milvus: Option<MilvusMetrics>,
    metrics: Option<SealMetrics>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the Milvus sealer's runtime; the collection is not flushed by the sealing policy");
            return;
        }
    };
    let collection = cfg.collection.clone();
    let mut conn: Option<MilvusSink> = None;
    let mut state = SealState::new(policy);
    loop {
        let now = Instant::now();
        let msg = match state.decide(now) {
            Decision::Flush(trigger) => {
                let rows = state.started();
                let started = Instant::now();
                let res = runtime.block_on(async {
                    if conn.is_none() {
                        let mut sink = MilvusSink::connect(cfg.clone()).await?;
                        if let Some(m) = &milvus {
                            sink = sink.with_metrics(m.clone());
                        }
                        conn = Some(sink);
                    }
                    match &conn {
                        Some(sink) => sink.flush().await,
                        None => Ok(()),
                    }
                });
                let ok = res.is_ok();
                match res {
                    Ok(()) => tracing::debug!(
                        %collection, rows, trigger = trigger.as_str(),
                        ms = started.elapsed().as_millis() as u64,
                        "flushed the collection"
                    ),
                    Err(e) => {
                        conn = None;
                        tracing::warn!(
                            %collection, rows, trigger = trigger.as_str(), error = %e,
                            "flushing the collection failed; its growing segments stay searched by brute force until a flush succeeds (tried again)"
                        );
                    }
                }
                state.finished(ok, Instant::now());
                if let Some(m) = &metrics {
                    let outcome = if ok { "ok" } else { "error" };
                    m.flushes
                        .get_or_create(&FlushLabel {
                            trigger: trigger.as_str(),
                            outcome,
                        })
                        .inc();
                }
                None
            }
            Decision::WaitUntil(at) => match rx.recv_timeout(at.saturating_duration_since(now)) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => Some(Msg::Stop),
            },
            Decision::Idle => Some(rx.recv().unwrap_or(Msg::Stop)),
        };
        match msg {
            Some(Msg::Stop) => return,
            Some(Msg::Wrote(rows)) => {
                state.wrote(rows, Instant::now());
                // Take whatever else is queued before deciding again.
                while let Ok(m) = rx.try_recv() {
                    match m {
                        Msg::Wrote(rows) => state.wrote(rows, Instant::now()),
                        Msg::Stop => return,
                    }
                }
            }
            None => {}
        }
        if let Some(m) = &metrics {
            m.unflushed
                .set(i64::try_from(state.unflushed()).unwrap_or(i64::MAX));
        }
    }
}
