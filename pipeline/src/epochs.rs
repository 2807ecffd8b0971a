//! When a worker moves time on, and to which epoch.
//!
//! An epoch becomes complete, and can be written, once every worker's inputs have moved past
//! it. A worker that read records moves on at once (its own records must complete). An idle
//! worker moves on as soon as another worker of the process has read at its epoch or after it
//! ([`ReadEpochs`]): it learns that on the wake-up the other worker's progress gives it, so it
//! holds back nobody. Workers in other processes cannot see that, so in a cluster an idle worker
//! also moves on every `batch_max_wait_ms`; in a single process it needs to only every
//! [`IDLE_TICK`], which keeps an idle pipeline's wake-ups few.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use freshet_operators::dataflow::Time;

use crate::config::PipelineConfig;

/// How often an idle worker of a single-process pipeline moves time on when no other worker
/// reads: it only bounds how long it waits to look at the stop flag and the lag.
pub const IDLE_TICK: Duration = Duration::from_millis(100);

/// The newest epoch at which a worker of this process read records.
#[derive(Debug, Default)]
pub struct ReadEpochs(AtomicU64);

impl ReadEpochs {
    /// Records that a worker read records at `epoch` (before it moves on and tells the others).
    pub fn read_at(&self, epoch: Time) {
        self.0.fetch_max(epoch, Ordering::SeqCst);
    }

    pub fn newest(&self) -> Time {
        self.0.load(Ordering::SeqCst)
    }
}

/// How long an idle worker may hold its epoch when no worker of its process reads.
pub fn idle_tick(p: &PipelineConfig) -> Duration {
    let max_wait = Duration::from_millis(p.batch_max_wait_ms);
    if p.cluster_addresses.len() > 1 {
        max_wait
    } else {
        max_wait.max(IDLE_TICK)
    }
}

/// What a worker knows after a poll.
#[derive(Clone, Copy, Debug)]
pub struct Poll {
    /// The worker's epoch.
    pub epoch: Time,
    /// It read records at `epoch`.
    pub read: bool,
    /// [`ReadEpochs::newest`].
    pub newest_read: Time,
    /// Since it last moved on.
    pub held: Duration,
    /// [`idle_tick`].
    pub tick: Duration,
    /// The wall clock, in milliseconds.
    pub now_ms: Time,
}

/// The epoch the worker moves to, or `None` while it holds its epoch: after a read or the
/// tick, the next epoch ([`next_epoch`]); when another worker read at this epoch or after it,
/// past that one too.
pub fn advance(p: Poll) -> Option<Time> {
    let peers_ahead = p.newest_read >= p.epoch;
    if !(p.read || peers_ahead || p.held >= p.tick) {
        return None;
    }
    let next = next_epoch(p.epoch, p.now_ms);
    Some(if peers_ahead {
        next.max(p.newest_read + 1)
    } else {
        next
    })
}

/// The epoch after `prev`: the wall clock in milliseconds (at least `prev + 1`). Every worker
/// stamps its batches with the same clock, so an epoch becomes complete as soon as every worker
/// has read past that instant: a worker slowed down (worker 0 runs the sink) does not hold back
/// the records another worker read at the same time behind a backlog of numbered epochs.
pub fn next_epoch(prev: Time, now_ms: Time) -> Time {
    (prev + 1).max(now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(epoch: Time) -> Poll {
        Poll {
            epoch,
            read: false,
            newest_read: 0,
            held: Duration::ZERO,
            tick: IDLE_TICK,
            now_ms: epoch,
        }
    }

    #[test]
    fn an_idle_worker_holds_its_epoch_until_the_tick() {
        assert_eq!(advance(poll(1_000)), None);
        let waited = Poll {
            held: IDLE_TICK,
            now_ms: 1_100,
            ..poll(1_000)
        };
        assert_eq!(advance(waited), Some(1_100));
    }

    #[test]
    fn a_worker_that_read_moves_on_at_once() {
        let read = Poll {
            read: true,
            ..poll(1_000)
        };
        // The same millisecond: still past its own epoch.
        assert_eq!(advance(read), Some(1_001));
    }

    #[test]
    fn an_idle_worker_moves_past_what_another_worker_read() {
        // Another worker read at this very epoch, or at a later one: move past it now, even
        // within the same millisecond.
        for newest_read in [1_000, 1_003] {
            let p = Poll {
                newest_read,
                now_ms: 1_000,
                ..poll(1_000)
            };
            assert_eq!(advance(p), Some(newest_read + 1), "{newest_read}");
        }
        // Behind the clock: the clock.
        let p = Poll {
            newest_read: 1_003,
            now_ms: 1_020,
            ..poll(1_000)
        };
        assert_eq!(advance(p), Some(1_020));
        // What was read before this epoch is complete already: nothing to do.
        let p = Poll {
            newest_read: 999,
            ..poll(1_000)
        };
        assert_eq!(advance(p), None);
    }

    #[test]
    fn a_cluster_ticks_at_batch_max_wait() {
        let mut p = PipelineConfig {
            batch_max_wait_ms: 5,
            ..PipelineConfig::default()
        };
        assert_eq!(idle_tick(&p), IDLE_TICK);
        p.cluster_addresses = vec!["a:1".into(), "b:1".into()];
        assert_eq!(idle_tick(&p), Duration::from_millis(5));
        p.batch_max_wait_ms = 250;
        p.cluster_addresses.clear();
        assert_eq!(idle_tick(&p), Duration::from_millis(250));
    }

    #[test]
    fn read_epochs_keep_the_newest() {
        let r = ReadEpochs::default();
        r.read_at(7);
        r.read_at(5);
        assert_eq!(r.newest(), 7);
    }
}
