//! The crash ledger: for each record found in flight when the process died, how many
//! consecutive crashes it has been in flight for. Pure counting ([`Ledger::after`]), and a JSON
//! file replaced atomically (written aside, synced, renamed, the directory synced): it changes
//! only at start, so syncing it costs nothing while records flow.

use std::collections::BTreeSet;
use std::io::{ErrorKind, Write};
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::flight::Mark;
use super::RecordAt;

/// One record the ledger follows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) at: RecordAt,
    /// blake3 of the record's key and value (hex, 128 bits), once read: a record at the same
    /// place in a topic deleted and created again is another record.
    pub(crate) fingerprint: Option<String>,
    /// Consecutive crashes with the record in flight.
    pub(crate) crashes: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Ledger {
    /// The run whose marks this ledger has counted: a start that dies after saving the ledger
    /// and before clearing the marks does not count them twice.
    pub(crate) counted_run: Option<u64>,
    pub(crate) records: Vec<Entry>,
}

impl Ledger {
    /// The ledger after a run that left `marks` in flight when it ended (none when it stopped
    /// cleanly, or died with nothing in flight):
    ///
    /// - a record in flight gains a crash (a new one starts at 1);
    /// - a record not in flight keeps its count: every record the ledger holds under the limit
    ///   is prepared alone at start, before anything else, and leaves the ledger when it comes
    ///   through, so a run that ended without it in flight never got to it (it died or failed
    ///   during its start);
    /// - marks of the run already counted change nothing.
    pub(crate) fn after(&self, marks: &[Mark]) -> Ledger {
        if !marks.is_empty() && marks.iter().all(|m| Some(m.run) == self.counted_run) {
            return self.clone();
        }
        let in_flight: BTreeSet<&RecordAt> = marks.iter().map(|m| &m.at).collect();
        let mut records: Vec<Entry> = self
            .records
            .iter()
            .map(|e| Entry {
                crashes: if in_flight.contains(&e.at) {
                    e.crashes.saturating_add(1)
                } else {
                    e.crashes
                },
                ..e.clone()
            })
            .collect();
        for at in in_flight {
            if !self.records.iter().any(|e| &e.at == at) {
                records.push(Entry {
                    at: at.clone(),
                    fingerprint: None,
                    crashes: 1,
                });
            }
        }
        Ledger {
            counted_run: marks.iter().map(|m| m.run).max().or(self.counted_run),
            records,
        }
    }

    /// Reads `path` (an empty ledger when it does not exist).
    pub(crate) fn load(path: &Path) -> Result<Ledger> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Ledger::default()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a crash ledger; if it was damaged, move it away to start counting \
                 crashes afresh",
                path.display()
            )
        })
    }

    /// Replaces `path` with this ledger, durably.
    pub(crate) fn save(&self, path: &Path) -> Result<()> {
        let tmp = path.with_extension("json.tmp");
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            if let Some(dir) = path.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        write().with_context(|| format!("writing the crash ledger {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: i64) -> RecordAt {
        RecordAt {
            topic: "t".into(),
            partition: 0,
            offset,
        }
    }

    fn mark(run: u64, offset: i64) -> Mark {
        Mark {
            run,
            at: at(offset),
        }
    }

    fn crashes(l: &Ledger) -> Vec<(i64, u32)> {
        l.records.iter().map(|e| (e.at.offset, e.crashes)).collect()
    }

    /// The killer (offset 7) gains a crash each time it is in flight; a record not in flight
    /// keeps its count; marks counted once are not counted again.
    #[test]
    fn consecutive_crashes_count() {
        let l = Ledger::default().after(&[mark(1, 7), mark(1, 3)]);
        assert_eq!(crashes(&l), [(3, 1), (7, 1)]);
        let l = l.after(&[mark(2, 7)]);
        assert_eq!(crashes(&l), [(3, 1), (7, 2)]);
        // the same marks again (a start died after saving): counted once
        assert_eq!(l.after(&[mark(2, 7)]), l);
        let l = l.after(&[mark(3, 7)]).after(&[]);
        assert_eq!(crashes(&l), [(3, 1), (7, 3)]);
        let l = l.after(&[mark(4, 9)]);
        assert_eq!(crashes(&l), [(3, 1), (7, 3), (9, 1)]);
        assert_eq!(l.counted_run, Some(4));
    }

    #[test]
    fn saved_ledgers_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.crashes.json");
        assert_eq!(Ledger::load(&path).unwrap(), Ledger::default());
        let l = Ledger::default().after(&[mark(5, 1)]);
        l.save(&path).unwrap();
        assert_eq!(Ledger::load(&path).unwrap(), l);
        std::fs::write(&path, "{").unwrap();
        let e = Ledger::load(&path).unwrap_err();
        assert!(format!("{e:#}").contains("move it away"), "{e:#}");
    }
}
