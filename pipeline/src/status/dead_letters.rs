//! The dead letters `/v1/status` shows: counted by class over the whole dead-letter topic, read
//! incrementally (each refresh reads only what was written since the last), with the newest
//! few kept and whether each was replayed: a replay (`freshet dlq replay`,
//! [`crate::dlq::replay`]) is a record of the source partition past its dead letter's source
//! record whose `freshet.replay.of` names the dead letter, so each source partition is read on
//! from where the last look stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use freshet_kafka::{admin, dlq_headers, KafkaConfig};
use serde::Serialize;

use crate::dlq::letters::{read_to_end, shown, At, Letter};

/// The newest dead letters kept.
pub const LATEST: usize = 20;
/// The characters of a key and of a message shown.
const KEY_CHARS: usize = 200;
const MESSAGE_CHARS: usize = 500;
/// How often the latest letters' replays are looked for again on their source topics (a new
/// letter is looked for at the next read).
const REPLAY_EVERY: Duration = Duration::from_secs(30);

/// One of the latest dead letters as `/v1/status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Latest {
    pub partition: i32,
    pub offset: i64,
    /// When it was refused (milliseconds since the Unix epoch).
    pub time_ms: Option<i64>,
    /// Shown safely (`crate::dlq::letters::shown`); `None` for a null key.
    pub key: Option<String>,
    pub class: String,
    pub stage: String,
    pub message: String,
    /// `topic/partition@offset` of the refused record; `None` when it names none.
    pub source: Option<String>,
    /// `None` while not known (its source topic could not be read yet).
    pub replayed: Option<bool>,
}

/// What the dead-letter topic held at the last read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeadLetters {
    pub by_class: BTreeMap<String, u64>,
    pub total: u64,
    /// Newest first.
    pub latest: Vec<Latest>,
}

/// The running count: where each partition was read up to, the counts, the newest letters.
#[derive(Debug, Default)]
pub struct Tally {
    /// Dead-letter partition → next offset to read.
    next: BTreeMap<i32, i64>,
    counts: DeadLetters,
    /// The newest letters, newest first, at most [`LATEST`].
    newest: Vec<Letter>,
    /// Of the newest letters looked for on their source topics: whether each was replayed
    /// (`None`: not known, its source topic could not be read).
    replays: BTreeMap<At, Option<bool>>,
    replays_checked: Option<Instant>,
    /// Source partition → how far the last look for replays read it: a replay of a letter
    /// looked for before is past that.
    replay_marks: BTreeMap<(String, i32), i64>,
}

impl Tally {
    /// Counts one dead letter read from the topic.
    pub fn add(&mut self, mut letter: Letter) {
        self.next
            .insert(letter.at.partition, letter.at.offset.saturating_add(1));
        *self
            .counts
            .by_class
            .entry(letter.class.clone())
            .or_insert(0) += 1;
        self.counts.total += 1;
        letter.value = None;
        letter.headers.clear();
        self.newest.push(letter);
        self.newest
            .sort_by_key(|l| std::cmp::Reverse((l.time_ms(), l.at)));
        self.newest.truncate(LATEST);
    }

    /// Where the next read of each partition starts (`-2`: its earliest record).
    pub fn from(&self, partitions: &[i32]) -> BTreeMap<i32, i64> {
        partitions
            .iter()
            .map(|p| (*p, self.next.get(p).copied().unwrap_or(-2)))
            .collect()
    }

    /// Reads what `kafka.dlq_topic` holds past the last read, then, at most every
    /// [`REPLAY_EVERY`], which of the newest letters were replayed.
    pub fn read_more(&mut self, kafka: &KafkaConfig) -> Result<()> {
        let topic = &kafka.dlq_topic;
        let partitions = admin::partitions_with_timeout(kafka, topic, Duration::from_secs(5))
            .with_context(|| format!("finding the dead-letter topic {topic:?} on the broker"))?;
        let from = self.from(&partitions);
        read_to_end(kafka, topic, &from, |r| {
            self.add(Letter::from_record(r));
            Ok(())
        })?;
        let unchecked = self
            .newest
            .iter()
            .any(|l| !self.replays.contains_key(&l.at));
        if unchecked
            || self
                .replays_checked
                .is_none_or(|t| t.elapsed() >= REPLAY_EVERY)
        {
            self.check_replays(kafka);
        }
        Ok(())
    }

    /// Looks for the replays of the newest letters not known to be replayed (a replay stays
    /// one): a letter not looked for yet from just past its source record, the others only in
    /// what their source partitions received since the last look ([`Tally::replay_marks`]).
    fn check_replays(&mut self, kafka: &KafkaConfig) {
        self.replays_checked = Some(Instant::now());
        let newest: BTreeSet<At> = self.newest.iter().map(|l| l.at).collect();
        self.replays.retain(|a, _| newest.contains(a));
        // Source partition → (first offset to read, the letters looked for there).
        let mut wanted: BTreeMap<(String, i32), (i64, Vec<&Letter>)> = BTreeMap::new();
        for l in &self.newest {
            let Some(s) = &l.source else { continue };
            if self.replays.get(&l.at) == Some(&Some(true)) {
                continue;
            }
            let tp = (s.topic.clone(), s.partition);
            let past = s.offset.saturating_add(1);
            let first = match self.replays.get(&l.at) {
                Some(Some(false)) => self
                    .replay_marks
                    .get(&tp)
                    .copied()
                    .unwrap_or(past)
                    .max(past),
                _ => past,
            };
            let e = wanted.entry(tp).or_insert((first, Vec::new()));
            e.0 = e.0.min(first);
            e.1.push(l);
        }
        let mut found: BTreeMap<At, Option<bool>> = BTreeMap::new();
        for ((topic, partition), (first, letters)) in wanted {
            let origins: BTreeMap<String, At> = letters
                .iter()
                .map(|l| (l.origin(&kafka.dlq_topic), l.at))
                .collect();
            let mut next = first;
            let mut replayed = BTreeSet::new();
            let read = read_to_end(kafka, &topic, &BTreeMap::from([(partition, first)]), |r| {
                next = next.max(r.offset.saturating_add(1));
                for (name, v) in &r.headers {
                    let origin = v.as_deref().and_then(|v| std::str::from_utf8(v).ok());
                    if name == dlq_headers::REPLAY_OF {
                        if let Some(at) = origin.and_then(|o| origins.get(o)) {
                            replayed.insert(*at);
                        }
                    }
                }
                Ok(())
            });
            match read {
                Ok(()) => {
                    self.replay_marks.insert((topic, partition), next);
                    for l in letters {
                        found.insert(l.at, Some(replayed.contains(&l.at)));
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        topic,
                        partition,
                        error = %format!("{e:#}"),
                        "looking for replays of dead letters"
                    );
                    for l in letters {
                        found.insert(l.at, None);
                    }
                }
            }
        }
        self.replays.extend(found);
    }

    /// The counts and the newest letters as shown.
    pub fn view(&self) -> DeadLetters {
        let mut out = self.counts.clone();
        out.latest = self
            .newest
            .iter()
            .map(|l| Latest {
                partition: l.at.partition,
                offset: l.at.offset,
                time_ms: l.time_ms(),
                key: l.key.as_deref().map(|k| shown(k, KEY_CHARS)),
                class: l.class.clone(),
                stage: l.stage.clone(),
                message: shown(l.message.as_bytes(), MESSAGE_CHARS),
                source: l
                    .source
                    .as_ref()
                    .map(|s| format!("{}/{}@{}", s.topic, s.partition, s.offset)),
                replayed: self.replays.get(&l.at).copied().flatten(),
            })
            .collect();
        out
    }
}
