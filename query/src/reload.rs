//! What wakes the node's tantivy reload thread: a file notification on the index's
//! `meta.json`, which tantivy replaces (write, then rename) at every commit, so the node loads a
//! commit as soon as it is durable; and the poll interval (`reload_interval_ms`), which bounds
//! how stale the node can be when a notification is missed, cannot be set up (no inotify
//! watches left, a file system without notifications) or is turned off
//! (`[query] reload_notify = false`).
//!
//! A watch is set up on the index directory when it exists and set up again when the directory
//! is replaced (an index re-created in place): a watch follows the directory it was set on, not
//! its path.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use notify::event::ModifyKind;
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};

/// The file tantivy replaces at every commit.
const META: &str = "meta.json";

/// What ended a wait for the next commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// `meta.json` was replaced (or the watch reported an error, which is checked at once).
    Notified,
    /// The poll interval passed.
    Polled,
}

impl Wake {
    /// The `trigger` label of `index_reloads_total`.
    pub fn label(self) -> &'static str {
        match self {
            Wake::Notified => "notify",
            Wake::Polled => "poll",
        }
    }
}

/// The watch on one index directory.
struct Watch {
    /// Dropping it ends the watch.
    _watcher: RecommendedWatcher,
    /// The directory watched (device, inode), to see it replaced.
    identity: Option<(u64, u64)>,
    /// Set by the watcher when the watch ended or failed: set it up again.
    lost: Arc<AtomicBool>,
}

/// Waits for a new commit of the index at `dir`: a notification, else the poll interval.
pub struct CommitWatch {
    dir: PathBuf,
    enabled: bool,
    tx: SyncSender<()>,
    rx: Receiver<()>,
    watch: Option<Watch>,
    /// Logged once: why notifications are not used.
    warned: bool,
}

impl CommitWatch {
    /// `enabled`: use file notifications (else poll only).
    pub fn new(dir: &Path, enabled: bool) -> CommitWatch {
        // One pending wake-up is enough: a burst of events is one reload.
        let (tx, rx) = mpsc::sync_channel(1);
        CommitWatch {
            dir: dir.to_path_buf(),
            enabled,
            tx,
            rx,
            watch: None,
            warned: false,
        }
    }

    /// Whether a notification watch is set up now.
    pub fn watching(&self) -> bool {
        self.watch.is_some()
    }

    /// Waits until `meta.json` changes or `interval` passes, setting the watch up (again)
    /// first where needed.
    pub fn wait(&mut self, interval: Duration) -> Wake {
        self.ensure();
        match self.rx.recv_timeout(interval) {
            Ok(()) => {
                // Events that came with this one are the same commit (or an older one).
                while self.rx.try_recv().is_ok() {}
                Wake::Notified
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => Wake::Polled,
        }
    }

    /// Sets the watch up when notifications are on and there is none, or the one there is
    /// ended or follows a directory that is no longer at the path.
    fn ensure(&mut self) {
        if !self.enabled {
            return;
        }
        let identity = dir_identity(&self.dir);
        if let Some(w) = &self.watch {
            if !w.lost.load(Ordering::SeqCst) && w.identity == identity {
                return;
            }
            self.watch = None;
        }
        if identity.is_none() {
            return; // no directory yet: polled until there is
        }
        match self.watch_dir(identity) {
            Ok(w) => {
                self.watch = Some(w);
                // A commit may have landed before the watch: look once more at once.
                let _ = self.tx.try_send(());
            }
            Err(e) => {
                if !self.warned {
                    self.warned = true;
                    tracing::warn!(dir = %self.dir.display(), error = %e,
                        "no file notifications for the tantivy index; polling it every reload_interval_ms");
                }
            }
        }
    }

    fn watch_dir(&self, identity: Option<(u64, u64)>) -> notify::Result<Watch> {
        let (tx, lost) = (self.tx.clone(), Arc::new(AtomicBool::new(false)));
        let (dir, seen_lost) = (self.dir.clone(), lost.clone());
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<Event>| match event {
                Ok(e) => {
                    // Reading meta.json (the reload itself) raises access events: only a
                    // write, a rename or a removal is a commit, else each reload wakes the next.
                    if matches!(e.kind, EventKind::Access(_)) {
                        return;
                    }
                    if e.paths.iter().any(|p| p.file_name() == Some(META.as_ref())) {
                        let _ = tx.try_send(());
                    } else if matches!(
                        e.kind,
                        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
                    ) && e.paths.iter().any(|p| p == &dir)
                    {
                        // The directory itself went away (deleted or moved).
                        seen_lost.store(true, Ordering::SeqCst);
                        let _ = tx.try_send(());
                    }
                }
                Err(_) => {
                    // Events may have been dropped (a queue overflow): look now, watch again.
                    seen_lost.store(true, Ordering::SeqCst);
                    let _ = tx.try_send(());
                }
            })?;
        watcher.watch(&self.dir, RecursiveMode::NonRecursive)?;
        Ok(Watch {
            _watcher: watcher,
            identity,
            lost,
        })
    }
}

/// The directory at `dir` (device and inode on Unix), `None` when there is none.
fn dir_identity(dir: &Path) -> Option<(u64, u64)> {
    let meta = std::fs::metadata(dir).ok()?;
    if !meta.is_dir() {
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some((meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        Some((0, 0))
    }
}

/// When `meta.json` in `dir` was last written: when the newest commit became durable.
pub fn meta_written(dir: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(dir.join(META)).ok()?.modified().ok()
}
