//! The watcher's loop: watch every root (recursively, `notify`), compare every root with the
//! state, then turn each burst of file-system events into one sync of the paths they name.
//! Broker failures stall and retry the same sync; anything else stops the watcher.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecursiveMode, Watcher};

use crate::watch::sync::{Outlet, SyncReport, Syncer};
use crate::{Error, Result};

/// How events are batched and failures retried.
#[derive(Clone, Debug)]
pub struct WatchSettings {
    /// A burst ends after this long without an event.
    pub debounce: Duration,
    /// ... or this long after its first event, whichever is first.
    pub max_delay: Duration,
    /// Longest wait between retries of a sync the broker did not acknowledge.
    pub max_backoff: Duration,
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            debounce: Duration::from_millis(20),
            max_delay: Duration::from_millis(200),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// How often an idle watcher looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(500);

/// Runs until `stop` is set. `on_sync` sees each sync's report (the first is the start scan).
pub fn watch<O: Outlet>(
    syncer: &mut Syncer<O>,
    settings: &WatchSettings,
    stop: &AtomicBool,
    mut on_sync: impl FnMut(&SyncReport),
) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |res| {
        // The receiver is gone only when the watcher stops.
        let _ = tx.send(res);
    })
    .map_err(notify_err)?;
    // Watch first, then scan: an event during the scan is synced again after it, never lost.
    for root in &syncer.tree().roots {
        watcher
            .watch(&root.dir, RecursiveMode::Recursive)
            .map_err(notify_err)?;
    }
    match retrying(stop, settings, || syncer.sync_all())? {
        Some(report) => on_sync(&report),
        None => return Ok(()),
    }
    let mut paths = BTreeSet::new();
    let mut rescan = false;
    while !stop.load(Ordering::SeqCst) {
        match rx.recv_timeout(STOP_POLL) {
            Ok(res) => absorb(res, &mut paths, &mut rescan),
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Error::Config("the file-system watcher stopped".into()))
            }
        }
        let first = Instant::now();
        loop {
            let left = settings.max_delay.saturating_sub(first.elapsed());
            match rx.recv_timeout(settings.debounce.min(left)) {
                Ok(res) => absorb(res, &mut paths, &mut rescan),
                Err(_) => break,
            }
        }
        if paths.is_empty() && !rescan {
            continue;
        }
        let batch: Vec<PathBuf> = std::mem::take(&mut paths).into_iter().collect();
        let all = std::mem::take(&mut rescan);
        if all {
            tracing::warn!("file-system events were lost: comparing every root again");
        }
        let done = retrying(stop, settings, || {
            if all {
                syncer.sync_all()
            } else {
                syncer.sync_paths(batch.iter().cloned())
            }
        })?;
        match done {
            Some(report) => on_sync(&report),
            None => break,
        }
    }
    Ok(())
}

/// Adds an event's paths (or asks for a rescan); reads and opens are no change.
fn absorb(res: notify::Result<Event>, paths: &mut BTreeSet<PathBuf>, rescan: &mut bool) {
    match res {
        Ok(event) => {
            if event.need_rescan() {
                *rescan = true;
            }
            let read_only = matches!(
                event.kind,
                EventKind::Access(kind) if kind != AccessKind::Close(AccessMode::Write)
            );
            if !read_only {
                paths.extend(event.paths);
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "file-system watcher error");
            *rescan = true;
        }
    }
}

/// Runs `f` until it succeeds, retrying broker failures with backoff; `None` if stopped
/// meanwhile.
fn retrying<T>(
    stop: &AtomicBool,
    settings: &WatchSettings,
    mut f: impl FnMut() -> Result<T>,
) -> Result<Option<T>> {
    let mut wait = Duration::from_millis(250);
    loop {
        match f() {
            Ok(v) => return Ok(Some(v)),
            Err(Error::Kafka(e)) => {
                tracing::warn!(error = %e, retry_in = ?wait, "broker did not acknowledge: retrying");
                let until = Instant::now() + wait;
                while Instant::now() < until {
                    if stop.load(Ordering::SeqCst) {
                        return Ok(None);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                wait = (wait * 2).min(settings.max_backoff);
            }
            Err(e) => return Err(e),
        }
    }
}

fn notify_err(e: notify::Error) -> Error {
    Error::Config(format!("watching files: {e}"))
}
