//! The records in flight: one fixed slot per worker (and one for the trials at start) in a small
//! file, written with one `pwrite` before a record is prepared and one after.
//!
//! What must survive is only the death of the process (killed, out of memory, aborted): a
//! `pwrite` is in the kernel's page cache once it returns, and the kernel writes it out whatever
//! becomes of the process, so no slot is synced. A machine that loses power may lose marks: a
//! crash then goes uncounted, so a record is quarantined later, never sooner. Each slot carries
//! a checksum over what it names, so a torn or foreign slot reads as empty.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};

use super::RecordAt;

/// Bytes per slot: the state byte, the run, the partition, the offset, the topic (at most 249
/// bytes in Kafka) and a checksum.
pub(crate) const SLOT: usize = 512;
const STATE: usize = 0;
const BODY: std::ops::Range<usize> = 1..SLOT - 8;
const SUM: std::ops::Range<usize> = SLOT - 8..SLOT;
const IN_FLIGHT: u8 = 1;

/// A record some slot held in flight, and the run that wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mark {
    pub(crate) run: u64,
    pub(crate) at: RecordAt,
}

fn encode(run: u64, at: &RecordAt) -> Option<[u8; SLOT]> {
    let topic = at.topic.as_bytes();
    if topic.len() > SLOT - 40 {
        return None;
    }
    let mut b = [0u8; SLOT];
    b[STATE] = IN_FLIGHT;
    b[1..9].copy_from_slice(&run.to_le_bytes());
    b[9..13].copy_from_slice(&at.partition.to_le_bytes());
    b[13..21].copy_from_slice(&at.offset.to_le_bytes());
    b[21..23].copy_from_slice(&(topic.len() as u16).to_le_bytes());
    b[23..23 + topic.len()].copy_from_slice(topic);
    let sum = blake3::hash(&b[BODY]);
    b[SUM].copy_from_slice(&sum.as_bytes()[..8]);
    Some(b)
}

fn decode(b: &[u8]) -> Option<Mark> {
    if b.len() != SLOT || b[STATE] != IN_FLIGHT {
        return None;
    }
    if blake3::hash(&b[BODY]).as_bytes()[..8] != b[SUM] {
        return None;
    }
    let int = |r: std::ops::Range<usize>| b.get(r);
    let run = u64::from_le_bytes(int(1..9)?.try_into().ok()?);
    let partition = i32::from_le_bytes(int(9..13)?.try_into().ok()?);
    let offset = i64::from_le_bytes(int(13..21)?.try_into().ok()?);
    let len = usize::from(u16::from_le_bytes(int(21..23)?.try_into().ok()?));
    let topic = std::str::from_utf8(int(23..23 + len)?).ok()?.to_owned();
    Some(Mark {
        run,
        at: RecordAt {
            topic,
            partition,
            offset,
        },
    })
}

/// The marks a file holds (none when it does not exist).
pub(crate) fn read_marks(path: &Path) -> Result<Vec<Mark>> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)
                .with_context(|| format!("reading {}", path.display()))?;
        }
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    }
    Ok(bytes.chunks(SLOT).filter_map(decode).collect())
}

/// The slots file of one run: every slot empty, its blocks written (no hole left for a full disk
/// to refuse later).
pub(crate) struct Flight {
    file: Arc<File>,
    run: u64,
    slots: usize,
    /// A failed mark is logged once.
    warned: Arc<AtomicBool>,
}

impl Flight {
    /// Creates `path` afresh with `slots` empty slots for run `run`.
    pub(crate) fn create(path: &Path, slots: usize, run: u64) -> Result<Flight> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .with_context(|| format!("creating {}", path.display()))?;
        file.write_all_at(&vec![0u8; slots * SLOT], 0)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(Flight {
            file: Arc::new(file),
            run,
            slots,
            warned: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Slot `index` (out of range: the last one).
    pub(crate) fn slot(&self, index: usize) -> Slot {
        Slot {
            file: Some(self.file.clone()),
            offset: (index.min(self.slots.saturating_sub(1)) * SLOT) as u64,
            run: self.run,
            warned: self.warned.clone(),
        }
    }
}

/// One worker's slot. [`Slot::off`] is a slot that records nothing.
pub struct Slot {
    file: Option<Arc<File>>,
    offset: u64,
    run: u64,
    warned: Arc<AtomicBool>,
}

impl Slot {
    /// A slot that records nothing (no quarantine).
    pub fn off() -> Slot {
        Slot {
            file: None,
            offset: 0,
            run: 0,
            warned: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Marks `at` in flight.
    pub fn mark(&self, at: &RecordAt) {
        let Some(file) = &self.file else {
            return;
        };
        let Some(bytes) = encode(self.run, at) else {
            return;
        };
        if let Err(e) = file.write_all_at(&bytes, self.offset) {
            self.warn(e);
        }
    }

    /// Nothing in flight.
    pub fn clear(&self) {
        let Some(file) = &self.file else {
            return;
        };
        if let Err(e) = file.write_all_at(&[0], self.offset + STATE as u64) {
            self.warn(e);
        }
    }

    fn warn(&self, e: std::io::Error) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::error!(error = %e, "cannot record the record in flight; a crash it causes \
                will not be counted towards its quarantine");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: i64) -> RecordAt {
        RecordAt {
            topic: "documents".into(),
            partition: 2,
            offset,
        }
    }

    /// A mark survives the slot's owner (nothing but the file is read back); a cleared slot, a
    /// torn one and a slot of garbage read as empty.
    #[test]
    fn marks_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.inflight");
        assert!(read_marks(&path).unwrap().is_empty());
        let flight = Flight::create(&path, 3, 77).unwrap();
        flight.slot(0).mark(&at(5));
        flight.slot(2).mark(&at(9));
        flight.slot(1).mark(&at(7));
        flight.slot(1).clear();
        drop(flight);
        let marks = read_marks(&path).unwrap();
        assert_eq!(
            marks,
            vec![Mark { run: 77, at: at(5) }, Mark { run: 77, at: at(9) }]
        );
        // a torn slot: its body changed after its checksum
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0xff], 14).unwrap();
        assert_eq!(
            read_marks(&path).unwrap(),
            vec![Mark { run: 77, at: at(9) }]
        );
        // a new run starts empty
        let again = Flight::create(&path, 3, 78).unwrap();
        assert!(read_marks(&path).unwrap().is_empty());
        again.slot(9).mark(&at(1));
        assert_eq!(
            read_marks(&path).unwrap(),
            vec![Mark { run: 78, at: at(1) }]
        );
    }
}
