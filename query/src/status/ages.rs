//! The age of the commit the node serves, sampled every [`SAMPLE_EVERY`] over the last
//! [`WINDOW`]: the console plots it beside the pipeline's freshness. An age is how long ago
//! the pipeline committed what searches see (0 before the first commit).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::serving::Serving;

/// How often the age is sampled, and how far back samples are kept.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
pub const WINDOW: Duration = Duration::from_secs(15 * 60);

/// One sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AgeSample {
    /// When it was taken (Unix ms).
    pub t_ms: u64,
    /// The commit served then, and its age.
    pub epoch: u64,
    pub age_ms: u64,
}

/// The samples of the last [`WINDOW`], oldest first.
#[derive(Default)]
pub struct AgeHistory {
    samples: Mutex<VecDeque<AgeSample>>,
}

impl AgeHistory {
    /// Adds a sample taken at `now_ms` of a commit made at `committed_at_ms` (0: none yet),
    /// dropping those older than the window.
    pub fn record(&self, now_ms: u64, epoch: u64, committed_at_ms: u64) {
        let age_ms = if committed_at_ms == 0 {
            0
        } else {
            now_ms.saturating_sub(committed_at_ms)
        };
        let Ok(mut s) = self.samples.lock() else {
            return;
        };
        s.push_back(AgeSample {
            t_ms: now_ms,
            epoch,
            age_ms,
        });
        let oldest = now_ms.saturating_sub(WINDOW.as_millis() as u64);
        while s.front().is_some_and(|f| f.t_ms < oldest) {
            s.pop_front();
        }
    }

    pub fn samples(&self) -> Vec<AgeSample> {
        self.samples
            .lock()
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Samples the generation `serving` serves every [`SAMPLE_EVERY`] until the process ends
    /// (inside a tokio runtime).
    pub fn spawn_sampler(self: &Arc<Self>, serving: Arc<Serving>) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                let f = serving.freshness();
                me.record(freshet_core::clock::now_ms(), f.epoch, f.committed_at_ms);
            }
        });
    }
}
