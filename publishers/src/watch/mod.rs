//! Folder sync (`freshet watch DIR…`): keeps the document topic equal to the files under one or
//! more directories, from an initial scan and then file-system events, across restarts.
//!
//! * **What is published.** Create or modify → an upsert (the file as [`crate::publish_dir`]
//!   sends it); delete, move out of the tree, or a file no longer matching the filter → a
//!   tombstone; rename → tombstone of the old id + upsert of the new; a removed or moved
//!   directory → the same for every file below it. A file whose bytes did not change (a
//!   `touch`, an editor saving the same text) is never re-published.
//! * **Durable.** The [`state`] (size, times, blake3 and acknowledged offset per file) is
//!   written only after the broker acknowledged; at start every root is compared with it, so
//!   what changed while the watcher was down (deletes included) is published and nothing else.
//! * **Events** come from the `notify` crate (inotify on Linux) and are batched ([`events`]):
//!   a burst of events for one save becomes one sync of the paths it named. A lost event queue
//!   (overflow) makes the watcher compare every root again.
//! * **Refused files** (too large, unreadable, text that is not UTF-8) go to the dead-letter
//!   topic with their path and reason, and delete their previous version; the watcher carries
//!   on.
//! * **Broker outages** stall the watcher: a batch that is not acknowledged is retried (with
//!   backoff) and never recorded as done.

pub mod events;
mod outlet;
pub mod state;
pub mod sync;
pub mod tree;

pub use events::{watch, WatchSettings};
pub use outlet::KafkaOutlet;
pub use state::{Entry, State};
pub use sync::{DeadFile, Outlet, SyncReport, Syncer};
pub use tree::{Filter, Root, Tree};

#[cfg(test)]
mod tests;
