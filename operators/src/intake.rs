//! One Kafka record to what the dataflow receives: a document's new chunks, its deletion, or a
//! rejection for the dead-letter topic.
//!
//! A record is decoded ([`crate::envelope`], which holds it to its [`RecordLimits`]), prepared
//! ([`crate::prepare`]: clean, hash, chunk) and its chunk count checked. Whatever fails is a
//! [`Rejection`] with a stable class and the [`Stage`] that refused it.
//!
//! **An identical re-send costs nothing.** [`Versions`] remembers, per document, the hash of the
//! latest version prepared (taken over the decoded document, before cleaning and chunking); a
//! record that decodes to that same version again is [`Intake::Unchanged`] and is neither
//! cleaned nor chunked. This relies on what the contract already asks: a document's records
//! share one partition (the key is the document id), so one reader sees all of its versions in
//! order.
//!
//! **A rejected record still counts as the document's latest change.** When the record names a
//! document (its key, or else the `id` of its value), that document is deleted from both indexes:
//! a version that cannot be indexed never leaves an older one serving. The next good record for
//! the id indexes it again. The same rule holds for a version refused later, while it is embedded
//! or written (see the pipeline's sink).

use serde::{Deserialize, Serialize};

use std::collections::HashMap;

use crate::cdc::RecordFormat;
use crate::chunk::{Chunk, ChunkerConfig, TokenCounter};
use crate::document::Change;
use crate::hash::doc_hash;
use crate::limits::RecordLimits;
use crate::prepare::prepare_within;

/// Where on its way a record was refused (the `stage` of the dead-letter metric and header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Stage {
    /// Bytes to a document: encoding, JSON, fields, limits.
    Decode,
    /// Cleaning and chunking.
    Prepare,
    /// The embedding model could not embed one of its texts.
    Embed,
    /// An index refused to store it.
    Sink,
}

impl Stage {
    pub const ALL: [Stage; 4] = [Stage::Decode, Stage::Prepare, Stage::Embed, Stage::Sink];

    pub fn as_str(&self) -> &'static str {
        match self {
            Stage::Decode => "decode",
            Stage::Prepare => "prepare",
            Stage::Embed => "embed",
            Stage::Sink => "sink",
        }
    }
}

/// Why a record goes to the dead-letter topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// Stable error class (the `freshet.error.class` header).
    pub class: &'static str,
    pub stage: Stage,
    pub message: String,
    /// The document the record names, which must leave both indexes; `None` when the record
    /// names none that could have been indexed.
    pub doc_id: Option<String>,
}

/// What one record becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Intake {
    /// The document's chunks (possibly none: an empty document holds nothing).
    Upsert {
        id: String,
        chunks: Vec<Chunk>,
    },
    Delete {
        id: String,
    },
    /// The document's latest version again ([`Versions`]): nothing to do.
    Unchanged {
        id: String,
    },
    /// A record that changes no document (a CDC message event, a tombstone that names none).
    Skipped,
    Rejected(Rejection),
}

/// The version of each document last prepared by one reader: a 128-bit prefix of the hash of
/// the decoded document (before cleaning), by document id. About 60 bytes plus the id per
/// document; empty after a restart (a re-send is then prepared once, and the dataflow finds
/// nothing to write).
#[derive(Clone, Debug, Default)]
pub struct Versions {
    latest: HashMap<String, u128>,
}

impl Versions {
    /// Documents remembered.
    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    /// Forgets document `id` (its record was refused without being prepared): its next version
    /// is prepared again.
    pub fn forget(&mut self, id: &str) {
        self.latest.remove(id);
    }
}

/// The version hash [`Versions`] keeps: the first 128 bits of [`doc_hash`].
fn version_of(doc: &crate::document::Document) -> u128 {
    let hex = doc_hash(doc);
    u128::from_str_radix(&hex[..32], 16).unwrap_or_default()
}

impl Intake {
    /// The dataflow's update for this record: the document id and its new chunks (`None`
    /// deletes). A rejection that names a document deletes it; one that names none is nothing.
    pub fn update(self) -> Option<(String, Option<Vec<Chunk>>)> {
        match self {
            Intake::Upsert { id, chunks } => Some((id, Some(chunks))),
            Intake::Delete { id } => Some((id, None)),
            Intake::Unchanged { .. } | Intake::Skipped => None,
            Intake::Rejected(r) => r.doc_id.map(|id| (id, None)),
        }
    }
}

/// Decodes, checks and prepares one record of freshet's envelope (every record is prepared:
/// no [`Versions`]).
pub fn intake(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    limits: &RecordLimits,
    chunking: &ChunkerConfig,
    tokens: &dyn TokenCounter,
) -> Intake {
    intake_as(&RecordFormat::Freshet, key, value, limits, chunking, tokens)
}

/// [`intake`] for a record of `format`.
pub fn intake_as(
    format: &RecordFormat,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    limits: &RecordLimits,
    chunking: &ChunkerConfig,
    tokens: &dyn TokenCounter,
) -> Intake {
    intake_versioned(
        format,
        key,
        value,
        limits,
        chunking,
        tokens,
        &mut Versions::default(),
    )
}

/// [`intake_as`], recognising a document's latest version by its hash before cleaning and
/// chunking it, and keeping `versions` up to date.
pub fn intake_versioned(
    format: &RecordFormat,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    limits: &RecordLimits,
    chunking: &ChunkerConfig,
    tokens: &dyn TokenCounter,
    versions: &mut Versions,
) -> Intake {
    let rejected = |class: &'static str, stage: Stage, message: String| {
        Intake::Rejected(Rejection {
            class,
            stage,
            message,
            doc_id: format.named_document(key, value, limits),
        })
    };
    let out = 'out: {
        let doc = match format.decode(key, value, limits) {
            Ok(None) => break 'out Intake::Skipped,
            Ok(Some(Change::Delete { id })) => break 'out Intake::Delete { id },
            Ok(Some(Change::Upsert(doc))) => doc,
            Err(e) => break 'out rejected(e.class(), Stage::Decode, e.to_string()),
        };
        let id = doc.id.clone();
        let version = version_of(&doc);
        if versions.latest.get(&id) == Some(&version) {
            break 'out Intake::Unchanged { id };
        }
        let chunks = match prepare_within(doc, chunking, tokens, limits) {
            Ok(p) => p.chunks,
            Err(e) => break 'out rejected(e.class(), Stage::Prepare, e.to_string()),
        };
        versions.latest.insert(id.clone(), version);
        Intake::Upsert { id, chunks }
    };
    // A deleted or refused document is forgotten: its next version is prepared again.
    let gone = match &out {
        Intake::Delete { id } => Some(id),
        Intake::Rejected(r) => r.doc_id.as_ref(),
        Intake::Upsert { .. } | Intake::Unchanged { .. } | Intake::Skipped => None,
    };
    if let Some(id) = gone {
        versions.latest.remove(id);
    }
    out
}

/// The document a record names, even when the record cannot be decoded: its key when that is
/// UTF-8 and within the id limit, else the `id` of its value (a string or an integer) when the
/// value is a JSON object and the id is within the limit. An id over the limit names no
/// document: no such id can have been indexed.
pub fn named_document(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    limits: &RecordLimits,
) -> Option<String> {
    let valid = |id: &str| !id.is_empty() && id.len() <= limits.max_id_bytes;
    if let Some(k) = key.filter(|k| !k.is_empty()) {
        return std::str::from_utf8(k)
            .ok()
            .filter(|k| valid(k))
            .map(str::to_owned);
    }
    let value = value.filter(|v| v.len() <= limits.max_value_bytes)?;
    let text = std::str::from_utf8(value).ok()?;
    let object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text.strip_prefix('\u{feff}').unwrap_or(text)).ok()?;
    match object.get("id")? {
        serde_json::Value::String(s) if valid(s) => Some(s.clone()),
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => {
            Some(n.to_string()).filter(|s| valid(s))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::tokens::tests::test_counter;

    fn run(key: Option<&str>, value: Option<&str>, limits: &RecordLimits) -> Intake {
        intake(
            key.map(str::as_bytes),
            value.map(str::as_bytes),
            limits,
            &ChunkerConfig::default(),
            &test_counter(),
        )
    }

    fn rejection(i: Intake) -> Rejection {
        match i {
            Intake::Rejected(r) => r,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn upserts_deletes_and_tombstones() {
        let l = RecordLimits::default();
        match run(Some("a"), Some(r#"{"text":"the cat sat"}"#), &l) {
            Intake::Upsert { id, chunks } => {
                assert_eq!(id, "a");
                assert_eq!(chunks.len(), 1);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(run(Some("a"), None, &l), Intake::Delete { id: "a".into() });
        assert_eq!(
            run(None, Some(r#"{"op":"delete","id":"b"}"#), &l).update(),
            Some(("b".into(), None))
        );
    }

    /// A rejected record deletes the document it names, by key or by value id.
    #[test]
    fn a_rejected_record_deletes_the_document_it_names() {
        let l = RecordLimits {
            max_source_bytes: 3,
            ..RecordLimits::default()
        };
        let r = rejection(run(Some("k"), Some(r#"{"source":"long"}"#), &l));
        assert_eq!(
            (r.class, r.stage, r.doc_id.as_deref()),
            ("field_too_large", Stage::Decode, Some("k"))
        );
        let r = rejection(run(None, Some(r#"{"id":7,"acl":"x"}"#), &l));
        assert_eq!((r.class, r.doc_id.as_deref()), ("invalid_field", Some("7")));
        let r = rejection(run(Some("k"), Some("{not json"), &l));
        assert_eq!(r.class, "malformed_json");
        assert_eq!(Intake::Rejected(r).update(), Some(("k".to_string(), None)));
        // the key wins over a different value id
        let r = rejection(run(Some("k"), Some(r#"{"id":"v"}"#), &l));
        assert_eq!((r.class, r.doc_id.as_deref()), ("id_mismatch", Some("k")));
    }

    #[test]
    fn a_record_naming_no_indexable_document_deletes_nothing() {
        let l = RecordLimits {
            max_id_bytes: 3,
            ..RecordLimits::default()
        };
        for (key, value) in [
            (None, Some("[1]")),
            (None, Some(r#"{"text":"x"}"#)),
            (Some("toolong"), Some(r#"{"text":"x"}"#)),
            (None, Some(r#"{"id":"toolong"}"#)),
            (None, Some(r#"{"id":1.5}"#)),
        ] {
            let r = rejection(run(key, value, &l));
            assert_eq!(r.doc_id, None, "{key:?} {value:?}");
            assert_eq!(Intake::Rejected(r).update(), None);
        }
        let raw = intake(
            Some(b"\xff"),
            Some(b"{}"),
            &l,
            &ChunkerConfig::default(),
            &test_counter(),
        );
        assert_eq!(rejection(raw).doc_id, None);
    }

    #[test]
    fn too_many_chunks_is_a_prepare_rejection() {
        let l = RecordLimits {
            max_chunks_per_document: 1,
            ..RecordLimits::default()
        };
        let chunking = ChunkerConfig {
            max_tokens: 8,
            overlap_tokens: 0,
            ..ChunkerConfig::default()
        };
        let text = "one two three four five six seven eight nine ten eleven twelve";
        let value = serde_json::json!({ "text": text }).to_string();
        let i = intake(
            Some(b"d"),
            Some(value.as_bytes()),
            &l,
            &chunking,
            &test_counter(),
        );
        let r = rejection(i);
        assert_eq!(
            (r.class, r.stage, r.doc_id.as_deref()),
            ("too_many_chunks", Stage::Prepare, Some("d"))
        );
        let fits = RecordLimits {
            max_chunks_per_document: 100,
            ..l
        };
        assert!(matches!(
            intake(Some(b"d"), Some(value.as_bytes()), &fits, &chunking, &test_counter()),
            Intake::Upsert { chunks, .. } if chunks.len() > 1
        ));
    }

    /// A Debezium record goes the same way: a message event is skipped, a rejection deletes
    /// the document the record names (here by its key).
    #[test]
    fn debezium_records_share_everything_after_decoding() {
        let format = RecordFormat::Debezium(crate::cdc::DebeziumMapping {
            id_fields: vec!["id".into()],
            id_prefix: "t:".into(),
            text_fields: vec!["body".into()],
            ..Default::default()
        });
        let l = RecordLimits::default();
        let run = |key: &str, value: Option<&str>| {
            intake_as(
                &format,
                Some(key.as_bytes()),
                value.map(str::as_bytes),
                &l,
                &ChunkerConfig::default(),
                &test_counter(),
            )
        };
        let up = run(
            r#"{"id":1}"#,
            Some(r#"{"op":"c","after":{"id":1,"body":"the cat"}}"#),
        );
        assert!(
            matches!(up, Intake::Upsert { ref id, .. } if id == "t:1"),
            "{up:?}"
        );
        assert_eq!(
            run(r#"{"id":1}"#, None),
            Intake::Delete { id: "t:1".into() }
        );
        assert_eq!(run("{}", Some(r#"{"op":"m"}"#)), Intake::Skipped);
        assert_eq!(Intake::Skipped.update(), None);
        let r = rejection(run(r#"{"id":1}"#, Some(r#"{"op":"c","after":{"id":1}}"#)));
        assert_eq!(
            (r.class, r.stage, r.doc_id.as_deref()),
            ("invalid_field", Stage::Decode, Some("t:1"))
        );
    }

    #[test]
    fn stage_names() {
        let names: Vec<&str> = Stage::ALL.iter().map(Stage::as_str).collect();
        assert_eq!(names, ["decode", "prepare", "embed", "sink"]);
    }

    /// A document's latest version again is recognised before it is prepared; any other
    /// version, a delete or a rejection in between makes the next record prepared again.
    #[test]
    fn an_identical_re_send_is_unchanged_before_preparing() {
        let limits = RecordLimits::default();
        let cfg = ChunkerConfig::default();
        let t = crate::chunk::CharCounter;
        let mut versions = Versions::default();
        let mut run = |key: &str, value: Option<&str>| {
            intake_versioned(
                &RecordFormat::Freshet,
                Some(key.as_bytes()),
                value.map(str::as_bytes),
                &limits,
                &cfg,
                &t,
                &mut versions,
            )
        };
        let v1 = r#"{"title":"T","text":"first version"}"#;
        let v2 = r#"{"title":"T","text":"second version"}"#;
        let bad = r#"{"title":"T","text":"x","acl":[""]}"#;
        assert!(matches!(run("a", Some(v1)), Intake::Upsert { .. }));
        assert_eq!(run("a", Some(v1)), Intake::Unchanged { id: "a".into() });
        // unknown fields are metadata: a different one is a different version
        let v1_tagged = r#"{"title":"T","text":"first version","tag":"x"}"#;
        assert!(matches!(run("a", Some(v1_tagged)), Intake::Upsert { .. }));
        assert!(matches!(run("a", Some(v1)), Intake::Upsert { .. }));
        assert!(
            matches!(run("b", Some(v1)), Intake::Upsert { .. }),
            "per document"
        );
        assert!(matches!(run("a", Some(v2)), Intake::Upsert { .. }));
        assert!(matches!(run("a", Some(v1)), Intake::Upsert { .. }));
        // a delete forgets the version
        assert!(matches!(run("a", None), Intake::Delete { .. }));
        assert!(matches!(run("a", Some(v1)), Intake::Upsert { .. }));
        // so does a rejection of the document
        assert!(matches!(run("a", Some(bad)), Intake::Rejected(_)));
        assert!(matches!(run("a", Some(v1)), Intake::Upsert { .. }));
        assert_eq!(run("a", Some(v1)), Intake::Unchanged { id: "a".into() });
        assert_eq!(Intake::Unchanged { id: "a".into() }.update(), None);
        assert_eq!(versions.len(), 2);
    }

    /// Found by fuzzing (`fuzz::decode`): a numeric id longer than `max_id_bytes` named a
    /// document that no record can have indexed.
    #[test]
    fn a_numeric_id_over_the_limit_names_no_document() {
        let limits = RecordLimits {
            max_id_bytes: 4,
            ..RecordLimits::default()
        };
        let named = |v: &str| named_document(None, Some(v.as_bytes()), &limits);
        assert_eq!(named(r#"{"id":1234}"#), Some("1234".into()));
        assert_eq!(named(r#"{"id":12345}"#), None);
        assert_eq!(named(r#"{"id":-1234}"#), None);
    }
}
