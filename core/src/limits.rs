//! The size limits of one record, and the checks that hold a document to them before anything is
//! written.
//!
//! Every limit here exists because a sink or the model cannot take more (Milvus' VarChar, JSON
//! and array limits, tantivy's longest term), or because one record should not hold up the
//! pipeline (text size, chunks per document). The pipeline checks the configured values against
//! what its sinks take at start-up (`pipeline/src/limits.rs`), so a record that passes
//! [`check_document`] and [`check_chunk_count`] is never refused by a sink for its size.
//!
//! A record over a limit is rejected with a [`LimitError`]; its [`LimitError::class`] is the
//! dead-letter class.

use serde::{Deserialize, Serialize};

use crate::document::Document;

/// Size limits of a record, in bytes of UTF-8 unless said otherwise (`[limits]` in the pipeline's
/// configuration).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecordLimits {
    /// Whole record value (default 8 MiB). Checked before the value is parsed.
    pub max_value_bytes: usize,
    /// Document id, from the key or the value (default 1 KiB).
    pub max_id_bytes: usize,
    /// `title` (default 4 KiB).
    pub max_title_bytes: usize,
    /// `text` (default 8 MiB).
    pub max_text_bytes: usize,
    /// `source` (default 65,530: tantivy indexes it as one term, and no term may be longer;
    /// Milvus' VarChar takes 65,535).
    pub max_source_bytes: usize,
    /// `metadata` as canonical JSON, the form both indexes store (default 65,530: Milvus' JSON
    /// field takes 65,536 and every metadata value becomes a tantivy term, which must stay under
    /// 65,530 bytes).
    pub max_metadata_bytes: usize,
    /// Entries of `acl` (default 4,096: the capacity of Milvus' `acl` array).
    pub max_acl_entries: usize,
    /// One ACL principal (default 1,024: the element length of Milvus' `acl` array).
    pub max_principal_bytes: usize,
    /// Chunks (leaves and parents) one document may yield (default 10,000: a document that
    /// large holds up its epoch for minutes of embedding).
    pub max_chunks_per_document: usize,
    /// Every upsert must state its ACL (default off): principals, or `"acl": "public"`. One
    /// that states none (`acl` absent, null or `[]`) is refused as `missing_acl` instead of
    /// being indexed as public.
    pub require_acl: bool,
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits {
            max_value_bytes: 8 << 20,
            max_id_bytes: 1024,
            max_title_bytes: 4096,
            max_text_bytes: 8 << 20,
            max_source_bytes: 65_530,
            max_metadata_bytes: 65_530,
            max_acl_entries: 4096,
            max_principal_bytes: 1024,
            max_chunks_per_document: 10_000,
            require_acl: false,
        }
    }
}

/// A record over one of its [`RecordLimits`], or with a field no index can hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("{field} is {size} bytes, over the limit of {limit} bytes")]
    FieldTooLarge {
        field: String,
        size: usize,
        limit: usize,
    },
    #[error("acl has {count} entries, over the limit of {limit}")]
    TooManyAclEntries { count: usize, limit: usize },
    /// Chunking stops at the first chunk over the limit: how many more there would be is not
    /// known.
    #[error("the document yields more than {limit} chunks, the limit per document")]
    TooManyChunks { limit: usize },
    #[error("metadata key \"{key}\" contains a NUL character, which the text index cannot index")]
    InvalidMetadataKey { key: String },
}

impl LimitError {
    /// Every value [`LimitError::class`] can return.
    pub const CLASSES: &'static [&'static str] = &[
        "field_too_large",
        "too_many_acl_entries",
        "too_many_chunks",
        "invalid_field",
    ];

    /// A short stable name for the kind of error, for DLQ headers and metrics.
    pub fn class(&self) -> &'static str {
        match self {
            LimitError::FieldTooLarge { .. } => "field_too_large",
            LimitError::TooManyAclEntries { .. } => "too_many_acl_entries",
            LimitError::TooManyChunks { .. } => "too_many_chunks",
            LimitError::InvalidMetadataKey { .. } => "invalid_field",
        }
    }
}

/// `Err` if `size` is over `limit`.
pub fn check_size(field: &str, size: usize, limit: usize) -> Result<(), LimitError> {
    if size > limit {
        Err(LimitError::FieldTooLarge {
            field: field.to_owned(),
            size,
            limit,
        })
    } else {
        Ok(())
    }
}

/// Holds a decoded document to `limits` (all but the value size and the id, which decoding
/// checks, and the chunk count, see [`check_chunk_count`]).
pub fn check_document(doc: &Document, limits: &RecordLimits) -> Result<(), LimitError> {
    check_size("field `id`", doc.id.len(), limits.max_id_bytes)?;
    check_size("field `title`", doc.title.len(), limits.max_title_bytes)?;
    check_size("field `text`", doc.text.len(), limits.max_text_bytes)?;
    check_size("field `source`", doc.source.len(), limits.max_source_bytes)?;
    if doc.acl.len() > limits.max_acl_entries {
        return Err(LimitError::TooManyAclEntries {
            count: doc.acl.len(),
            limit: limits.max_acl_entries,
        });
    }
    for (i, principal) in doc.acl.iter().enumerate() {
        check_size(
            &format!("acl[{i}]"),
            principal.len(),
            limits.max_principal_bytes,
        )?;
    }
    if let Some(key) = doc.metadata.keys().find(|k| k.contains('\0')) {
        return Err(LimitError::InvalidMetadataKey {
            key: key.replace('\0', "\\u0000"),
        });
    }
    check_size(
        "field `metadata` (as canonical JSON)",
        metadata_json_len(doc),
        limits.max_metadata_bytes,
    )
}

/// `Err` if a document yields more than `limits.max_chunks_per_document` chunks.
pub fn check_chunk_count(count: usize, limits: &RecordLimits) -> Result<(), LimitError> {
    if count > limits.max_chunks_per_document {
        Err(LimitError::TooManyChunks {
            limit: limits.max_chunks_per_document,
        })
    } else {
        Ok(())
    }
}

/// Length of the metadata object as canonical JSON (what every chunk stores as
/// `metadata_json`), without building it: `{`, `"key":value` pairs joined by `,`, `}`.
fn metadata_json_len(doc: &Document) -> usize {
    let pairs: usize = doc
        .metadata
        .iter()
        .map(|(k, v)| json_string_len(k) + 1 + v.len())
        .sum();
    2 + pairs + doc.metadata.len().saturating_sub(1)
}

/// Length of `s` as a JSON string literal, quotes included (serde_json's escaping).
fn json_string_len(s: &str) -> usize {
    2 + s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{08}' | '\u{0C}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::json::canonical_json;

    fn doc() -> Document {
        Document {
            id: "d".into(),
            title: "t".into(),
            text: "x".into(),
            content_type: Default::default(),
            source: "s".into(),
            metadata: BTreeMap::new(),
            acl: vec![],
        }
    }

    fn small() -> RecordLimits {
        RecordLimits {
            max_value_bytes: 1000,
            max_id_bytes: 3,
            max_title_bytes: 4,
            max_text_bytes: 5,
            max_source_bytes: 6,
            max_metadata_bytes: 20,
            max_acl_entries: 2,
            max_principal_bytes: 7,
            max_chunks_per_document: 3,
            require_acl: false,
        }
    }

    /// Each limit: at it is fine, one byte (or entry) over is its class, naming the field.
    #[test]
    fn every_limit_at_and_over() {
        let l = small();
        type Set = fn(&mut Document, usize);
        let cases: [(&str, usize, Set, &str); 5] = [
            (
                "`id`",
                3,
                |d, n| d.id = "é".repeat(n / 2) + &"i".repeat(n % 2),
                "field_too_large",
            ),
            (
                "`title`",
                4,
                |d, n| d.title = "t".repeat(n),
                "field_too_large",
            ),
            (
                "`text`",
                5,
                |d, n| d.text = "x".repeat(n),
                "field_too_large",
            ),
            (
                "`source`",
                6,
                |d, n| d.source = "s".repeat(n),
                "field_too_large",
            ),
            (
                "acl[1]",
                7,
                |d, n| d.acl = vec!["a".into(), "p".repeat(n)],
                "field_too_large",
            ),
        ];
        for (field, limit, set, class) in cases {
            let mut d = doc();
            set(&mut d, limit);
            assert_eq!(check_document(&d, &l), Ok(()), "{field} at its limit");
            set(&mut d, limit + 1);
            let e = check_document(&d, &l).unwrap_err();
            assert_eq!(e.class(), class, "{field}");
            let msg = e.to_string();
            assert!(msg.contains(field), "{msg}");
            assert!(msg.contains(&format!("{} bytes", limit + 1)), "{msg}");
        }
        let mut d = doc();
        d.acl = vec!["a".into(), "b".into()];
        assert_eq!(check_document(&d, &l), Ok(()));
        d.acl.push("c".into());
        let e = check_document(&d, &l).unwrap_err();
        assert_eq!(e.class(), "too_many_acl_entries");
        assert_eq!(e.to_string(), "acl has 3 entries, over the limit of 2");

        assert_eq!(check_chunk_count(3, &l), Ok(()));
        let e = check_chunk_count(4, &l).unwrap_err();
        assert_eq!(e.class(), "too_many_chunks");
        assert!(e.to_string().contains("more than 3 chunks"), "{e}");
    }

    /// The metadata limit is on the canonical JSON every chunk stores, escapes included.
    #[test]
    fn metadata_size_is_that_of_its_canonical_json() {
        let cases: Vec<BTreeMap<String, serde_json::Value>> = vec![
            BTreeMap::new(),
            BTreeMap::from([("a".into(), serde_json::json!(1))]),
            BTreeMap::from([
                ("k\"\\\n\u{1}é".into(), serde_json::json!("v\t\u{7f}")),
                ("z".into(), serde_json::json!({"b": [1, null], "a": "x"})),
            ]),
        ];
        for m in cases {
            let mut d = doc();
            d.metadata = m
                .iter()
                .map(|(k, v)| (k.clone(), canonical_json(v)))
                .collect();
            let object: serde_json::Map<String, serde_json::Value> = m.into_iter().collect();
            let expected = canonical_json(&serde_json::Value::Object(object)).len();
            assert_eq!(metadata_json_len(&d), expected, "{:?}", d.metadata);
            let at = RecordLimits {
                max_metadata_bytes: expected,
                ..small()
            };
            assert_eq!(check_document(&d, &at), Ok(()));
            let under = RecordLimits {
                max_metadata_bytes: expected - 1,
                ..small()
            };
            assert_eq!(
                check_document(&d, &under).unwrap_err().class(),
                "field_too_large"
            );
        }
    }

    #[test]
    fn a_metadata_key_with_nul_is_an_invalid_field() {
        let mut d = doc();
        d.metadata.insert("a\0b".into(), "1".into());
        let e = check_document(&d, &RecordLimits::default()).unwrap_err();
        assert_eq!(e.class(), "invalid_field");
        assert!(e.to_string().contains("a\\u0000b"), "{e}");
    }

    #[test]
    fn defaults_stay_within_what_the_sinks_take() {
        let l = RecordLimits::default();
        // tantivy's longest term (u16::MAX - 5) and Milvus' VarChar / JSON / array limits
        assert!(l.max_id_bytes <= 65_530);
        assert!(l.max_source_bytes <= 65_530);
        assert!(l.max_metadata_bytes <= 65_530);
        assert!(l.max_acl_entries <= 4096);
        assert!(l.max_principal_bytes <= 1024);
        assert_eq!(LimitError::CLASSES.len(), 4);
    }
}
