//! Crash-loop quarantine: a record that kills the process while it is prepared (a parser that
//! runs out of memory, aborts or overflows its stack) would be read again after every restart,
//! from the last commit, and kill the process again. The pipeline knows which records are in
//! flight, so such a record is dead-lettered (`crash_loop`, stage `prepare`) after
//! `[pipeline] crash_loop_limit` consecutive crashes with it in flight, and indexing goes on.
//!
//! - **In flight.** Each worker marks the record it is about to prepare in its own slot of a
//!   small file beside the process's embedding cache, and clears the slot once the record is
//!   prepared ([`Slot`]; one `pwrite` each way, nothing synced: marks only have to outlive the
//!   process, see [`flight`]).
//! - **Counted at start.** The marks left by a run that died are counted into the crash ledger
//!   ([`ledger`]; synced, replaced atomically, with the id of the run it counted so that no
//!   crash counts twice): a record in flight gains a crash.
//! - **Blamed alone.** A first crash may find several records in flight: one per worker, and
//!   only one of them at fault. So before the workers start, every record with fewer crashes
//!   than the limit is read again from its topic and prepared alone, marked in a slot of its
//!   own: the record at fault kills the process again and gains its next crash with nothing
//!   beside it; an innocent one comes through and leaves the ledger (as does a record the
//!   topic no longer holds). From the second crash on, the count is exact: the crashes a record
//!   is blamed for are consecutive, every one with it in flight.
//! - **Quarantined.** A record with `crash_loop_limit` crashes is not prepared when it is read:
//!   it is refused like any record that cannot be indexed (dead letter, its document deleted).
//!   It stays in the ledger until the index's offsets are past it; a record at the same place
//!   with other bytes (a topic created again) is not held.
//!
//! What is not covered: a crash while the model embeds (its batches mix the texts of many
//! records, and a text it cannot embed is refused with `embedding_failed`), or in the sink.

mod flight;
mod ledger;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use freshet_kafka::PartitionReader;
use freshet_operators::intake::intake_as;
use serde::{Deserialize, Serialize};

pub use flight::Slot;

use self::flight::{read_marks, Flight};
use self::ledger::Ledger;
use crate::config::Config;
use crate::endpoint::Readiness;
use crate::metrics::Metrics;
use crate::sink::plan::Offsets;
use crate::source::Processing;
use crate::topics::Topic;

/// The DLQ class of a quarantined record.
pub const CRASH_LOOP: &str = "crash_loop";

/// How long reading a record again at start may take.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a record is: topic, partition, offset.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RecordAt {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// blake3 of a record's key and value (hex, 128 bits).
pub fn fingerprint(key: Option<&[u8]>, value: Option<&[u8]>) -> String {
    let mut h = blake3::Hasher::new();
    for part in [key, value] {
        match part {
            Some(b) => {
                h.update(&[1]);
                h.update(&(b.len() as u64).to_le_bytes());
                h.update(b);
            }
            None => {
                h.update(&[0]);
            }
        }
    }
    h.finalize().to_hex()[..32].to_string()
}

/// The records quarantined, with their crashes. Read-only once the workers run.
#[derive(Debug, Default)]
pub struct Quarantine {
    held: HashMap<RecordAt, (Option<String>, u32)>,
}

impl Quarantine {
    /// The crashes of the record at `at` with `key` and `value` when it is quarantined.
    pub fn crashes(&self, at: &RecordAt, key: Option<&[u8]>, value: Option<&[u8]>) -> Option<u32> {
        let (print, crashes) = self.held.get(at)?;
        match print {
            Some(p) if *p != fingerprint(key, value) => None,
            _ => Some(*crashes),
        }
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// What the workers get: the quarantined records and a slot each.
pub struct Started {
    pub quarantine: Arc<Quarantine>,
    flight: Option<Flight>,
}

impl Started {
    /// No quarantine (`crash_loop_limit = 0`).
    pub fn off() -> Started {
        Started {
            quarantine: Arc::default(),
            flight: None,
        }
    }

    /// The slot of the process's worker `local` (0-based within the process).
    pub fn slot(&self, local: usize) -> Slot {
        self.flight
            .as_ref()
            .map_or_else(Slot::off, |f| f.slot(local))
    }
}

/// The files of the process whose embedding cache is `cache`: its slots and its ledger.
pub fn paths(cache: &Path) -> (PathBuf, PathBuf) {
    (
        cache.with_extension("inflight"),
        cache.with_extension("crashes.json"),
    )
}

/// Counts the last run's crash, prepares alone every record still under the limit, and returns
/// what the workers need (see the module docs). `start_offsets` are the durable offsets (empty
/// on processes other than 0): a record below them is never read again and leaves the ledger.
pub fn start(
    config: &Config,
    topics: &[Topic],
    processing: &Processing,
    start_offsets: &Offsets,
    ready: &Readiness,
    metrics: &Metrics,
) -> Result<Started> {
    let limit = config.pipeline.crash_loop_limit;
    let (inflight, ledger_path) = paths(&crate::preflight::cache_path(config));
    let durable = |at: &RecordAt| {
        topics
            .iter()
            .position(|t| t.name == at.topic)
            .and_then(|t| {
                start_offsets.get(&crate::sink::plan::TopicPartition {
                    topic: t,
                    partition: at.partition,
                })
            })
            .is_some_and(|next| at.offset < *next)
    };
    let workers = config.pipeline.workers;
    let (mut ledger, flight) =
        count_last_run(&inflight, &ledger_path, limit, workers + 1, &durable)?;
    if limit == 0 {
        metrics.quarantined_records.set(0);
        return Ok(Started {
            quarantine: Arc::default(),
            flight: None,
        });
    }
    let trial = flight.slot(workers);
    let mut i = 0;
    while i < ledger.records.len() {
        let e = ledger.records[i].clone();
        let Some(topic) = topics.iter().find(|t| t.name == e.at.topic) else {
            ledger.records.remove(i);
            continue;
        };
        let quarantined = e.crashes >= limit;
        if quarantined && e.fingerprint.is_some() {
            i += 1;
            continue;
        }
        ready.step(format!(
            "reading {} partition {} offset {} again: the pipeline died while preparing it",
            e.at.topic, e.at.partition, e.at.offset
        ));
        let record = PartitionReader::read_one(
            &config.kafka,
            &e.at.topic,
            e.at.partition,
            e.at.offset,
            READ_TIMEOUT,
        )
        .with_context(|| format!("reading {} again", describe(&e.at)))?;
        let Some(record) = record else {
            // Gone from the topic (retention, compaction): it is never read again.
            ledger.records.remove(i);
            ledger.save(&ledger_path)?;
            continue;
        };
        let print = fingerprint(record.key.as_deref(), record.value.as_deref());
        if e.fingerprint.as_ref().is_some_and(|p| *p != print) {
            ledger.records.remove(i);
            ledger.save(&ledger_path)?;
            continue;
        }
        ledger.records[i].fingerprint = Some(print);
        ledger.save(&ledger_path)?;
        if quarantined {
            i += 1;
            continue;
        }
        ready.step(format!(
            "preparing {} alone: the pipeline died while preparing it ({} of {limit} crashes)",
            describe(&e.at),
            e.crashes
        ));
        tracing::warn!(record = %describe(&e.at), crashes = e.crashes, limit,
            "preparing alone a record that was in flight when the pipeline died");
        trial.mark(&e.at);
        crate::faults::before_prepare(record.key.as_deref());
        let _ = intake_as(
            &topic.format,
            record.key.as_deref(),
            record.value.as_deref(),
            &processing.limits,
            &processing.chunking,
            processing.tokens.as_ref(),
        );
        trial.clear();
        tracing::info!(record = %describe(&e.at), "prepared alone without a crash: not held");
        ledger.records.remove(i);
        ledger.save(&ledger_path)?;
    }
    let held: HashMap<RecordAt, (Option<String>, u32)> = ledger
        .records
        .into_iter()
        .filter(|e| e.crashes >= limit)
        .map(|e| (e.at, (e.fingerprint, e.crashes)))
        .collect();
    for (at, (_, crashes)) in &held {
        tracing::error!(record = %describe(at), crashes,
            "quarantined: the pipeline died {crashes} times in a row while preparing this record; \
             it goes to the dead-letter topic ({CRASH_LOOP}) when it is read");
    }
    metrics.quarantined_records.set(held.len() as i64);
    Ok(Started {
        quarantine: Arc::new(Quarantine { held }),
        flight: Some(flight),
    })
}

/// Counts the marks the last run left into the ledger (dropping records below the durable
/// offsets), saves it, and starts this run's slots file with `slots` empty slots.
fn count_last_run(
    inflight: &Path,
    ledger_path: &Path,
    limit: u32,
    slots: usize,
    durable: &dyn Fn(&RecordAt) -> bool,
) -> Result<(Ledger, Flight)> {
    let marks = read_marks(inflight)?;
    let mut ledger = Ledger::load(ledger_path)?.after(&marks);
    ledger.records.retain(|e| limit > 0 && !durable(&e.at));
    if !marks.is_empty() && limit > 0 {
        for e in &ledger.records {
            tracing::warn!(record = %describe(&e.at), crashes = e.crashes, limit,
                "the pipeline died while this record was being prepared");
        }
    }
    ledger.save(ledger_path)?;
    let flight = Flight::create(inflight, slots, run_id())?;
    Ok((ledger, flight))
}

fn describe(at: &RecordAt) -> String {
    format!(
        "{} partition {} offset {}",
        at.topic, at.partition, at.offset
    )
}

/// A run id no earlier run of this process has had: the clock in nanoseconds and the pid.
fn run_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 48)
}

#[cfg(test)]
mod tests;
