//! Debezium change events (Kafka Connect's JSON converter) to [`Change`]s.
//!
//! Follows the PostgreSQL connector's documented output (the "Data change events" of Debezium's
//! documentation for 2.6 and later, whose events carry `ts_us` and `ts_ns`; the fixtures in
//! `operators/tests/fixtures/debezium` are its examples): keys named
//! `<topic.prefix>.<schema>.<table>.Key`, values `….Envelope` with `before`, `after`, `source`,
//! `op`, `ts_ms`, `ts_us`, `ts_ns`, `transaction`. The other relational connectors share the
//! envelope.
//!
//! # Shapes
//!
//! Key and value each come with the converter's schema wrapper (`schemas.enable=true`:
//! `{"schema":{…},"payload":{…}}`, recognised as an object whose only members are `schema`
//! and `payload`) or without it (`schemas.enable=false`: the payload alone).
//!
//! # Events
//!
//! - `c` (create), `r` (snapshot read), `u` (update): an upsert of the document `after`
//!   describes ([`DebeziumMapping::document`]). When the key, or an update's `before`
//!   (replica identity `FULL`), names the row too, it must name the same id (`id_mismatch`).
//! - `d` (delete): a delete of the id `before` names, or else the key's.
//! - A tombstone (null value, or a wrapper whose payload is null), which follows every delete:
//!   a delete of the key's id (deleting twice is deleting once). A tombstone whose key does not
//!   hold the id fields changes nothing (the delete before it already did).
//! - A primary-key change arrives as `d` for the old key, its tombstone and `c` for the new
//!   key: the old document is deleted and the new one indexed.
//! - `m` (a logical decoding message) changes no row: nothing. `t` (truncate) cannot be
//!   applied without the table's rows and is `unknown_op`, like any other op.
//!
//! Errors are [`DecodeError`]s with the envelope's classes; the key is held to
//! `max_value_bytes` (it is JSON, not an id), the id to `max_id_bytes` and the document to
//! the rest of its [`RecordLimits`].

use serde_json::{Map, Value};

use super::mapping::DebeziumMapping;
use crate::document::Change;
use crate::envelope::{json_type, parse_value, truncate, DecodeError};
use crate::limits::{check_document, check_size, RecordLimits};

/// Decodes one Debezium record: `Ok(None)` when it changes no document.
pub fn decode(
    mapping: &DebeziumMapping,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    limits: &RecordLimits,
) -> Result<Option<Change>, DecodeError> {
    let key = parse_key(key, limits)?;
    let payload = match value {
        None => None,
        Some(v) => unwrap(parse_value(v, limits)?),
    };
    let Some(payload) = payload else {
        return match &key {
            None => Err(DecodeError::EmptyRecord),
            Some(k) => Ok(checked_id(mapping.id_of(k)?, limits)?.map(|id| Change::Delete { id })),
        };
    };
    let Value::Object(event) = payload else {
        return Err(DecodeError::MalformedJson {
            detail: format!(
                "expected a Debezium change event (an object), found {}",
                json_type(&payload)
            ),
        });
    };
    let op = match event.get("op") {
        Some(Value::String(op)) => op.as_str(),
        None | Some(Value::Null) => {
            return Err(invalid("op", "missing: not a Debezium change event"))
        }
        Some(other) => {
            return Err(invalid(
                "op",
                &format!("expected a string, found {}", json_type(other)),
            ))
        }
    };
    let key_id = match &key {
        Some(k) => checked_id(mapping.id_of(k)?, limits)?,
        None => None,
    };
    match op {
        "c" | "r" | "u" => upsert(mapping, &event, key_id, limits).map(Some),
        "d" => {
            let before = row(&event, "before")?;
            let before_id = match before {
                Some(b) => checked_id(mapping.id_of(b)?, limits)?,
                None => None,
            };
            before_id
                .or(key_id)
                .map(|id| Some(Change::Delete { id }))
                .ok_or(DecodeError::MissingId)
        }
        "m" => Ok(None),
        other => Err(DecodeError::UnknownOp {
            op: truncate(other, 64),
            expected: "\"c\", \"r\", \"u\" or \"d\" (truncate is not supported)",
        }),
    }
}

/// The document a record names, even when it cannot be decoded: the key's id, else the id of
/// the value's `after`, else of its `before`, when within `max_id_bytes`.
pub fn named_document(
    mapping: &DebeziumMapping,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    limits: &RecordLimits,
) -> Option<String> {
    let fits = |id: Option<String>| id.filter(|i| !i.is_empty() && i.len() <= limits.max_id_bytes);
    let from_key = parse_key(key, limits)
        .ok()
        .flatten()
        .and_then(|k| mapping.id_of(&k).ok().flatten());
    if let Some(id) = fits(from_key) {
        return Some(id);
    }
    let event = value
        .and_then(|v| parse_value(v, limits).ok())
        .and_then(unwrap)?;
    ["after", "before"].into_iter().find_map(|side| {
        let r = event.get(side)?.as_object()?;
        fits(mapping.id_of(r).ok().flatten())
    })
}

fn upsert(
    mapping: &DebeziumMapping,
    event: &Map<String, Value>,
    key_id: Option<String>,
    limits: &RecordLimits,
) -> Result<Change, DecodeError> {
    let after = row(event, "after")?.ok_or_else(|| invalid("after", "missing or null"))?;
    let id = checked_id(mapping.id_of(after)?, limits)?.ok_or(DecodeError::MissingId)?;
    let before_id = match row(event, "before")? {
        Some(b) => checked_id(mapping.id_of(b)?, limits)?,
        None => None,
    };
    for other in [key_id, before_id].into_iter().flatten() {
        if other != id {
            return Err(DecodeError::IdMismatch {
                key: other,
                value: id,
            });
        }
    }
    let source = event.get("source").and_then(Value::as_object);
    let doc = mapping.document(id, after, source, limits)?;
    check_document(&doc, limits)?;
    Ok(Change::Upsert(doc))
}

/// The key's fields (`None` for an absent, empty or null key).
fn parse_key(
    key: Option<&[u8]>,
    limits: &RecordLimits,
) -> Result<Option<Map<String, Value>>, DecodeError> {
    let Some(k) = key.filter(|k| !k.is_empty()) else {
        return Ok(None);
    };
    match unwrap(parse_value(k, limits)?) {
        None => Ok(None),
        Some(Value::Object(fields)) => Ok(Some(fields)),
        Some(other) => Err(DecodeError::MalformedJson {
            detail: format!("the key is not an object but {}", json_type(&other)),
        }),
    }
}

/// The payload of a converter's output: the wrapper's `payload`, or the value itself; `None`
/// for null.
fn unwrap(v: Value) -> Option<Value> {
    let v = match v {
        Value::Object(mut o)
            if o.len() == 2 && o.contains_key("schema") && o.contains_key("payload") =>
        {
            o.remove("payload").unwrap_or(Value::Null)
        }
        other => other,
    };
    (!v.is_null()).then_some(v)
}

/// `before` or `after`: an object, or `None` when missing or null.
fn row<'e>(
    event: &'e Map<String, Value>,
    side: &str,
) -> Result<Option<&'e Map<String, Value>>, DecodeError> {
    match event.get(side) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(r)) => Ok(Some(r)),
        Some(other) => Err(invalid(
            side,
            &format!("expected an object, found {}", json_type(other)),
        )),
    }
}

fn checked_id(id: Option<String>, limits: &RecordLimits) -> Result<Option<String>, DecodeError> {
    if let Some(id) = &id {
        check_size("document id", id.len(), limits.max_id_bytes)?;
        if id.is_empty() {
            return Ok(None);
        }
    }
    Ok(id)
}

fn invalid(field: &str, reason: &str) -> DecodeError {
    DecodeError::InvalidField {
        field: field.to_owned(),
        reason: reason.to_owned(),
    }
}
