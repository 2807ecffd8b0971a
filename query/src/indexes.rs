//! The node's view of one generation's two indexes and its query model: a tantivy reader that
//! picks up every pipeline commit (on a file notification, polled every `reload_interval_ms`
//! besides; `reload.rs`) and the snapshot of the
//! commit served, a Milvus connection (re-established in the background while Milvus is down),
//! and the pool of query embedders of the generation's model (`models.rs`). One [`Indexes`] is
//! one index generation: `serving.rs` holds the one served and opens the next beside it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use freshet_config::serving::Generation;
use freshet_core::clock::now_ms;
use freshet_milvus::{MilvusConfig, MilvusSink};
use freshet_tantivy::{Bm25Params, ChunkIndexReader, Snapshot};
use serde::Serialize;

use crate::metrics::{Metrics, TriggerLabels};
pub use crate::models::{EmbedderPool, EmbedderUnavailable};

/// The newest pipeline commit this node serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Freshness {
    pub epoch: u64,
    /// When the pipeline committed it (Unix ms).
    pub committed_at_ms: u64,
    /// When this node made it searchable (Unix ms).
    pub visible_at_ms: u64,
}

/// Why an index cannot be used right now (for `/readyz` and 503 answers).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Status {
    pub tantivy: Option<String>,
    pub milvus: Option<String>,
}

/// Both indexes of one generation, kept current by background tasks.
pub struct Indexes {
    /// The generation of the serving pointer these are (`None`: `[tantivy]` and `[milvus]`).
    generation: Option<Generation>,
    /// Whether these indexes set the node's index metrics and readiness (the generation served
    /// does; one being opened beside it does not).
    reporting: AtomicBool,
    /// Set when the node no longer needs these indexes: the background tasks end (requests
    /// that pinned them finish on what they hold).
    stopped: AtomicBool,
    tantivy: RwLock<Option<Arc<ChunkIndexReader>>>,
    /// The commit served: every request reads one snapshot (searches and loads alike), and
    /// `GET /v1/index` reports its payload.
    served: RwLock<Option<Arc<Snapshot>>>,
    milvus: RwLock<Option<Arc<MilvusSink>>>,
    freshness: RwLock<Freshness>,
    /// The Kafka offsets of the commit searches see (topic → partition → next offset to read).
    served_offsets: RwLock<BTreeMap<String, BTreeMap<i32, i64>>>,
    status: RwLock<Status>,
    /// The id of the tantivy index served, which the collection must be bound to.
    index_id: RwLock<Option<String>>,
    /// Why the collection may not be searched although it answers (it belongs to another
    /// index).
    mismatch: RwLock<Option<String>>,
    /// Wakes the Milvus task to re-check the collection now (after a failed search).
    milvus_recheck: tokio::sync::Notify,
    /// Wakes `/v1/index/wait`'s waiters when the commit served changes.
    advanced: tokio::sync::Notify,
    /// The query model of this generation (its collection's vector space); dropped with the
    /// last request that pinned these indexes.
    embedders: Option<Arc<EmbedderPool>>,
    metrics: Metrics,
}

impl Indexes {
    pub fn new(metrics: Metrics) -> Arc<Indexes> {
        Indexes::for_generation(None, None, true, metrics)
    }

    /// The indexes of `generation`, searched with vectors of `embedders`; `reporting`: whether
    /// they set the node's index metrics.
    pub fn for_generation(
        generation: Option<Generation>,
        embedders: Option<Arc<EmbedderPool>>,
        reporting: bool,
        metrics: Metrics,
    ) -> Arc<Indexes> {
        Arc::new(Indexes {
            generation,
            reporting: AtomicBool::new(reporting),
            stopped: AtomicBool::new(false),
            tantivy: RwLock::new(None),
            served: RwLock::new(None),
            milvus: RwLock::new(None),
            freshness: RwLock::new(Freshness::default()),
            served_offsets: RwLock::new(BTreeMap::new()),
            status: RwLock::new(Status {
                tantivy: Some("not opened yet".into()),
                milvus: Some("not connected yet".into()),
            }),
            index_id: RwLock::new(None),
            mismatch: RwLock::new(None),
            milvus_recheck: tokio::sync::Notify::new(),
            advanced: tokio::sync::Notify::new(),
            embedders,
            metrics,
        })
    }

    /// The serving pointer's generation these indexes are, if any.
    pub fn generation(&self) -> Option<&Generation> {
        self.generation.as_ref()
    }
    /// The query embedders of this generation's model: embed a pinned request's queries with
    /// these, never another generation's.
    pub fn embedders(&self) -> Option<&Arc<EmbedderPool>> {
        self.embedders.as_ref()
    }
    /// The generation's name (`None` without a serving pointer).
    pub fn generation_name(&self) -> Option<String> {
        self.generation.as_ref().map(|g| g.name.clone())
    }
    fn reports(&self) -> bool {
        self.reporting.load(Ordering::SeqCst)
    }
    /// Makes these indexes the ones the node's metrics and readiness describe (or not), and
    /// brings the metrics up to their state at once.
    pub fn set_reporting(&self, on: bool) {
        self.reporting.store(on, Ordering::SeqCst);
        if !on {
            return;
        }
        if let Some(s) = self.snapshot() {
            self.metrics.index_chunks.set(s.count() as i64);
        }
        let f = self.freshness();
        self.metrics.index_epoch.set(f.epoch as i64);
        self.metrics
            .index_commit_timestamp
            .set(f.committed_at_ms as f64 / 1000.0);
        self.set_status(|_| {});
    }
    /// Ends the background tasks of these indexes (within a poll interval).
    pub fn stop(&self) {
        self.reporting.store(false, Ordering::SeqCst);
        self.stopped.store(true, Ordering::SeqCst);
    }
    fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
    /// Both indexes answer: a commit loaded, Milvus connected and bound to it.
    pub fn is_ready(&self) -> bool {
        let s = self.status();
        self.snapshot().is_some() && s.tantivy.is_none() && s.milvus.is_none()
    }

    pub fn tantivy(&self) -> Option<Arc<ChunkIndexReader>> {
        self.tantivy.read().ok().and_then(|g| g.clone())
    }
    /// The snapshot of the commit served (`None` until the index is open and loaded): pin it
    /// for a whole request.
    pub fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.served.read().ok().and_then(|g| g.clone())
    }
    /// The snapshot to search, or why there is none (the index not open or not loaded yet).
    pub fn snapshot_to_search(&self) -> std::result::Result<Arc<Snapshot>, String> {
        self.snapshot().ok_or_else(|| {
            self.status()
                .tantivy
                .unwrap_or_else(|| "tantivy index not open".into())
        })
    }
    pub fn milvus(&self) -> Option<Arc<MilvusSink>> {
        self.milvus.read().ok().and_then(|g| g.clone())
    }
    /// The collection to search, or why there is none to search: not connected, or bound to
    /// another index than the tantivy index served.
    pub fn milvus_to_search(&self) -> std::result::Result<Arc<MilvusSink>, String> {
        if let Some(why) = self.mismatch.read().ok().and_then(|g| g.clone()) {
            return Err(why);
        }
        self.milvus().ok_or_else(|| {
            self.status()
                .milvus
                .unwrap_or_else(|| "milvus not connected".into())
        })
    }
    pub fn freshness(&self) -> Freshness {
        self.freshness.read().map(|f| *f).unwrap_or_default()
    }
    /// Notified whenever the commit served changes (its offsets with it).
    pub fn advanced(&self) -> &tokio::sync::Notify {
        &self.advanced
    }

    /// The next offset to read of `topic`'s `partition` in the commit searches see: every
    /// record below it is searchable (or was refused to the dead-letter topic). `None` before
    /// the pipeline has committed anything of that partition.
    pub fn served_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        let offsets = self.served_offsets.read().ok()?;
        offsets.get(topic)?.get(&partition).copied()
    }
    pub fn status(&self) -> Status {
        self.status.read().map(|s| s.clone()).unwrap_or_default()
    }
    fn set_status(&self, f: impl FnOnce(&mut Status)) {
        if let Ok(mut s) = self.status.write() {
            f(&mut s);
            let ready = s.tantivy.is_none() && s.milvus.is_none();
            if self.reports() {
                self.metrics.ready.set(ready as i64);
            }
        }
    }
    /// Reports a failed Milvus call: the background task re-checks the collection at once and
    /// readiness follows what it finds. The failure alone does not make the node unready, so a
    /// request that Milvus rejects cannot take the node out of service.
    pub fn milvus_failed(&self) {
        self.milvus_recheck.notify_one();
    }

    /// Loads each new commit of the tantivy index as soon as a file notification says it is
    /// there (`notify`), and looks every `interval` besides (a thread; runs until these indexes
    /// are stopped).
    pub fn spawn_tantivy_reloader(
        self: &Arc<Self>,
        path: std::path::PathBuf,
        interval: Duration,
        bm25: Bm25Params,
        notify: bool,
    ) {
        let me = self.clone();
        std::thread::Builder::new()
            .name("tantivy-reload".into())
            .spawn(move || {
                let mut watch = crate::reload::CommitWatch::new(&path, notify);
                let mut woke = crate::reload::Wake::Polled;
                while !me.stopped() {
                    if me.reload_tick(&path, bm25) && me.reports() {
                        let trigger = woke.label().into();
                        me.metrics
                            .index_reloads
                            .get_or_create(&TriggerLabels { trigger })
                            .inc();
                    }
                    woke = watch.wait(interval);
                }
            })
            .expect("spawning a thread");
    }

    /// One look: opens the index if needed and loads a new commit if there is one; returns
    /// whether it loaded one.
    pub(crate) fn reload_tick(&self, path: &std::path::Path, bm25: Bm25Params) -> bool {
        let reader = match self.tantivy() {
            Some(r) => r,
            None => match ChunkIndexReader::open_manual(path).and_then(|r| r.with_bm25(bm25)) {
                Ok(r) => {
                    let r = Arc::new(r);
                    if let Ok(mut g) = self.tantivy.write() {
                        *g = Some(r.clone());
                    }
                    tracing::info!(path = %path.display(), "tantivy index opened");
                    r
                }
                Err(e) => {
                    self.set_status(|s| s.tantivy = Some(format!("tantivy index: {e}")));
                    return false;
                }
            },
        };
        let payload = match reader.last_payload() {
            Ok(p) => p,
            Err(e) => {
                self.set_status(|s| s.tantivy = Some(format!("tantivy metadata: {e}")));
                return false;
            }
        };
        // The newest commit: none for an index without a pipeline commit, which may be one
        // re-created in place of the index served so far (the reader reads through the path);
        // that is served as it is, empty, rather than the deleted index's last state.
        let (epoch, committed_at_ms) = payload
            .as_ref()
            .map_or((0, 0), |p| (p.epoch, p.committed_at_ms));
        let index_id = payload.as_ref().and_then(|p| p.index_id.clone());
        if let (Some(g), Some(found)) = (&self.generation, &index_id) {
            if !g.index_id.is_empty() && g.index_id != *found {
                self.set_status(|s| {
                    s.tantivy = Some(format!(
                        "tantivy index {} is index {found}, the serving pointer's generation {} \
                         is index {}: check the pointer",
                        path.display(),
                        g.name,
                        g.index_id
                    ))
                });
                return false;
            }
        }
        if let Ok(mut held) = self.index_id.write() {
            if *held != index_id {
                *held = index_id;
                // the collection is checked against the new id at once
                self.milvus_recheck.notify_one();
            }
        }
        let seen = self.freshness();
        let loaded = self.snapshot().is_some();
        let changed = !loaded || (epoch, committed_at_ms) != (seen.epoch, seen.committed_at_ms);
        if changed {
            // When the commit about to be loaded was written (read before it is loaded: a
            // newer one landing meanwhile makes the delay look longer, never shorter).
            let written = crate::reload::meta_written(path);
            let snapshot = match reader.reload() {
                Ok(s) => Arc::new(s),
                Err(e) => {
                    self.set_status(|s| s.tantivy = Some(format!("tantivy reload: {e}")));
                    return false;
                }
            };
            // The commit loaded, which may be newer than the payload read above.
            let payload = snapshot.payload().cloned();
            let (epoch, committed_at_ms) = payload
                .as_ref()
                .map_or((0, 0), |p| (p.epoch, p.committed_at_ms));
            let now = now_ms();
            let visible_at_ms = if payload.is_some() {
                now
            } else {
                if loaded {
                    tracing::warn!(path = %path.display(), "the tantivy index was re-created");
                }
                0
            };
            if self.reports() {
                self.metrics.index_chunks.set(snapshot.count() as i64);
            }
            if let Ok(mut g) = self.served.write() {
                *g = Some(snapshot);
            }
            if let Ok(mut f) = self.freshness.write() {
                *f = Freshness {
                    epoch,
                    committed_at_ms,
                    visible_at_ms,
                };
            }
            // The offsets of exactly the commit searches see.
            if let Ok(mut o) = self.served_offsets.write() {
                *o = payload
                    .as_ref()
                    .map(|p| p.offsets.clone())
                    .unwrap_or_default();
            }
            self.advanced.notify_waiters();
            if seen.committed_at_ms != 0 && payload.is_some() && self.reports() {
                self.metrics
                    .index_visible_delay
                    .observe(now.saturating_sub(committed_at_ms) as f64 / 1000.0);
                if let Some(age) = written.and_then(|w| w.elapsed().ok()) {
                    self.metrics.index_reload_delay.observe(age.as_secs_f64());
                }
            }
            if self.reports() {
                self.metrics
                    .index_commit_timestamp
                    .set(committed_at_ms as f64 / 1000.0);
                self.metrics.index_epoch.set(epoch as i64);
            }
        }
        let served = self.freshness();
        if served.committed_at_ms != 0 && self.reports() {
            self.metrics
                .index_commit_age
                .set(now_ms().saturating_sub(served.committed_at_ms) as f64 / 1000.0);
        }
        self.set_status(|s| s.tantivy = None);
        changed
    }

    /// Connects to Milvus and checks the collection, again every few seconds while that fails,
    /// probes its health every few seconds while it works, and re-checks the collection at once
    /// when a search reported an error (a task on the runtime).
    pub fn spawn_milvus_connector(self: &Arc<Self>, cfg: MilvusConfig) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut recheck = false;
            while !me.stopped() {
                let healthy = me.status().milvus.is_none();
                match me.milvus() {
                    Some(m) if healthy && !recheck => {
                        // Cheap liveness probe so /readyz notices an outage without traffic.
                        if let Err(e) = m.health().await {
                            me.set_status(|s| s.milvus = Some(format!("milvus: {e}")));
                        }
                    }
                    Some(m) => match me.check(&m).await {
                        Ok(()) => me.set_status(|s| s.milvus = None),
                        Err(e) => me.set_status(|s| s.milvus = Some(e)),
                    },
                    None => match MilvusSink::connect(cfg.clone())
                        .await
                        .map(|m| m.with_metrics(me.metrics.milvus.clone()))
                    {
                        Ok(m) => match me.check(&m).await {
                            Ok(()) => {
                                if let Ok(mut g) = me.milvus.write() {
                                    *g = Some(Arc::new(m));
                                }
                                me.set_status(|s| s.milvus = None);
                                tracing::info!(collection = %cfg.collection, "milvus connected");
                            }
                            Err(e) => me.set_status(|s| s.milvus = Some(e)),
                        },
                        Err(e) => me.set_status(|s| s.milvus = Some(format!("milvus: {e}"))),
                    },
                }
                recheck =
                    tokio::time::timeout(Duration::from_secs(2), me.milvus_recheck.notified())
                        .await
                        .is_ok();
            }
        });
    }
}

impl Indexes {
    /// The collection is usable: it exists with the node's model, is loaded, and belongs to
    /// the tantivy index served (vector hits of another index's collection would be dropped
    /// or, worse, match chunks of another corpus by id).
    async fn check(&self, m: &MilvusSink) -> std::result::Result<(), String> {
        m.check_collection()
            .await
            .map_err(|e| format!("milvus: {e}"))?;
        let held = self.index_id.read().ok().and_then(|g| g.clone());
        let bound = m.bound_index().await.map_err(|e| format!("milvus: {e}"))?;
        let mismatch = match (held, bound.flatten()) {
            (Some(index), Some(collection)) if index != collection => Some(format!(
                "milvus: the collection belongs to index {collection}, the tantivy index \
                 served is index {index}: check [tantivy] path and [milvus] collection"
            )),
            _ => None,
        };
        if let Ok(mut g) = self.mismatch.write() {
            g.clone_from(&mismatch);
        }
        mismatch.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
#[path = "indexes_tests.rs"]
mod tests;
