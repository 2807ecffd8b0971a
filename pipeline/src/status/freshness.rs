//! Freshness over the last minutes for `/v1/status`: the age of each record (its Kafka
//! timestamp to the durable commit of both indexes, the same ages as
//! `freshet_pipeline_source_to_durable_seconds`) kept per time bucket in a bounded ring, each
//! bucket with its record count, median and maximum age.

use std::collections::VecDeque;

use serde::Serialize;

/// How many ages a bucket keeps to tell its median: beyond it, a sample of them.
const KEPT_PER_BUCKET: usize = 1024;

/// One bucket as `/v1/status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// The bucket's start, milliseconds since the Unix epoch.
    pub t_ms: i64,
    /// The median age of its records (of a sample of [`KEPT_PER_BUCKET`] beyond that many).
    pub p50_ms: i64,
    pub max_ms: i64,
    /// The records made durable in the bucket.
    pub records: u64,
}

#[derive(Clone, Debug)]
struct Bucket {
    start_ms: i64,
    records: u64,
    max_ms: i64,
    kept: Vec<i64>,
}

/// The ring: buckets of `bucket_ms`, none older than `window_ms` before the newest commit seen.
#[derive(Clone, Debug)]
pub struct Freshness {
    bucket_ms: i64,
    window_ms: i64,
    buckets: VecDeque<Bucket>,
}

impl Freshness {
    /// Buckets of `bucket_s` seconds over `window_s` seconds (both at least 1).
    pub fn new(window_s: u64, bucket_s: u64) -> Self {
        let bucket_ms = (bucket_s.max(1) * 1000) as i64;
        Freshness {
            bucket_ms,
            window_ms: (window_s.max(1) * 1000) as i64,
            buckets: VecDeque::new(),
        }
    }

    pub fn window_s(&self) -> u64 {
        (self.window_ms / 1000) as u64
    }

    /// The buckets held in memory (at most `window_s / bucket_s + 1`).
    pub fn held(&self) -> usize {
        self.buckets.len()
    }

    pub fn bucket_s(&self) -> u64 {
        (self.bucket_ms / 1000) as u64
    }

    /// Records made durable at `now_ms`, one age in milliseconds each.
    pub fn observe(&mut self, now_ms: i64, ages_ms: impl IntoIterator<Item = i64>) {
        let start_ms = now_ms - now_ms.rem_euclid(self.bucket_ms);
        let at = match self.buckets.iter().position(|b| b.start_ms == start_ms) {
            Some(i) => i,
            None => {
                // A clock that went back lands in the newest bucket rather than re-ordering.
                match self.buckets.back() {
                    Some(b) if b.start_ms > start_ms => self.buckets.len() - 1,
                    _ => {
                        self.buckets.push_back(Bucket {
                            start_ms,
                            records: 0,
                            max_ms: 0,
                            kept: Vec::new(),
                        });
                        self.buckets.len() - 1
                    }
                }
            }
        };
        if let Some(b) = self.buckets.get_mut(at) {
            for age in ages_ms {
                let age = age.max(0);
                b.records += 1;
                b.max_ms = b.max_ms.max(age);
                if b.kept.len() < KEPT_PER_BUCKET {
                    b.kept.push(age);
                } else {
                    // Reservoir sampling with a hash of the count for the dice: a uniform
                    // sample of the bucket's ages, no random source needed.
                    let slot = (spread(b.records) % b.records) as usize;
                    if let Some(k) = b.kept.get_mut(slot) {
                        *k = age;
                    }
                }
            }
        }
        self.forget_before(now_ms);
    }

    /// The buckets within the window before `now_ms` that hold records, oldest first.
    pub fn samples(&self, now_ms: i64) -> Vec<Sample> {
        self.buckets
            .iter()
            .filter(|b| b.start_ms + self.bucket_ms > now_ms - self.window_ms && b.records > 0)
            .map(|b| {
                let mut kept = b.kept.clone();
                kept.sort_unstable();
                Sample {
                    t_ms: b.start_ms,
                    p50_ms: kept
                        .get(kept.len().saturating_sub(1) / 2)
                        .copied()
                        .unwrap_or(0),
                    max_ms: b.max_ms,
                    records: b.records,
                }
            })
            .collect()
    }

    fn forget_before(&mut self, now_ms: i64) {
        while self
            .buckets
            .front()
            .is_some_and(|b| b.start_ms + self.bucket_ms <= now_ms - self.window_ms)
        {
            self.buckets.pop_front();
        }
        // Bounded whatever the clock does.
        let most = (self.window_ms / self.bucket_ms + 1) as usize;
        while self.buckets.len() > most {
            self.buckets.pop_front();
        }
    }
}

/// splitmix64: spreads consecutive counts over the whole range.
fn spread(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
