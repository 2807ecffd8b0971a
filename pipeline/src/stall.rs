//! How the pipeline waits out a failure that is not about one record: Milvus unreachable or
//! timing out, a full disk under the tantivy index or the embedding cache, the broker refusing
//! dead letters. The write is tried again with a growing pause (0.5 s, doubling, at most
//! [`MAX_PAUSE`]) until it succeeds, the process is told to stop, or it has failed for
//! `[pipeline] stall_limit_s`; then the pipeline stops without committing (a restart replays
//! what was not durable).
//!
//! While a write stalls nothing is committed past it, so no Kafka offset moves past unapplied
//! work; the workers stop reading once `max_epochs_in_flight` epochs wait. Every failed attempt is
//! logged as an error with its cause, `freshet_pipeline_stalled` counts the stalled writes and
//! `/readyz` answers 503 with the cause; the first success logs how long the stall lasted and
//! makes the pipeline ready again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::endpoint::Readiness;
use crate::metrics::Metrics;

/// The longest pause between two attempts.
pub const MAX_PAUSE: Duration = Duration::from_secs(10);
const FIRST_PAUSE: Duration = Duration::from_millis(500);

/// The retry policy and what it reports to (cheap to clone).
#[derive(Clone)]
pub struct Stall {
    limit: Duration,
    stop: Arc<AtomicBool>,
    ready: Readiness,
    metrics: Metrics,
}

impl Stall {
    pub fn new(limit: Duration, stop: Arc<AtomicBool>, ready: Readiness, metrics: Metrics) -> Self {
        Stall {
            limit,
            stop,
            ready,
            metrics,
        }
    }

    /// Runs `attempt` (given the attempt's number, 0 first) until it succeeds. `what` names the
    /// write in logs and errors (`"writing to Milvus"`); `at` labels the retry counter. Gives up
    /// with the last error once it has failed for the limit, or when the process is told to stop.
    pub fn retry<T>(
        &self,
        what: &str,
        at: &str,
        mut attempt: impl FnMut(u32) -> Result<T>,
    ) -> Result<T> {
        let started = Instant::now();
        let mut pause = FIRST_PAUSE;
        let mut n = 0u32;
        let result = loop {
            match attempt(n) {
                Ok(v) => {
                    if n > 0 {
                        self.ready.resumed();
                        self.metrics.board.resumed(at);
                        tracing::warn!(
                            attempts = n + 1,
                            stalled_s = started.elapsed().as_secs_f64(),
                            "{what} succeeded again; going on"
                        );
                    }
                    break Ok(v);
                }
                Err(e) => {
                    let stalled = started.elapsed();
                    if stalled >= self.limit {
                        break Err(e.context(format!(
                            "{what} failed for {:.0} s (stall_limit_s = {}); stopping without \
                             committing",
                            stalled.as_secs_f64(),
                            self.limit.as_secs()
                        )));
                    }
                    if self.stop.load(Ordering::SeqCst) {
                        break Err(e.context(format!("{what} failed; told to stop")));
                    }
                    if n == 0 {
                        self.metrics.stalled.inc();
                    }
                    self.metrics.stall_retry(at);
                    self.ready.stalled(format!("{what}: {e:#}"));
                    self.metrics.board.stalled(at, format!("{what}: {e:#}"));
                    tracing::error!(
                        error = %format!("{e:#}"),
                        attempt = n + 1,
                        retry_in_s = pause.as_secs_f64(),
                        "stalled: {what} failed; nothing is committed until it succeeds"
                    );
                    self.sleep(pause.min(self.limit.saturating_sub(stalled)));
                    pause = (pause * 2).min(MAX_PAUSE);
                    n += 1;
                }
            }
        };
        if n > 0 {
            self.metrics.stalled.dec();
        }
        result
    }

    /// Sleeps `d`, waking early when the process is told to stop.
    fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.stop.load(Ordering::SeqCst) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }
}

/// A [`Stall`] for tests: `limit`, never told to stop.
#[cfg(test)]
pub fn for_tests(limit: Duration) -> Stall {
    Stall::new(
        limit,
        Arc::new(AtomicBool::new(false)),
        Readiness::new(),
        Metrics::new(),
    )
}

#[cfg(test)]
mod tests {
    use anyhow::anyhow;

    use super::*;

    #[test]
    fn a_write_that_fails_twice_is_done_on_the_third_attempt() {
        let stall = for_tests(Duration::from_secs(30));
        stall.ready.running();
        let mut seen = Vec::new();
        let started = Instant::now();
        let (metrics, ready) = (stall.metrics.clone(), stall.ready.clone());
        let v = stall
            .retry("writing", "milvus", |n| {
                seen.push(n);
                if n > 0 {
                    assert_eq!(metrics.stalled.get(), 1, "stalled while retrying");
                    assert!(ready.check().is_err(), "not ready while stalled");
                }
                if n < 2 {
                    Err(anyhow!("down"))
                } else {
                    Ok(7)
                }
            })
            .unwrap();
        assert_eq!((v, seen), (7, vec![0, 1, 2]));
        // 0.5 s then 1 s of pauses
        assert!(started.elapsed() >= Duration::from_millis(1500));
        assert_eq!(stall.metrics.stalled.get(), 0);
        let retries = stall.metrics.encode();
        assert!(
            retries.contains("freshet_pipeline_stall_retries_total{at=\"milvus\"} 2"),
            "{retries}"
        );
        assert_eq!(stall.ready.check(), Ok(()), "ready again");
    }

    #[test]
    fn a_write_that_keeps_failing_gives_up_at_the_limit_with_its_cause() {
        let stall = for_tests(Duration::from_millis(1200));
        stall.ready.running();
        let mut attempts = 0;
        let e = stall
            .retry("writing to Milvus", "milvus", |_| -> Result<()> {
                attempts += 1;
                Err(anyhow!("connection refused"))
            })
            .unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("writing to Milvus failed for"), "{msg}");
        assert!(msg.contains("connection refused"), "{msg}");
        // 0 s, 0.5 s, 1.2 s (the pause is cut at the limit)
        assert_eq!(attempts, 3);
        let why = stall.ready.check().unwrap_err();
        assert!(why.starts_with("stalled for"), "{why}");
        assert!(
            why.contains("writing to Milvus: connection refused"),
            "{why}"
        );
        assert_eq!(
            stall.metrics.stalled.get(),
            0,
            "given up: no longer stalled"
        );
    }

    #[test]
    fn a_stop_ends_the_stall_without_waiting_for_the_limit() {
        let stall = for_tests(Duration::from_secs(600));
        let stop = stall.stop.clone();
        let started = Instant::now();
        let e = stall
            .retry("committing tantivy", "tantivy", |n| -> Result<()> {
                if n == 1 {
                    stop.store(true, Ordering::SeqCst);
                }
                Err(anyhow!("No space left on device"))
            })
            .unwrap_err();
        assert!(format!("{e:#}").contains("told to stop"), "{e:#}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
