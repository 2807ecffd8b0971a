//! Replaying dead letters (`freshet dlq replay`): each original record written again to the
//! partition of its source topic it was read from, with its key and headers and a
//! `freshet.replay.of` header naming the dead letter ([`replay`]), and the replays already on
//! the source topics ([`find_replays`]), so that no dead letter is replayed twice.
//!
//! A replay goes to the partition its original was read from, after it, so the replays of a
//! dead letter are all in that partition past its source offset: reading from there to the end
//! finds every one the broker still holds. The record written is the proof; there is no marker
//! that could be written without the record or the other way round.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use freshet_kafka::{admin, dlq_headers, DocumentProducer, KafkaConfig};
use freshet_operators::limits::RecordLimits;

use super::letters::{read_to_end, At, Letter, Source};
use crate::topics::Topic;

/// Dead letter → where its replay is on its source topic.
pub type Replays = BTreeMap<At, Source>;

/// What a replay does with a dead letter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not replayed yet: it is written again.
    Replay,
    /// Replayed before, there: it is not written again.
    Replayed(Source),
    /// Not from a record of a topic (a file `freshet watch` refused), or without the
    /// `freshet.source.*` headers: there is nowhere to write it.
    NoSource,
    /// Its value is null (the stand-in of a record the topic no longer held): replaying it
    /// would delete the document; only a replay with a fixed value writes it.
    NullValue,
    /// Its key has a newer record on the source topic, there (an edit or a delete after the
    /// refused version): a replay would go after it and bring the older version back, so it is
    /// written only when asked (`--even-if-superseded`).
    Superseded(Source),
}

impl Verdict {
    /// What a dead letter gets, by what `scan` found: `fixed` when a corrected value replaces
    /// its own, `superseded_too` to replay it over a newer record of its key.
    pub fn of(letter: &Letter, scan: &ReplayScan, fixed: bool, superseded_too: bool) -> Verdict {
        if letter.source.is_none() {
            return Verdict::NoSource;
        }
        if let Some(s) = scan.found.get(&letter.at) {
            return Verdict::Replayed(s.clone());
        }
        if letter.value.is_none() && !fixed {
            return Verdict::NullValue;
        }
        match scan.newer.get(&letter.at) {
            Some(s) if !superseded_too => Verdict::Superseded(s.clone()),
            _ => Verdict::Replay,
        }
    }

    /// A short word for a table.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Replay => "replay",
            Verdict::Replayed(_) => "replayed before",
            Verdict::NoSource => "no source record",
            Verdict::NullValue => "null value (needs --fix)",
            Verdict::Superseded(_) => "superseded",
        }
    }
}

/// What [`find_replays`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayScan {
    pub found: Replays,
    /// Dead letter → the newest record of its key after its source record on the source
    /// partition (its own replays aside).
    pub newer: Replays,
    /// The source topics that could not be read (a topic or partition gone, a read that
    /// stalled), with why: whether their dead letters were replayed is not known.
    pub unreadable: BTreeMap<String, String>,
}

impl ReplayScan {
    /// Whether `letter` was replayed: `None` when that is not known.
    pub fn replayed(&self, letter: &Letter) -> Option<Option<&Source>> {
        match (&letter.source, self.found.get(&letter.at)) {
            (_, Some(s)) => Some(Some(s)),
            (Some(s), None) if self.unreadable.contains_key(&s.topic) => None,
            _ => Some(None),
        }
    }

    /// `Err` naming the unreadable topics, if any: a replay must know of every dead letter it
    /// takes whether it was replayed.
    pub fn complete(self) -> Result<ReplayScan> {
        if self.unreadable.is_empty() {
            return Ok(self);
        }
        let why: Vec<String> = self
            .unreadable
            .iter()
            .map(|(t, e)| format!("{t:?}: {e}"))
            .collect();
        bail!(
            "whether these dead letters were replayed is not known, so none is replayed; \
             narrow the filters to leave their source topics out, or fix the topics: {}",
            why.join("; ")
        )
    }
}

/// The replays of `letters` on their source topics (`dlq_topic` is the topic they were read
/// from). Reads each source partition from just past the first of their source offsets to its
/// end. A source topic or partition that is gone or cannot be read is noted, with why, in
/// [`ReplayScan::unreadable`].
pub fn find_replays(
    kafka: &KafkaConfig,
    dlq_topic: &str,
    letters: &[Letter],
) -> Result<ReplayScan> {
    let mut from: BTreeMap<&str, BTreeMap<i32, i64>> = BTreeMap::new();
    let mut wanted = Wanted::default();
    for l in letters {
        let Some(s) = &l.source else { continue };
        let first = from
            .entry(s.topic.as_str())
            .or_default()
            .entry(s.partition)
            .or_insert(s.offset + 1);
        *first = (*first).min(s.offset + 1);
        let origin = l.origin(dlq_topic);
        wanted.origins.insert(origin.clone(), l.at);
        if let Some(k) = &l.key {
            let of_key = (s.topic.clone(), s.partition, k.clone());
            wanted
                .keys
                .entry(of_key)
                .or_default()
                .push((l.at, s.offset, origin));
        }
    }
    let mut scan = ReplayScan::default();
    for (topic, parts) in from {
        if let Err(e) = scan_topic(kafka, topic, &parts, &wanted, &mut scan) {
            scan.unreadable.insert(topic.to_string(), format!("{e:#}"));
        }
    }
    Ok(scan)
}

/// What [`scan_topic`] looks for.
#[derive(Default)]
struct Wanted {
    /// `freshet.replay.of` → dead letter.
    origins: BTreeMap<String, At>,
    /// (source topic, partition, key) → its dead letters.
    keys: BTreeMap<(String, i32, Vec<u8>), Vec<OfKey>>,
}

/// A dead letter of a key: its place, its source offset and its origin.
type OfKey = (At, i64, String);

/// Adds to `scan` what `parts` (partition → first offset) of `topic` hold of the `wanted` dead
/// letters: their replays, and the newer records of their keys.
fn scan_topic(
    kafka: &KafkaConfig,
    topic: &str,
    parts: &BTreeMap<i32, i64>,
    wanted: &Wanted,
    scan: &mut ReplayScan,
) -> Result<()> {
    let existing = admin::partitions_with_timeout(kafka, topic, Duration::from_secs(30))
        .context("the topic is not on the broker")?;
    if let Some(p) = parts.keys().find(|p| !existing.contains(p)) {
        bail!("the topic has no partition {p}");
    }
    read_to_end(kafka, topic, parts, |r| {
        let place = || Source {
            topic: r.topic.clone(),
            partition: r.partition,
            offset: r.offset,
        };
        let replay_of: Vec<&str> = r
            .headers
            .iter()
            .filter(|(name, _)| name == dlq_headers::REPLAY_OF)
            .filter_map(|(_, v)| v.as_deref().and_then(|v| std::str::from_utf8(v).ok()))
            .collect();
        for origin in &replay_of {
            if let Some(at) = wanted.origins.get(*origin) {
                scan.found.entry(*at).or_insert_with(place);
            }
        }
        let Some(key) = &r.key else { return Ok(()) };
        let of_key = (r.topic.clone(), r.partition, key.clone());
        for (at, offset, origin) in wanted.keys.get(&of_key).into_iter().flatten() {
            if r.offset > *offset && !replay_of.contains(&origin.as_str()) {
                scan.newer.insert(*at, place());
            }
        }
        Ok(())
    })
}

/// The headers of `letter`'s replay: the original record's, but an earlier `freshet.replay.of`,
/// then the one naming this dead letter.
pub fn replay_headers(letter: &Letter, dlq_topic: &str) -> Vec<(String, Option<Vec<u8>>)> {
    letter
        .headers
        .iter()
        .filter(|(k, _)| k != dlq_headers::REPLAY_OF)
        .cloned()
        .chain(std::iter::once((
            dlq_headers::REPLAY_OF.to_string(),
            Some(letter.origin(dlq_topic).into_bytes()),
        )))
        .collect()
}

/// Writes `letter`'s record again where it was read (its source topic and partition), with
/// its key, [`replay_headers`] and `value` (its own, or a fixed one), and waits for the
/// broker's acknowledgement. Returns where the replay was written.
pub fn replay(
    producer: &DocumentProducer,
    dlq_topic: &str,
    letter: &Letter,
    value: Option<&[u8]>,
) -> Result<Source> {
    let Some(s) = &letter.source else {
        bail!("dead letter {} names no source record", letter.at);
    };
    let (partition, offset) = producer
        .send_record(
            &s.topic,
            s.partition,
            letter.key.as_deref(),
            value,
            &replay_headers(letter, dlq_topic),
        )
        .with_context(|| format!("replaying dead letter {} to {:?}", letter.at, s.topic))?;
    Ok(Source {
        topic: s.topic.clone(),
        partition,
        offset,
    })
}

/// Checks a corrected value for `letter` before it is replayed: JSON, and a record the
/// pipeline decodes with its key under the format and limits of its source topic (one of
/// `topics`), so that it does not go straight back to the dead-letter topic.
pub fn check_fix(
    letter: &Letter,
    fixed: &[u8],
    topics: &[Topic],
    limits: &RecordLimits,
) -> Result<()> {
    serde_json::from_slice::<serde_json::Value>(fixed).context("the fixed value is not JSON")?;
    let Some(s) = &letter.source else {
        bail!("dead letter {} names no source record", letter.at);
    };
    let Some(topic) = topics.iter().find(|t| t.name == s.topic) else {
        bail!(
            "dead letter {} came from {:?}, which this configuration does not read; replay it \
             with the configuration of the pipeline that reads it",
            letter.at,
            s.topic
        );
    };
    match topic
        .format
        .decode(letter.key.as_deref(), Some(fixed), limits)
    {
        Ok(_) => Ok(()),
        Err(e) => bail!(
            "the fixed value would be refused again ({}): {e}",
            e.class()
        ),
    }
}
