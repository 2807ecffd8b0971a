//! Changelog records gathered into the batches a replica commits.
//!
//! A replica reads changes and applies them to its index only at a batch marker, so that it
//! never commits half a batch. Compaction complicates this: it removes a record once a later
//! record has the same key, so a stretch of the log that was compacted, read up to a marker,
//! can hold some chunks at a later batch's state and others at this batch's, a state the
//! pipeline never had. Kafka never compacts a record younger than the topic's
//! `min.compaction.lag.ms`, so a stretch whose every record was younger than that when it was
//! read is whole; any other stretch is committed only at a marker that is the last record of
//! the log (everything compaction removed before it was superseded before it too).
//!
//! A replica may also hand a whole stretch's changes to its index before the marker
//! ([`Assembler::stage`]), to build their segment while the pipeline commits; it still commits
//! only at a marker that [`Assembler::push`] returns. Changes staged and changes applied at the
//! marker end in the same index as all of them applied at the marker, because the index applies
//! each batch in order and the last change of a chunk wins either way.

use std::collections::BTreeMap;

use super::{Entry, Marker};
use crate::chunk::Chunk;

/// Where a record was read, for deciding whether the stretch it is in may have been compacted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    /// The record was younger than the topic's compaction lag (less a margin for clocks) when
    /// it was read: nothing before it up to the previous commit was compacted away.
    pub fresh: bool,
    /// The record is the last one of the log as the replica knows it (its offset + 1 is the
    /// high watermark).
    pub last_in_log: bool,
}

/// A complete batch: what the replica writes and commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ready {
    /// The chunks written, each once (its latest record).
    pub upserts: Vec<Chunk>,
    /// The chunk ids removed.
    pub deletes: Vec<String>,
    /// The marker the commit stands for.
    pub marker: Marker,
}

/// The changes read since the last commit.
#[derive(Debug, Default)]
pub struct Assembler {
    /// chunk id → its latest record (`None`: deleted).
    pending: BTreeMap<String, Option<Chunk>>,
    /// A record since the last commit may have been read from a compacted stretch.
    stale: bool,
    /// Changes handed over by [`Assembler::stage`] since the last commit.
    staged: usize,
}

impl Assembler {
    /// An assembler starting at a marker (a fresh replica starts at offset 0, before any
    /// record: the whole log so far counts as one stretch).
    pub fn new() -> Assembler {
        Assembler::default()
    }

    /// Takes one record read at `read`. Returns the batch to commit at a marker that closes a
    /// whole stretch; `None` while the batch is open, or at a marker after a possibly compacted
    /// stretch that is not the end of the log (the changes wait for a later marker).
    pub fn push(&mut self, entry: Entry, read: Read) -> Option<Ready> {
        if !read.fresh {
            self.stale = true;
        }
        match entry {
            Entry::Upsert(chunk) => {
                self.pending.insert(chunk.chunk_id.clone(), Some(*chunk));
                None
            }
            Entry::Delete(id) => {
                self.pending.insert(id, None);
                None
            }
            Entry::Marker(marker) => {
                if self.stale && !read.last_in_log {
                    return None;
                }
                self.stale = false;
                self.staged = 0;
                let (upserts, deletes) = self.take_pending();
                Some(Ready {
                    upserts,
                    deletes,
                    marker,
                })
            }
        }
    }

    /// Hands over the changes read since the last commit or stage, for the index to stage
    /// (apply without committing), when the stretch is whole: `None` when none wait or when
    /// they may come from a compacted stretch (they wait for the end of the log). The marker's
    /// [`Ready`] then holds only the changes read after this.
    pub fn stage(&mut self) -> Option<(Vec<Chunk>, Vec<String>)> {
        if self.stale || self.pending.is_empty() {
            return None;
        }
        self.staged += self.pending.len();
        Some(self.take_pending())
    }

    /// The changes waiting, as upserts and deletes, each chunk once (its latest record).
    fn take_pending(&mut self) -> (Vec<Chunk>, Vec<String>) {
        let mut upserts = Vec::new();
        let mut deletes = Vec::new();
        for (id, c) in std::mem::take(&mut self.pending) {
            match c {
                Some(c) => upserts.push(c),
                None => deletes.push(id),
            }
        }
        (upserts, deletes)
    }

    /// How many chunk changes wait for a marker, staged ones included.
    pub fn pending(&self) -> usize {
        self.pending.len() + self.staged
    }

    /// Whether the changes waiting come (in part) from a stretch that may have been
    /// compacted: they are committed only at the end of the log.
    pub fn waits_for_the_end(&self) -> bool {
        self.stale
    }
}
