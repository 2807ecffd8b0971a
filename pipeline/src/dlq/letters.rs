//! The dead-letter topic read for people (`freshet dlq list|show`, and whatever else shows dead
//! letters): each dead letter as a [`Letter`] (the original record's key, value and headers, and
//! why it was refused), the [`Filter`] that picks them (class, key, time), the newest of a
//! match with the counts per class ([`Selection`]), and bytes shown safely ([`shown`]).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use freshet_kafka::{admin, dlq_headers, KafkaConfig, PartitionReader, Record};
use freshet_operators::envelope::DecodeError;
use freshet_operators::prepare::PrepareError;
use serde::Serialize;

use crate::quarantine::CRASH_LOOP;
use crate::sink::{EMBED_FAILED, MILVUS_REFUSED};

/// How long a read of a topic may go without receiving a record it still waits for.
const STALLED_READ: Duration = Duration::from_secs(60);

/// The classes of the files `freshet watch` refuses (`freshet-publishers`' watcher).
const WATCH_CLASSES: &[&str] = &["file_too_large", "unreadable", "not_utf8"];

/// Every class a dead letter can have, sorted.
pub fn known_classes() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = DecodeError::CLASSES
        .iter()
        .chain(PrepareError::CLASSES)
        .chain(WATCH_CLASSES)
        .chain(&[EMBED_FAILED, MILVUS_REFUSED, CRASH_LOOP])
        .copied()
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Where a dead letter is on the dead-letter topic; written `PARTITION:OFFSET`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct At {
    pub partition: i32,
    pub offset: i64,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.partition, self.offset)
    }
}

impl FromStr for At {
    type Err = anyhow::Error;

    /// `PARTITION:OFFSET`, or `OFFSET` alone for partition 0.
    fn from_str(s: &str) -> Result<At> {
        let bad = || {
            anyhow!("{s:?} is not a dead letter's place: write PARTITION:OFFSET (`0:17`) or OFFSET")
        };
        let (p, o) = s.split_once(':').unwrap_or(("0", s));
        let partition: i32 = p.trim().parse().map_err(|_| bad())?;
        let offset: i64 = o.trim().parse().map_err(|_| bad())?;
        if partition < 0 || offset < 0 {
            return Err(bad());
        }
        Ok(At { partition, offset })
    }
}

/// The record a dead letter was read from (its `freshet.source.*` headers).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Source {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// One dead letter: the original record and why it was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Letter {
    pub at: At,
    /// The dead letter's own timestamp, milliseconds since the Unix epoch.
    pub timestamp_ms: Option<i64>,
    /// When it was refused (`freshet.failed_at_ms`).
    pub failed_at_ms: Option<i64>,
    pub class: String,
    pub stage: String,
    pub message: String,
    /// `None` when it is not from a record of a topic (a file `freshet watch` refused) or has
    /// no source headers.
    pub source: Option<Source>,
    pub key: Option<Vec<u8>>,
    /// `None` for a null value, or when it was not kept ([`read`] without values).
    pub value: Option<Vec<u8>>,
    /// The value's size; `None` for a null value.
    pub value_bytes: Option<usize>,
    /// The original record's headers, in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Letter {
    /// The dead letter `r`, read from the dead-letter topic.
    pub fn from_record(r: Record) -> Letter {
        let text = |name: &str| {
            r.header(name)
                .flatten()
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        let number = |name: &str| text(name).and_then(|t| t.trim().parse::<i64>().ok());
        let source = match (
            text(dlq_headers::SOURCE_TOPIC),
            number(dlq_headers::SOURCE_PARTITION).and_then(|p| i32::try_from(p).ok()),
            number(dlq_headers::SOURCE_OFFSET),
        ) {
            (Some(topic), Some(partition), Some(offset)) if partition >= 0 && offset >= 0 => {
                Some(Source {
                    topic,
                    partition,
                    offset,
                })
            }
            _ => None,
        };
        let class = text(dlq_headers::ERROR_CLASS).unwrap_or_default();
        let stage = text(dlq_headers::ERROR_STAGE).unwrap_or_default();
        let message = text(dlq_headers::ERROR_MESSAGE).unwrap_or_default();
        let failed_at_ms = number(dlq_headers::FAILED_AT_MS);
        // The producer puts its headers first; the original record's follow.
        let failure = r
            .headers
            .iter()
            .take_while(|(k, _)| dlq_headers::FAILURE.contains(&k.as_str()))
            .count();
        Letter {
            at: At {
                partition: r.partition,
                offset: r.offset,
            },
            timestamp_ms: r.timestamp_ms,
            failed_at_ms,
            class,
            stage,
            message,
            source,
            key: r.key,
            value_bytes: r.value.as_ref().map(Vec::len),
            value: r.value,
            headers: r.headers.into_iter().skip(failure).collect(),
        }
    }

    /// When it was refused, or when it was written when that is not known.
    pub fn time_ms(&self) -> Option<i64> {
        self.failed_at_ms.or(self.timestamp_ms)
    }

    /// How a replayed record names this dead letter (its `freshet.replay.of` header).
    pub fn origin(&self, dlq_topic: &str) -> String {
        format!("{dlq_topic}/{}/{}", self.at.partition, self.at.offset)
    }

    /// What a list shows of it, with whether and where it was replayed (`None`: not known;
    /// `Some(None)`: not replayed).
    pub fn summary(&self, replayed: Option<Option<&Source>>) -> Summary {
        Summary {
            at: self.at.to_string(),
            time: self.time_ms().map(format_time),
            key: self.key.as_deref().map(|k| shown(k, usize::MAX)),
            class: self.class.clone(),
            stage: self.stage.clone(),
            message: self.message.clone(),
            source: self.source.clone(),
            value_bytes: self.value_bytes,
            replayed: replayed.map(|r| r.is_some()),
            replayed_as: replayed.flatten().cloned(),
        }
    }
}

/// A dead letter as a list shows it (one JSON line of `freshet dlq list --json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// `PARTITION:OFFSET` on the dead-letter topic.
    pub at: String,
    /// RFC 3339, UTC.
    pub time: Option<String>,
    /// The key, shown safely ([`shown`]); `None` for a null key.
    pub key: Option<String>,
    pub class: String,
    pub stage: String,
    pub message: String,
    pub source: Option<Source>,
    /// The value's size; `None` for a null value.
    pub value_bytes: Option<usize>,
    /// Whether it was replayed; `None` when its source topic could not be read.
    pub replayed: Option<bool>,
    /// Where its replay was written on the source topic.
    pub replayed_as: Option<Source>,
}

/// Which keys a filter takes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum KeyMatch {
    #[default]
    Any,
    Exact(Vec<u8>),
    Prefix(Vec<u8>),
}

/// Which dead letters a command takes: all of its conditions hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub class: Option<String>,
    pub key: KeyMatch,
    /// Refused at or after (milliseconds since the Unix epoch).
    pub since_ms: Option<i64>,
    /// Refused before.
    pub until_ms: Option<i64>,
    /// Only these places (none: any).
    pub places: Vec<At>,
}

impl Filter {
    /// `Err` for a class no dead letter can have, or an empty time window.
    pub fn check(&self) -> Result<()> {
        if let Some(c) = &self.class {
            let known = known_classes();
            if !known.contains(&c.as_str()) {
                bail!(
                    "unknown dead-letter class {c:?}; the classes are: {}",
                    known.join(", ")
                );
            }
        }
        if let (Some(s), Some(u)) = (self.since_ms, self.until_ms) {
            if s >= u {
                bail!(
                    "--since ({}) is not before --until ({}): nothing can match",
                    format_time(s),
                    format_time(u)
                );
            }
        }
        Ok(())
    }

    pub fn matches(&self, l: &Letter) -> bool {
        let class = self.class.as_ref().is_none_or(|c| *c == l.class);
        let key = match &self.key {
            KeyMatch::Any => true,
            KeyMatch::Exact(k) => l.key.as_deref() == Some(k.as_slice()),
            KeyMatch::Prefix(p) => l.key.as_deref().is_some_and(|k| k.starts_with(p)),
        };
        let time = l.time_ms();
        let since = self.since_ms.is_none_or(|s| time.is_some_and(|t| t >= s));
        let until = self.until_ms.is_none_or(|u| time.is_some_and(|t| t < u));
        let place = self.places.is_empty() || self.places.contains(&l.at);
        class && key && since && until && place
    }
}

/// The dead letters a filter matched: the newest `limit`, oldest first, and the counts per
/// class of all of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    pub letters: Vec<Letter>,
    /// How many matched (the letters kept are the newest of them).
    pub matched: usize,
    pub by_class: BTreeMap<String, usize>,
}

impl Selection {
    /// The newest `limit` of `matched` (by refusal time, then place).
    pub fn newest(mut matched: Vec<Letter>, limit: Option<usize>) -> Selection {
        let mut by_class = BTreeMap::new();
        for l in &matched {
            *by_class.entry(l.class.clone()).or_insert(0) += 1;
        }
        matched.sort_by_key(|l| (l.time_ms(), l.at));
        let count = matched.len();
        let keep = limit.unwrap_or(count).min(count);
        matched.drain(..count - keep);
        Selection {
            letters: matched,
            matched: count,
            by_class,
        }
    }
}

/// The dead letters on `kafka.dlq_topic` that `filter` takes, in the order read; their values
/// only `with_values` (a listing needs only their sizes, and a value may be megabytes).
pub fn read(kafka: &KafkaConfig, filter: &Filter, with_values: bool) -> Result<Vec<Letter>> {
    let topic = &kafka.dlq_topic;
    let partitions = admin::partitions_with_timeout(kafka, topic, Duration::from_secs(30))
        .with_context(|| format!("finding the dead-letter topic {topic:?} on the broker"))?;
    let from = partitions.iter().map(|p| (*p, -2)).collect();
    let mut out = Vec::new();
    read_to_end(kafka, topic, &from, |r| {
        let mut l = Letter::from_record(r);
        if filter.matches(&l) {
            if !with_values {
                l.value = None;
            }
            out.push(l);
        }
        Ok(())
    })?;
    Ok(out)
}

/// The dead letter at `at`; `None` when the topic does not hold it.
pub fn read_one(kafka: &KafkaConfig, at: At) -> Result<Option<Letter>> {
    let topic = &kafka.dlq_topic;
    let partitions = admin::partitions_with_timeout(kafka, topic, Duration::from_secs(30))
        .with_context(|| format!("finding the dead-letter topic {topic:?} on the broker"))?;
    if !partitions.contains(&at.partition) {
        bail!(
            "the dead-letter topic {topic:?} has no partition {}",
            at.partition
        );
    }
    let mut found = None;
    read_to_end(
        kafka,
        topic,
        &BTreeMap::from([(at.partition, at.offset)]),
        |r| {
            if r.offset == at.offset {
                found = Some(Letter::from_record(r));
            }
            Ok(())
        },
    )?;
    Ok(found)
}

/// Reads the partitions of `from` (partition → first offset; `-2` the earliest held) of
/// `topic` up to their high watermarks as they were when it started, handing each record to
/// `each`. An error when a partition does not move for [`STALLED_READ`].
pub fn read_to_end(
    kafka: &KafkaConfig,
    topic: &str,
    from: &BTreeMap<i32, i64>,
    mut each: impl FnMut(Record) -> Result<()>,
) -> Result<()> {
    let partitions: Vec<i32> = from.keys().copied().collect();
    let mut cfg = kafka.clone();
    cfg.group_id = format!("{}-dlq-reader", kafka.group_id);
    let mut reader = PartitionReader::new(&cfg, topic, &partitions, from)
        .with_context(|| format!("reading {topic}"))?;
    let mut todo: BTreeMap<i32, i64> = BTreeMap::new();
    for (p, (low, high)) in reader
        .watermarks()
        .with_context(|| format!("asking the broker how far {topic} reaches"))?
    {
        let first = from.get(&p).copied().filter(|o| *o >= 0).unwrap_or(low);
        if first.max(low) < high {
            todo.insert(p, high);
        }
    }
    let mut last_progress = Instant::now();
    while !todo.is_empty() {
        if last_progress.elapsed() > STALLED_READ {
            bail!(
                "reading {topic} received nothing for {STALLED_READ:?}; still to read up to \
                 (partition: offset) {todo:?}"
            );
        }
        let batch = reader
            .poll_batch(10_000, Duration::from_millis(500))
            .with_context(|| format!("reading {topic}"))?;
        if !batch.is_empty() {
            last_progress = Instant::now();
        }
        for r in batch {
            let Some(end) = todo.get(&r.partition).copied() else {
                continue;
            };
            if r.offset + 1 >= end {
                todo.remove(&r.partition);
            }
            if r.offset < end {
                each(r)?;
            }
        }
    }
    Ok(())
}

/// `bytes` as text that is safe on a terminal and in JSON: UTF-8 as it is (Chinese included)
/// with control characters escaped (`\n`, `\u{1b}`), other bytes as `\xNN`; cut after
/// `max_chars` characters with `…`.
pub fn shown(bytes: &[u8], max_chars: usize) -> String {
    let mut out = String::new();
    let mut chars = 0usize;
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if chars >= max_chars {
                out.push('…');
                return out;
            }
            if c.is_control() || c == '\\' {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
            chars += 1;
        }
        for b in chunk.invalid() {
            if chars >= max_chars {
                out.push('…');
                return out;
            }
            out.push_str(&format!("\\x{b:02x}"));
            chars += 1;
        }
    }
    out
}

/// `ms` (since the Unix epoch) as RFC 3339 in UTC, to the second.
pub fn format_time(ms: i64) -> String {
    match chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms) {
        Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        None => format!("{ms} ms"),
    }
}

/// A time a filter names: RFC 3339 with its offset (`2026-11-26T13:00:00+08:00`,
/// `2026-11-26T05:00:00Z`; without an offset, or a space for the `T`, it is UTC), a date
/// (`2026-11-26`, its midnight UTC), or how long before `now` (`90m`, `2h`, `7d`).
/// Milliseconds since the Unix epoch.
pub fn parse_time(s: &str, now: SystemTime) -> Result<i64> {
    use chrono::{DateTime, NaiveDate, NaiveDateTime};
    let s = s.trim();
    let bad = |why: &str| {
        anyhow!(
            "{s:?} is not a time: give RFC 3339 (2026-11-26T13:00:00+08:00, \
             2026-11-26T05:00:00Z), a date (2026-11-26) or how long ago (90m, 2h, 7d){why}"
        )
    };
    if s.starts_with(|c: char| c.is_ascii_digit()) && s.contains('-') {
        let t = s.replacen(' ', "T", 1);
        if let Ok(t) = DateTime::parse_from_rfc3339(&t) {
            return Ok(t.timestamp_millis());
        }
        for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"] {
            if let Ok(t) = NaiveDateTime::parse_from_str(&t, format) {
                return Ok(t.and_utc().timestamp_millis());
            }
        }
        if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
            return Ok(d
                .and_time(chrono::NaiveTime::MIN)
                .and_utc()
                .timestamp_millis());
        }
        return Err(bad(""));
    }
    let ago = humantime::parse_duration(s).map_err(|e| bad(&format!(" ({e})")))?;
    let t = now.checked_sub(ago).ok_or_else(|| bad(" (before 1970)"))?;
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| bad(" (before 1970)"))?
        .as_millis();
    i64::try_from(ms).map_err(|_| bad(" (too far ahead)"))
}
