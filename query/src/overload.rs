//! Overload: a bounded number of retrievals run at once, a bounded number wait for a turn, and
//! a retrieval whose deadline passed (or whose caller is gone) stops its blocking work.
//!
//! Each retrieval holds a [`Job`]: one slot of `[query] max_running_retrievals`, its deadline
//! and a cancelled flag. Its blocking work (tantivy searches and loads, the query embedding, a
//! local rerank, packing) runs through [`Job::blocking`] and checks [`Job::check`] between
//! units (a batch of loads, a rerank batch, a passage packed). The slot is free only once the
//! last piece of that work has ended, so work that a timed-out request left running still
//! counts against the limit, and cancelling it is what frees the slot. A request that finds
//! every slot taken waits up to `max_wait_ms` among at most `max_waiting_retrievals`; past
//! either it gets a 503 `overloaded` with `Retry-After` at once instead of piling up.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::Metrics;
use crate::retrieve::{internal, RetrieveError};

/// Node-wide admission of retrievals.
pub struct Limiter {
    slots: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
    max_waiting: usize,
    max_wait: Duration,
    metrics: Metrics,
}

/// Why a retrieval was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every slot is taken and `max_waiting_retrievals` requests already wait.
    QueueFull,
    /// No slot came free within `max_wait_ms` (or before the request's deadline).
    WaitedTooLong,
}

impl Refused {
    pub fn reason(self) -> &'static str {
        match self {
            Refused::QueueFull => "queue_full",
            Refused::WaitedTooLong => "queue_timeout",
        }
    }
}

/// Decrements the waiting count when a waiter leaves, however it leaves.
struct Waiting(Arc<AtomicUsize>, Metrics);

impl Drop for Waiting {
    fn drop(&mut self) {
        let now = self.0.fetch_sub(1, Ordering::AcqRel) - 1;
        self.1.retrievals_waiting.set(now as i64);
    }
}

impl Limiter {
    pub fn new(running: usize, waiting: usize, max_wait: Duration, metrics: Metrics) -> Limiter {
        Limiter {
            slots: Arc::new(Semaphore::new(running)),
            waiting: Arc::new(AtomicUsize::new(0)),
            max_waiting: waiting,
            max_wait,
            metrics,
        }
    }

    /// A slot for a retrieval that must end by `deadline`: at once if one is free, else after
    /// waiting in line (bounded in length and time).
    pub async fn admit(&self, deadline: Instant) -> Result<Job, Refused> {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Ok(Job::new(permit, deadline, self.metrics.clone()));
        }
        let before = self.waiting.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(self.waiting.clone(), self.metrics.clone());
        if before >= self.max_waiting {
            return Err(self.refuse(Refused::QueueFull));
        }
        self.metrics.retrievals_waiting.set(before as i64 + 1);
        let wait = self
            .max_wait
            .min(deadline.saturating_duration_since(Instant::now()));
        match tokio::time::timeout(wait, self.slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Job::new(permit, deadline, self.metrics.clone())),
            _ => Err(self.refuse(Refused::WaitedTooLong)),
        }
    }

    fn refuse(&self, why: Refused) -> Refused {
        self.metrics.overload_rejection(why.reason());
        why
    }

    /// Slots free right now.
    pub fn free(&self) -> usize {
        self.slots.available_permits()
    }
}

/// One admitted retrieval: its slot, deadline and cancelled flag (cheap to clone; the slot is
/// released when the last clone is gone).
#[derive(Clone)]
pub struct Job(Arc<Slot>);

struct Slot {
    _permit: OwnedSemaphorePermit,
    deadline: Instant,
    cancelled: AtomicBool,
    metrics: Metrics,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.metrics.retrievals_running.dec();
    }
}

/// Cancels its job when dropped: the retrieval's future holds it, so a request that timed out
/// (its future dropped) stops the work it left running.
pub struct CancelOnDrop(Job);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl Job {
    fn new(permit: OwnedSemaphorePermit, deadline: Instant, metrics: Metrics) -> Job {
        metrics.retrievals_running.inc();
        Job(Arc::new(Slot {
            _permit: permit,
            deadline,
            cancelled: AtomicBool::new(false),
            metrics,
        }))
    }

    /// A job outside any limiter (tests, tools): it only has a deadline.
    pub fn detached(deadline: Instant, metrics: Metrics) -> Job {
        let permit = Arc::new(Semaphore::new(1))
            .try_acquire_owned()
            .expect("a fresh semaphore has a permit");
        Job::new(permit, deadline, metrics)
    }

    /// A guard that cancels this job when dropped.
    pub fn cancel_on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(self.clone())
    }

    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::Release);
    }

    /// The request is gone or past its deadline: its work should stop.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::Acquire) || Instant::now() >= self.0.deadline
    }

    /// `Err(TimedOut)` (counted for `stage`) once the job is cancelled: call between units of
    /// blocking work.
    pub fn check(&self, stage: &'static str) -> Result<(), RetrieveError> {
        if self.is_cancelled() {
            self.0.metrics.cancelled_work(stage);
            return Err(RetrieveError::TimedOut);
        }
        Ok(())
    }

    /// Runs `f` on the blocking pool, holding this job's slot until it returns; it does not
    /// start if the job is cancelled by then.
    pub async fn blocking<T: Send + 'static>(
        &self,
        stage: &'static str,
        f: impl FnOnce(&Job) -> Result<T, RetrieveError> + Send + 'static,
    ) -> Result<T, RetrieveError> {
        self.check(stage)?;
        let job = self.clone();
        tokio::task::spawn_blocking(move || {
            job.check(stage)?;
            f(&job)
        })
        .await
        .map_err(internal)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn limiter(running: usize, waiting: usize, wait_ms: u64) -> Limiter {
        Limiter::new(
            running,
            waiting,
            Duration::from_millis(wait_ms),
            Metrics::new(),
        )
    }

    fn later(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    /// Blocking work in units of 1 ms until the job is cancelled; counts its units.
    async fn endless(job: Job, units: Arc<AtomicU64>) -> Result<(), RetrieveError> {
        job.blocking("test", move |job| loop {
            job.check("test")?;
            std::thread::sleep(Duration::from_millis(1));
            units.fetch_add(1, Ordering::Relaxed);
        })
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_timed_out_request_stops_its_work_and_frees_its_slot() {
        let l = limiter(1, 0, 0);
        let units = Arc::new(AtomicU64::new(0));
        let job = l.admit(later(60_000)).await.unwrap();
        assert_eq!(l.free(), 0);
        // The request: its work under the job, its future dropped by a timeout.
        let request = {
            let (job, units) = (job.clone(), units.clone());
            async move {
                let _cancel = job.cancel_on_drop();
                endless(job, units).await
            }
        };
        drop(job);
        let r = tokio::time::timeout(Duration::from_millis(50), request).await;
        assert!(r.is_err(), "the request timed out");
        // Its blocking work sees the cancellation within a unit and lets the slot go.
        let freed = Instant::now();
        while l.free() == 0 {
            assert!(
                freed.elapsed() < Duration::from_secs(2),
                "the slot is still held"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let done = units.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(units.load(Ordering::Relaxed), done, "the work stopped");
        assert!(l
            .metrics
            .encode()
            .contains("freshet_query_cancelled_work_total{stage=\"test\"} 1"));
        assert!(l
            .metrics
            .encode()
            .contains("freshet_query_retrievals_running 0"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_past_its_deadline_stops_by_itself() {
        let l = limiter(1, 0, 0);
        let units = Arc::new(AtomicU64::new(0));
        let job = l.admit(later(30)).await.unwrap();
        let started = Instant::now();
        let r = endless(job, units).await;
        assert!(matches!(r, Err(RetrieveError::TimedOut)));
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(l.free(), 1);
    }

    #[tokio::test]
    async fn excess_requests_are_refused_at_once_or_after_the_longest_wait() {
        let l = limiter(1, 1, 200);
        let held = l.admit(later(60_000)).await.unwrap();
        // One may wait; it gets the slot when the holder lets go.
        let waiter = l.admit(later(60_000));
        tokio::pin!(waiter);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), &mut waiter)
                .await
                .is_err(),
            "waiting"
        );
        // The line is full: refused at once.
        let t = Instant::now();
        assert_eq!(l.admit(later(60_000)).await.err(), Some(Refused::QueueFull));
        assert!(t.elapsed() < Duration::from_millis(20), "{:?}", t.elapsed());
        drop(held);
        let next = waiter.await.unwrap();
        // Nobody lets go: a waiter gives up after max_wait_ms, or at its deadline if sooner.
        let t = Instant::now();
        assert_eq!(
            l.admit(later(60_000)).await.err(),
            Some(Refused::WaitedTooLong)
        );
        assert!(t.elapsed() >= Duration::from_millis(190));
        let t = Instant::now();
        assert_eq!(l.admit(later(30)).await.err(), Some(Refused::WaitedTooLong));
        assert!(t.elapsed() < Duration::from_millis(150));
        drop(next);
        let m = l.metrics.encode();
        assert!(m.contains("reason=\"queue_full\"} 1"), "{m}");
        assert!(m.contains("reason=\"queue_timeout\"} 2"), "{m}");
        assert!(m.contains("freshet_query_retrievals_waiting 0"), "{m}");
    }
}
