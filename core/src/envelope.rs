//! Decoding of one Kafka record of the `documents` topic into a [`Change`].
//!
//! # Record format
//!
//! The key, when present and non-empty, is the document id (UTF-8). The value is either null (a
//! tombstone: deletes the key's document) or a JSON object:
//!
//! ```json
//! {"op":"upsert","id":"doc-1","title":"…","text":"…","content_type":"text/markdown",
//!  "source":"…","metadata":{"lang":"en"},"acl":["group:eng"]}
//! {"op":"delete","id":"doc-1"}
//! ```
//!
//! # Rules
//!
//! - `op` is `"upsert"` or `"delete"`; a missing or null `op` means **upsert** (a producer that
//!   only ever publishes documents need not say so). Anything else is `unknown_op`.
//! - The id comes from the key and/or the value's `id` (a string, or an integer, which is read
//!   as its decimal form). An empty key or an empty `id` string counts as absent. If both are
//!   present they must be equal (`id_mismatch`); if neither is, `missing_id`.
//! - `title`, `text` and `source` are strings (missing or null: empty). `content_type` is read by
//!   [`ContentType::parse`] (missing or null: `text/plain`; unknown: `invalid_field`).
//! - A binary document (DOCX, EPUB: [`ContentType::is_binary`]) carries its file as
//!   `content_base64` (standard alphabet, padding optional, whitespace ignored) instead of
//!   `text`; the decoded document holds that base64 (whitespace removed) as its `text`, parsed
//!   when prepared. `content_base64` with a text content type, with a non-empty `text`, or not
//!   valid base64, and a binary content type without it, are `invalid_field`.
//! - `metadata` is an object (missing or null: empty). Each value is stored as its canonical JSON
//!   text ([`canonical_json`]: `"en"` is stored as `"\"en\""`, `3` as `3`, objects with sorted
//!   keys and no whitespace).
//! - `acl` is an array of principals (non-empty strings), sorted and de-duplicated, or the string
//!   `"public"`: a document visible to everyone, said so. Missing, null or `[]`: no ACL stated,
//!   which is public unless `[limits] require_acl` is on (then `missing_acl`). An empty principal
//!   is rejected rather than dropped, because dropping the only entry would make a restricted
//!   document public; so are the reserved `public`, `everyone` and `*` ([`acl`]).
//! - Unknown top-level fields are kept in the metadata under their own name; if `metadata`
//!   already has that key, the explicit metadata wins and the field is stored under
//!   `_envelope.<name>` (then `_envelope.<name>.2`, `.3`, … should that be taken too). One that
//!   reads as an ACL (`ACL`, `acls`, `permissions`, …; [`acl::is_acl_like`]) is `invalid_field`
//!   instead, and so is such a key inside `metadata`: kept as metadata it would leave the
//!   document public.
//! - A delete ignores every field but `op` and `id`.
//! - An empty (zero-byte) value is `malformed_json`, not a tombstone: deleting is only ever done
//!   by a real null value. A leading UTF-8 byte-order mark is skipped.
//! - The value is held to `max_value_bytes` before it is parsed (`too_large`), the id to
//!   `max_id_bytes`, and a decoded upsert to the rest of its [`RecordLimits`]
//!   ([`check_document`]: `field_too_large`, `too_many_acl_entries`, `invalid_field`).

pub mod acl;

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::document::{Change, ContentType, Document};
use crate::json::canonical_json;
use crate::limits::{check_document, check_size, LimitError, RecordLimits};

pub use acl::acl_field;
pub use acl::{Acl, PUBLIC};

/// The bytes of a `content_base64` (standard alphabet, padding optional).
pub fn decode_base64(b64: &str) -> Result<Vec<u8>, String> {
    use base64::engine::{general_purpose::GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine as _;
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    LENIENT
        .decode(b64)
        .map_err(|e| format!("not valid base64: {e}"))
}

/// Which part of the record an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordPart {
    Key,
    Value,
}

impl fmt::Display for RecordPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecordPart::Key => "key",
            RecordPart::Value => "value",
        })
    }
}

/// Why a record could not be decoded. [`DecodeError::class`] is stable (a DLQ header).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record has neither a key nor a value")]
    EmptyRecord,
    #[error("record {part} is not valid UTF-8 (invalid byte at offset {offset})")]
    InvalidUtf8 { part: RecordPart, offset: usize },
    #[error("record value is not a JSON object: {detail}")]
    MalformedJson { detail: String },
    #[error("no document id: the key is absent or empty and the value has no non-empty `id`")]
    MissingId,
    #[error("unknown op {op:?} (expected {expected})")]
    UnknownOp { op: String, expected: &'static str },
    #[error("record value is {size} bytes, over the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    /// A field over its limit, or one no index can hold ([`crate::limits`]).
    #[error(transparent)]
    Limit(#[from] LimitError),
    #[error("invalid field `{field}`: {reason}")]
    InvalidField { field: String, reason: String },
    #[error("key id {key:?} differs from value id {value:?}")]
    IdMismatch { key: String, value: String },
    /// No ACL where one is required (`[limits] require_acl`, a Debezium source's `null_acl`).
    #[error("{reason}")]
    MissingAcl { reason: String },
}

impl DecodeError {
    /// Every value [`DecodeError::class`] can return.
    pub const CLASSES: &'static [&'static str] = &[
        "empty_record",
        "invalid_utf8",
        "malformed_json",
        "missing_id",
        "unknown_op",
        "too_large",
        "invalid_field",
        "id_mismatch",
        "field_too_large",
        "too_many_acl_entries",
        "missing_acl",
    ];

    /// A short stable name for the kind of error, for DLQ headers and metrics.
    pub fn class(&self) -> &'static str {
        match self {
            DecodeError::EmptyRecord => "empty_record",
            DecodeError::InvalidUtf8 { .. } => "invalid_utf8",
            DecodeError::MalformedJson { .. } => "malformed_json",
            DecodeError::MissingId => "missing_id",
            DecodeError::UnknownOp { .. } => "unknown_op",
            DecodeError::TooLarge { .. } => "too_large",
            DecodeError::Limit(e) => e.class(),
            DecodeError::InvalidField { .. } => "invalid_field",
            DecodeError::IdMismatch { .. } => "id_mismatch",
            DecodeError::MissingAcl { .. } => "missing_acl",
        }
    }
}

/// Decodes one record and holds it to `limits` (see [`check_document`]). See the module docs
/// for the rules.
pub fn decode(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    limits: &RecordLimits,
) -> Result<Change, DecodeError> {
    let key_id = match key.filter(|k| !k.is_empty()) {
        None => None,
        Some(k) => {
            check_size("key", k.len(), limits.max_id_bytes)?;
            Some(utf8(k, RecordPart::Key)?.to_owned())
        }
    };
    let Some(value) = value else {
        return match key_id {
            Some(id) => Ok(Change::Delete { id }),
            None => Err(DecodeError::EmptyRecord),
        };
    };
    match parse_value(value, limits)? {
        Value::Object(obj) => decode_object(obj, key_id, limits),
        other => Err(DecodeError::MalformedJson {
            detail: format!("expected an object, found {}", json_type(&other)),
        }),
    }
}

/// A record value as JSON: held to `max_value_bytes` (`too_large`), UTF-8 (a leading
/// byte-order mark skipped), not empty, well-formed (`malformed_json`). Any JSON value; the
/// caller says which it takes.
pub fn parse_value(value: &[u8], limits: &RecordLimits) -> Result<Value, DecodeError> {
    if value.len() > limits.max_value_bytes {
        return Err(DecodeError::TooLarge {
            size: value.len(),
            limit: limits.max_value_bytes,
        });
    }
    let s = utf8(value, RecordPart::Value)?;
    let s = s.strip_prefix('\u{feff}').unwrap_or(s);
    if s.trim().is_empty() {
        return Err(DecodeError::MalformedJson {
            detail: format!(
                "value is empty ({} bytes); a tombstone must be a null value",
                value.len()
            ),
        });
    }
    serde_json::from_str(s).map_err(|e| DecodeError::MalformedJson {
        detail: e.to_string(),
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Upsert,
    Delete,
}

fn decode_object(
    mut obj: serde_json::Map<String, Value>,
    key_id: Option<String>,
    limits: &RecordLimits,
) -> Result<Change, DecodeError> {
    let op = match obj.remove("op") {
        None | Some(Value::Null) => Op::Upsert,
        Some(Value::String(s)) => match s.as_str() {
            "upsert" => Op::Upsert,
            "delete" => Op::Delete,
            _ => {
                return Err(DecodeError::UnknownOp {
                    op: truncate(&s, 64),
                    expected: "\"upsert\" or \"delete\"",
                })
            }
        },
        Some(other) => return Err(wrong_type("op", "a string", &other)),
    };
    let value_id = match obj.remove("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        Some(other) => return Err(wrong_type("id", "a string or an integer", &other)),
    }
    .filter(|s| !s.is_empty());
    if let Some(v) = &value_id {
        check_size("field `id`", v.len(), limits.max_id_bytes)?;
    }
    let id = match (key_id, value_id) {
        (Some(k), Some(v)) if k != v => {
            return Err(DecodeError::IdMismatch { key: k, value: v });
        }
        (Some(k), _) => k,
        (None, Some(v)) => v,
        (None, None) => return Err(DecodeError::MissingId),
    };
    if op == Op::Delete {
        return Ok(Change::Delete { id });
    }

    let title = string_field(&mut obj, "title")?;
    let text = string_field(&mut obj, "text")?;
    let source = string_field(&mut obj, "source")?;
    let content_type = match obj.remove("content_type") {
        None | Some(Value::Null) => ContentType::default(),
        Some(Value::String(s)) => {
            ContentType::parse(&s).ok_or_else(|| DecodeError::InvalidField {
                field: "content_type".into(),
                reason: format!(
                    "unsupported content type {:?} (expected one of {})",
                    truncate(&s, 64),
                    ContentType::ALL.map(|c| c.as_str()).join(", ")
                ),
            })?
        }
        Some(other) => return Err(wrong_type("content_type", "a string", &other)),
    };
    let text = binary_content(&mut obj, content_type, text)?;
    let mut metadata = BTreeMap::new();
    match obj.remove("metadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                metadata.insert(k, canonical_json(&v));
            }
        }
        Some(other) => return Err(wrong_type("metadata", "an object", &other)),
    }
    let acl = acl_field(obj.remove("acl"))?;
    acl::check_near_misses(obj.keys(), metadata.keys())?;
    let acl = acl.resolve(limits)?;

    keep_unknown_fields(obj, &mut metadata);
    let doc = Document {
        id,
        title,
        text,
        content_type,
        source,
        metadata,
        acl,
    };
    check_document(&doc, limits)?;
    Ok(Change::Upsert(doc))
}

/// The document's `text`: the text as given, or for a binary content type its
/// `content_base64`, checked (see the module docs).
fn binary_content(
    obj: &mut serde_json::Map<String, Value>,
    content_type: ContentType,
    text: String,
) -> Result<String, DecodeError> {
    let invalid = |reason: String| DecodeError::InvalidField {
        field: "content_base64".into(),
        reason,
    };
    let content = match obj.remove("content_base64") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => return Err(wrong_type("content_base64", "a string", &other)),
    };
    let ct = content_type.as_str();
    match (content, content_type.is_binary()) {
        (None, false) => Ok(text),
        (Some(_), false) => Err(invalid(format!(
            "content_base64 carries a binary document, but content_type is {ct}"
        ))),
        (None, true) => Err(invalid(format!(
            "a {ct} document carries its file as content_base64"
        ))),
        (Some(_), true) if !text.is_empty() => Err(invalid(
            "give either text or content_base64, not both".into(),
        )),
        (Some(b64), true) => {
            let b64: String = b64.chars().filter(|c| !c.is_ascii_whitespace()).collect();
            decode_base64(&b64).map_err(invalid)?;
            Ok(b64)
        }
    }
}

pub fn utf8(bytes: &[u8], part: RecordPart) -> Result<&str, DecodeError> {
    std::str::from_utf8(bytes).map_err(|e| DecodeError::InvalidUtf8 {
        part,
        offset: e.valid_up_to(),
    })
}

fn string_field(
    obj: &mut serde_json::Map<String, Value>,
    field: &str,
) -> Result<String, DecodeError> {
    match obj.remove(field) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(wrong_type(field, "a string", &other)),
    }
}

pub fn wrong_type(field: &str, expected: &str, found: &Value) -> DecodeError {
    DecodeError::InvalidField {
        field: field.to_owned(),
        reason: format!("expected {expected}, found {}", json_type(found)),
    }
}

pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub fn truncate(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// Keeps the fields the contract does not know in `metadata` (see the module docs).
fn keep_unknown_fields(
    obj: serde_json::Map<String, Value>,
    metadata: &mut BTreeMap<String, String>,
) {
    // Own name if free, else `_envelope.<name>` (+ a counter if needed).
    let mut unknown: Vec<(String, Value)> = obj.into_iter().collect();
    unknown.sort_by(|a, b| a.0.cmp(&b.0));
    let mut displaced = Vec::new();
    for (k, v) in unknown {
        match metadata.entry(k) {
            std::collections::btree_map::Entry::Occupied(e) => displaced.push((e.key().clone(), v)),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(canonical_json(&v));
            }
        }
    }
    for (k, v) in displaced {
        let base = format!("_envelope.{k}");
        let mut name = base.clone();
        let mut n = 2u64;
        while metadata.contains_key(&name) {
            name = format!("{base}.{n}");
            n += 1;
        }
        metadata.insert(name, canonical_json(&v));
    }
}

/// The record value of a change in the contract's form, what [`decode`] reads: every field of
/// an upsert (metadata values as the JSON they hold; an empty ACL as `[]`, no ACL stated), `op`
/// and `id` of a delete. For a change that [`decode`] produced (ACL sorted and unique, metadata
/// values canonical JSON), `decode(Some(id), Some(&encode(&change)), limits)` gives the change
/// back (with `require_acl` off; [`encode_stating`] states an empty ACL public).
pub fn encode(change: &Change) -> Vec<u8> {
    encode_stating(change, false)
}

/// [`encode`], but an upsert with an empty ACL says `"acl": "public"` when `public` is set: a
/// producer that means its documents to be public states it, which `[limits] require_acl`
/// accepts.
pub fn encode_stating(change: &Change, public: bool) -> Vec<u8> {
    let value = match change {
        Change::Delete { id } => serde_json::json!({"op": "delete", "id": id}),
        Change::Upsert(d) => {
            let metadata: serde_json::Map<String, Value> = d
                .metadata
                .iter()
                .map(|(k, v)| {
                    let v = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.clone()));
                    (k.clone(), v)
                })
                .collect();
            let body = if d.content_type.is_binary() {
                "content_base64"
            } else {
                "text"
            };
            serde_json::json!({
                "op": "upsert",
                "id": d.id,
                "title": d.title,
                (body): d.text,
                "content_type": d.content_type.as_str(),
                "source": d.source,
                "metadata": metadata,
                "acl": if public && d.acl.is_empty() {
                    Value::from(PUBLIC)
                } else {
                    Value::from(d.acl.clone())
                },
            })
        }
    };
    // A JSON value of strings and maps always serializes.
    serde_json::to_vec(&value).unwrap_or_default()
}

#[cfg(test)]
mod tests;
