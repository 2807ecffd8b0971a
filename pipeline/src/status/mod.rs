//! What `GET /v1/status` ([`crate::endpoint`]) shows beyond readiness, noted where the pipeline
//! measures it: consumer lag per partition (with the `consumer_lag_records` gauge), freshness
//! over the last minutes (with `source_to_durable_seconds`, [`freshness`]), and the health of
//! Kafka, Milvus and the model (their last answers, and the stalls of [`crate::stall`]). The
//! dead letters are read from their topic when asked ([`dead_letters`]).
//!
//! Every number here is of this process: with several processes each answers for its own
//! partitions.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

pub mod dead_letters;
pub mod freshness;
#[cfg(test)]
mod tests;

use freshness::{Freshness, Sample};

/// The freshness window and its buckets.
pub const WINDOW_S: u64 = 900;
pub const BUCKET_S: u64 = 10;

/// One partition read by this process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    /// The group's committed offset (the next to read; offsets are committed once durable);
    /// `None` before the group has committed any.
    pub committed: Option<i64>,
    pub high_watermark: i64,
    /// `high_watermark - committed` (from 0 with nothing committed).
    pub lag: i64,
}

/// Health of one service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServiceHealth {
    pub ok: bool,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Health {
    pub kafka: ServiceHealth,
    pub milvus: ServiceHealth,
    pub model: ServiceHealth,
    /// The tantivy index (its disk): stalled commits.
    pub tantivy: ServiceHealth,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FreshnessView {
    pub window_s: u64,
    pub bucket_s: u64,
    pub samples: Vec<Sample>,
}

/// What the board holds, as `/v1/status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BoardView {
    pub partitions: Vec<PartitionLag>,
    pub freshness: FreshnessView,
    pub health: Health,
}

#[derive(Debug, Default)]
struct Signal {
    ok_at: Option<Instant>,
    error: Option<(Instant, String)>,
}

impl Signal {
    fn failing(&self) -> Option<&(Instant, String)> {
        self.error
            .as_ref()
            .filter(|(at, _)| self.ok_at.is_none_or(|ok| ok < *at))
    }
}

#[derive(Debug)]
struct Inner {
    freshness: Freshness,
    partitions: BTreeMap<(String, i32), PartitionLag>,
    kafka: Signal,
    milvus: Signal,
    /// The last durable commit.
    committed_at: Option<Instant>,
    model: Option<String>,
    model_error: Option<String>,
    embedding_error: Option<(Instant, String)>,
    /// Writes being retried now, by where (`crate::metrics::STALL_AT`), with why.
    stalls: BTreeMap<String, String>,
}

/// The live state `/v1/status` shows; cheap to clone (shared), kept in [`crate::metrics::Metrics`].
#[derive(Clone, Debug)]
pub struct Board(Arc<Mutex<Inner>>);

impl Default for Board {
    fn default() -> Self {
        Board::new(WINDOW_S, BUCKET_S)
    }
}

impl Board {
    pub fn new(window_s: u64, bucket_s: u64) -> Self {
        Board(Arc::new(Mutex::new(Inner {
            freshness: Freshness::new(window_s, bucket_s),
            partitions: BTreeMap::new(),
            kafka: Signal::default(),
            milvus: Signal::default(),
            committed_at: None,
            model: None,
            model_error: None,
            embedding_error: None,
            stalls: BTreeMap::new(),
        })))
    }

    fn with(&self, f: impl FnOnce(&mut Inner)) {
        if let Ok(mut i) = self.0.lock() {
            f(&mut i);
        }
    }

    /// Records durable at `now_ms`, with their ages in milliseconds.
    pub fn durable(&self, now_ms: i64, ages_ms: impl IntoIterator<Item = i64>) {
        self.with(|i| {
            i.freshness.observe(now_ms, ages_ms);
            i.committed_at = Some(Instant::now());
        });
    }

    /// The lag of one partition, as the workers measure it; the broker answered.
    pub fn lag(&self, topic: &str, partition: i32, committed: Option<i64>, high: i64) {
        self.with(|i| {
            let lag = (high - committed.unwrap_or(0).max(0)).max(0);
            i.partitions.insert(
                (topic.to_string(), partition),
                PartitionLag {
                    topic: topic.to_string(),
                    partition,
                    committed,
                    high_watermark: high,
                    lag,
                },
            );
            i.kafka.ok_at = Some(Instant::now());
        });
    }

    /// The broker did not answer a worker (reading records, or the lag query).
    pub fn kafka_failed(&self, why: impl Into<String>) {
        let why = why.into();
        self.with(|i| i.kafka.error = Some((Instant::now(), why)));
    }

    /// Milvus took a write.
    pub fn milvus_wrote(&self) {
        self.with(|i| i.milvus.ok_at = Some(Instant::now()));
    }

    /// The embedding model `name` is loaded.
    pub fn model_loaded(&self, name: &str) {
        self.with(|i| {
            i.model = Some(name.to_string());
            i.model_error = None;
        });
    }

    /// The embedding model did not load.
    pub fn model_failed(&self, why: impl Into<String>) {
        let why = why.into();
        self.with(|i| i.model_error = Some(why));
    }

    /// The model refused a text (the record went to the dead-letter topic).
    pub fn embedding_error(&self, why: impl Into<String>) {
        let why = why.into();
        self.with(|i| i.embedding_error = Some((Instant::now(), why)));
    }

    /// A write at `at` fails and is retried.
    pub fn stalled(&self, at: &str, why: impl Into<String>) {
        let why = why.into();
        self.with(|i| {
            i.stalls.insert(at.to_string(), why);
        });
    }

    /// The write at `at` succeeded again.
    pub fn resumed(&self, at: &str) {
        self.with(|i| {
            i.stalls.remove(at);
        });
    }

    /// The board at `now_ms`; `started` says whether preflight is over (the collection was
    /// loaded and the model checked).
    pub fn view(&self, now_ms: i64, started: bool) -> BoardView {
        let Ok(i) = self.0.lock() else {
            let broken = ServiceHealth {
                ok: false,
                detail: "unknown: the status board is poisoned".into(),
            };
            return BoardView {
                partitions: Vec::new(),
                freshness: FreshnessView {
                    window_s: WINDOW_S,
                    bucket_s: BUCKET_S,
                    samples: Vec::new(),
                },
                health: Health {
                    kafka: broken.clone(),
                    milvus: broken.clone(),
                    model: broken.clone(),
                    tantivy: broken,
                },
            };
        };
        BoardView {
            partitions: i.partitions.values().cloned().collect(),
            freshness: FreshnessView {
                window_s: i.freshness.window_s(),
                bucket_s: i.freshness.bucket_s(),
                samples: i.freshness.samples(now_ms),
            },
            health: Health {
                kafka: i.kafka_health(),
                milvus: i.milvus_health(started),
                model: i.model_health(),
                tantivy: i.tantivy_health(),
            },
        }
    }
}

fn ago(t: Instant) -> String {
    format!("{} s ago", t.elapsed().as_secs())
}

fn bad(detail: String) -> ServiceHealth {
    ServiceHealth { ok: false, detail }
}

fn good(detail: String) -> ServiceHealth {
    ServiceHealth { ok: true, detail }
}

impl Inner {
    fn kafka_health(&self) -> ServiceHealth {
        if let Some(why) = self.stalls.get("dlq") {
            return bad(format!("the broker refuses dead letters: {why}"));
        }
        if let Some((at, why)) = self.kafka.failing() {
            return bad(format!("the broker failed {}: {why}", ago(*at)));
        }
        // A worker that waits for the sink does not ask; its last answer stands meanwhile.
        match self.kafka.ok_at {
            Some(t) => good(format!("the broker answered {}", ago(t))),
            None => bad("unknown: the broker has not answered yet".into()),
        }
    }

    fn milvus_health(&self, started: bool) -> ServiceHealth {
        if let Some(why) = self.stalls.get("milvus") {
            return bad(format!("writes are retried: {why}"));
        }
        match self.milvus.ok_at {
            Some(t) => good(format!("last write {}", ago(t))),
            None if started => good("collection loaded; nothing written yet".into()),
            None => bad("unknown: the collection is not loaded yet".into()),
        }
    }

    fn tantivy_health(&self) -> ServiceHealth {
        if let Some(why) = self.stalls.get("tantivy") {
            return bad(format!("commits are retried: {why}"));
        }
        match self.committed_at {
            Some(t) => good(format!("last commit {}", ago(t))),
            None => good("nothing committed yet".into()),
        }
    }

    fn model_health(&self) -> ServiceHealth {
        if let Some(why) = &self.model_error {
            return bad(format!("the model did not load: {why}"));
        }
        for at in ["embedding_server", "embedding_cache"] {
            if let Some(why) = self.stalls.get(at) {
                return bad(format!("embedding is retried: {why}"));
            }
        }
        let Some(name) = &self.model else {
            return bad("unknown: the model is not loaded yet".into());
        };
        match &self.embedding_error {
            Some((at, why)) => good(format!("{name}; last text refused {}: {why}", ago(*at))),
            None => good(name.clone()),
        }
    }
}
