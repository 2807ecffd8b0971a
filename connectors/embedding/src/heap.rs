//! Handing the C heap back to the system once the local models fall idle.
//!
//! Without ONNX Runtime's arena, a model call's working memory goes back to the C allocator,
//! which keeps much of it for re-use (measured: ~200 MB per session after calls of 16 × 256
//! tokens, docs/benchmarks.md "Pipeline memory"). Handing it back after every call costs ~10% of
//! an ingest at the default call size (the next call faults it in again), so it is handed back
//! once no model call has run for [`IDLE`], by one thread of the process, and only after a
//! call of at least [`LARGE_CALL_PADDED_TOKENS`] (a query's few tokens leave nothing to hand
//! back).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Padded tokens of an embedding from which its working memory is worth handing back.
pub(crate) const LARGE_CALL_PADDED_TOKENS: usize = 1024;

/// How long no model call must have run before the free heap is handed back.
pub(crate) const IDLE: Duration = Duration::from_millis(500);

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Milliseconds after [`epoch`] at which the last large call ended.
static LAST_END_MS: AtomicU64 = AtomicU64::new(0);
/// A large call ended since the free heap was last handed back.
static DIRTY: AtomicBool = AtomicBool::new(false);
static TRIMS: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    epoch().elapsed().as_millis() as u64
}

/// Held for the length of one embedding (its model calls) with ONNX Runtime's arena off.
pub(crate) struct Call {
    large: bool,
}

/// Starts an embedding of `padded` tokens.
pub(crate) fn call(padded: usize) -> Call {
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    Call {
        large: padded >= LARGE_CALL_PADDED_TOKENS,
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.large {
            LAST_END_MS.store(now_ms(), Ordering::SeqCst);
            DIRTY.store(true, Ordering::SeqCst);
            start_trimmer();
        }
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How many times the free heap was handed back.
#[cfg(test)]
pub(crate) fn trims() -> u64 {
    TRIMS.load(Ordering::SeqCst)
}

fn start_trimmer() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("freshet-heap-trim".into())
            .spawn(|| loop {
                std::thread::sleep(IDLE / 4);
                let idle_for = now_ms().saturating_sub(LAST_END_MS.load(Ordering::SeqCst));
                if DIRTY.load(Ordering::SeqCst)
                    && IN_FLIGHT.load(Ordering::SeqCst) == 0
                    && idle_for >= IDLE.as_millis() as u64
                {
                    DIRTY.store(false, Ordering::SeqCst);
                    release_free_heap();
                }
            });
        if let Err(e) = spawned {
            // The memory is then kept for re-use, as with the arena: never an error of a call.
            tracing::warn!("could not start the heap-trimming thread: {e}");
        }
    });
}

/// Returns the C allocator's free memory to the system (glibc keeps freed heap for re-use).
fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim(3) takes no pointers and only returns free heap to the system.
    unsafe {
        libc::malloc_trim(0);
    }
    TRIMS.fetch_add(1, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread::sleep;

    #[test]
    fn the_heap_is_handed_back_once_no_call_has_run_for_a_while() {
        let before = trims();
        drop(call(LARGE_CALL_PADDED_TOKENS));
        // not while another call runs
        let running = call(10);
        sleep(IDLE * 3);
        assert_eq!(trims(), before, "trimmed during a call");
        drop(running);
        let deadline = Instant::now() + IDLE * 10;
        while trims() == before && Instant::now() < deadline {
            sleep(IDLE / 4);
        }
        assert_eq!(trims(), before + 1, "not trimmed once idle");
        // once per idle spell, and a query-sized call leaves nothing to hand back
        drop(call(10));
        sleep(IDLE * 3);
        assert_eq!(trims(), before + 1);
    }
}
