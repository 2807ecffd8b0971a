//! When to flush (seal) a collection being written to: the pure decision of [`super::Sealer`],
//! rows and time in, flush decisions out.
//!
//! Milvus searches the rows of a growing segment by brute force until the segment seals, and a
//! stream of small inserts never fills a segment to its seal size. A flush seals the growing
//! segments, which Milvus then indexes like any other. [`FlushPolicy`] asks for one when
//! `rows` rows were written since the last flush, or when the oldest unflushed row is
//! `interval` old. A flush covers the rows written before it started; rows written while it
//! runs wait for the next one. A failed flush gives its rows back and is tried again after a
//! pause (1 s, doubling, at most [`MAX_RETRY_PAUSE`]); it loses nothing, since Milvus holds
//! every acknowledged insert whether or not it was flushed.

use std::time::{Duration, Instant};

/// The longest pause before a failed flush is tried again.
pub const MAX_RETRY_PAUSE: Duration = Duration::from_secs(30);
const FIRST_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Why a flush was asked for (the `trigger` label of `milvus_flushes_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// `rows` rows written since the last flush.
    Rows,
    /// The oldest unflushed row is `interval` old.
    Age,
    /// A failed flush tried again.
    Retry,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Rows => "rows",
            Trigger::Age => "age",
            Trigger::Retry => "retry",
        }
    }
}

/// What to do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Flush now.
    Flush(Trigger),
    /// Nothing until this instant (or until more rows are written).
    WaitUntil(Instant),
    /// Nothing until more rows are written (nothing unflushed, or a flush runs).
    Idle,
}

/// The thresholds: flush after `rows` rows (`0`: never by rows) or when the oldest unflushed
/// row is `interval` old (`None`: never by age).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushPolicy {
    pub rows: u64,
    pub interval: Option<Duration>,
}

impl FlushPolicy {
    /// Whether the policy ever flushes.
    pub fn enabled(&self) -> bool {
        self.rows > 0 || self.interval.is_some()
    }
}

/// The rows written and not yet covered by a finished flush, and the flush in progress.
#[derive(Clone, Debug)]
pub struct SealState {
    policy: FlushPolicy,
    /// Rows written since the last flush started (or failed), and when the first of them was.
    pending: u64,
    oldest: Option<Instant>,
    /// The flush in progress: the rows it covers and when the oldest of them was written.
    in_flight: Option<(u64, Option<Instant>)>,
    /// After a failure: when to try again, and how many failed in a row.
    retry_at: Option<Instant>,
    failures: u32,
}

impl SealState {
    pub fn new(policy: FlushPolicy) -> SealState {
        SealState {
            policy,
            pending: 0,
            oldest: None,
            in_flight: None,
            retry_at: None,
            failures: 0,
        }
    }

    /// `rows` rows (inserted or deleted) were written at `now`.
    pub fn wrote(&mut self, rows: u64, now: Instant) {
        if rows == 0 {
            return;
        }
        self.pending = self.pending.saturating_add(rows);
        self.oldest.get_or_insert(now);
    }

    /// Rows written and not covered by a finished flush (those of a flush in progress included).
    pub fn unflushed(&self) -> u64 {
        self.pending
            .saturating_add(self.in_flight.map_or(0, |(rows, _)| rows))
    }

    /// What to do at `now`.
    pub fn decide(&self, now: Instant) -> Decision {
        if self.in_flight.is_some() || !self.policy.enabled() || self.pending == 0 {
            return Decision::Idle;
        }
        if let Some(at) = self.retry_at {
            return if now >= at {
                Decision::Flush(Trigger::Retry)
            } else {
                Decision::WaitUntil(at)
            };
        }
        if self.policy.rows > 0 && self.pending >= self.policy.rows {
            return Decision::Flush(Trigger::Rows);
        }
        match (self.policy.interval, self.oldest) {
            (Some(interval), Some(oldest)) => {
                let due = oldest + interval;
                if now >= due {
                    Decision::Flush(Trigger::Age)
                } else {
                    Decision::WaitUntil(due)
                }
            }
            _ => Decision::Idle,
        }
    }

    /// A flush starts: it covers every row written so far. Returns how many.
    pub fn started(&mut self) -> u64 {
        let rows = self.pending;
        self.in_flight = Some((rows, self.oldest.take()));
        self.pending = 0;
        rows
    }

    /// The flush in progress ended at `now`; `ok` whether it succeeded. A failure gives its
    /// rows back (the oldest first) and schedules a retry.
    pub fn finished(&mut self, ok: bool, now: Instant) {
        let Some((rows, oldest)) = self.in_flight.take() else {
            return;
        };
        if ok {
            self.failures = 0;
            self.retry_at = None;
            return;
        }
        self.pending = self.pending.saturating_add(rows);
        self.oldest = match (oldest, self.oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let pause = FIRST_RETRY_PAUSE
            .saturating_mul(1u32 << self.failures.min(16))
            .min(MAX_RETRY_PAUSE);
        self.failures = self.failures.saturating_add(1);
        self.retry_at = Some(now + pause);
    }
}
