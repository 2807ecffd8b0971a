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
}

impl Verdict {
    /// What a dead letter gets: `fixed` when a corrected value replaces its own.
    pub fn of(letter: &Letter, replays: &Replays, fixed: bool) -> Verdict {
        if letter.source.is_none() {
            return Verdict::NoSource;
        }
        if let Some(s) = replays.get(&letter.at) {
            return Verdict::Replayed(s.clone());
        }
        if letter.value.is_none() && !fixed {
            return Verdict::NullValue;
        }
        Verdict::Replay
    }

    /// A short word for a table.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Replay => "replay",
            Verdict::Replayed(_) => "replayed before",
            Verdict::NoSource => "no source record",
            Verdict::NullValue => "null value (needs --fix)",
        }
    }
}

/// The replays of `letters` on their source topics (`dlq_topic` is the topic they were read
/// from). Reads each source partition from just past the first of their source offsets to its
/// end. `Err` when a source topic or partition is gone or cannot be read: whether a dead letter
/// was replayed is then not known.
pub fn find_replays(kafka: &KafkaConfig, dlq_topic: &str, letters: &[Letter]) -> Result<Replays> {
    let mut from: BTreeMap<&str, BTreeMap<i32, i64>> = BTreeMap::new();
    let mut wanted: BTreeMap<String, At> = BTreeMap::new();
    for l in letters {
        let Some(s) = &l.source else { continue };
        let first = from
            .entry(s.topic.as_str())
            .or_default()
            .entry(s.partition)
            .or_insert(s.offset + 1);
        *first = (*first).min(s.offset + 1);
        wanted.insert(l.origin(dlq_topic), l.at);
    }
    let mut found = Replays::new();
    for (topic, parts) in from {
        let existing = admin::partitions_with_timeout(kafka, topic, Duration::from_secs(30))
            .with_context(|| format!("finding the source topic {topic:?} on the broker"))?;
        if let Some(p) = parts.keys().find(|p| !existing.contains(p)) {
            bail!("the source topic {topic:?} has no partition {p}; its dead letters cannot be replayed there");
        }
        read_to_end(kafka, topic, &parts, |r| {
            for (name, value) in &r.headers {
                if name != dlq_headers::REPLAY_OF {
                    continue;
                }
                let Some(v) = value.as_deref().and_then(|v| std::str::from_utf8(v).ok()) else {
                    continue;
                };
                if let Some(at) = wanted.get(v) {
                    found.entry(*at).or_insert_with(|| Source {
                        topic: r.topic.clone(),
                        partition: r.partition,
                        offset: r.offset,
                    });
                }
            }
            Ok(())
        })
        .with_context(|| format!("looking for replays on {topic:?}"))?;
    }
    Ok(found)
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
