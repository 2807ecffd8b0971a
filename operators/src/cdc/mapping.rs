//! How a table row becomes a [`Document`]: the [`DebeziumMapping`] of one source (its id, title,
//! text, content type, metadata, ACL and source fields) and the functions that apply it to a
//! row, a JSON object of column name → value as Debezium's JSON converter writes it.
//!
//! # Rules
//!
//! - **Id**: the values of `id_fields`, in order. A string is taken as it is, an integer as its
//!   decimal form (so the key's `"1"` and the row's `1` name the same row), a boolean as `true` /
//!   `false`; a missing or null id field is `missing_id`, any other type `invalid_field`. With
//!   one id field the id is its value; with several, each value has `%` written `%25` and `/`
//!   written `%2F`, and the values are joined with [`ID_SEPARATOR`] (`/`), so two different
//!   rows never share an id. `id_prefix` is put in front as it is.
//! - **Text**: the values of `text_fields`, in order, joined with [`TEXT_SEPARATOR`] (a blank
//!   line); a null value is skipped. Strings are taken as they are, numbers and booleans as their
//!   JSON text; arrays and objects are `invalid_field`.
//! - **Title**, **source field**: one value read like a text field (null: empty).
//! - **Metadata**: each of `metadata_fields` is stored under its column name as canonical JSON
//!   ([`canonical_json`]), null included.
//! - **ACL**: an array of non-empty strings, or one string of comma-separated principals (each
//!   trimmed, empty ones skipped). Sorted and de-duplicated; the reserved `public`, `everyone`
//!   and `*` are `invalid_field` (`crate::envelope::acl`). A row whose ACL column is null or
//!   holds no principal (`[]`, `""`) follows [`NullAcl`]: refused as `missing_acl` (the default
//!   when `acl_field` is set), or public. Without `acl_field` a row states no ACL, unless
//!   `null_acl` is `public` (then every row is public, stated), so `[limits] require_acl`
//!   refuses it.
//! - A configured column that the row does not have is `invalid_field` (a misspelt mapping
//!   fails loudly instead of indexing empty documents), and so is Debezium's placeholder for an
//!   unchanged TOASTed value ([`UNAVAILABLE_VALUE`]): the row does not carry the real value.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::document::{ContentType, Document};
use crate::envelope::{acl_field, json_type, Acl, DecodeError};
use crate::json::canonical_json;
use crate::limits::RecordLimits;

/// Joins the values of several id fields.
pub const ID_SEPARATOR: &str = "/";
/// Joins the values of the text fields.
pub const TEXT_SEPARATOR: &str = "\n\n";
/// What Debezium writes (by default, `unavailable.value.placeholder`) for a TOASTed column
/// that an update did not change, when the table's replica identity is not `FULL`.
pub const UNAVAILABLE_VALUE: &str = "__debezium_unavailable_value";

/// How one table's rows become documents (a `[[sources]]` entry of format `debezium`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DebeziumMapping {
    /// The columns whose values make the document id (the table's primary key, so that
    /// Debezium turns a change of them into a delete and a create).
    pub id_fields: Vec<String>,
    /// Put in front of every id, so that documents of different sources never share an id.
    pub id_prefix: String,
    pub title_field: Option<String>,
    /// Joined in order into the document's text.
    pub text_fields: Vec<String>,
    pub content_type: ContentType,
    /// Copied into the document's metadata under their column names.
    pub metadata_fields: Vec<String>,
    pub acl_field: Option<String>,
    /// What a row without principals gets (`None`: [`NullAcl::Refuse`] with `acl_field`, no
    /// ACL stated without it).
    pub null_acl: Option<NullAcl>,
    /// The column holding the document's `source`; without it, the change event's `source`
    /// block names it ([`default_source`]).
    pub source_field: Option<String>,
}

/// What a row whose ACL column is null or empty gets (`null_acl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NullAcl {
    /// Refused (`missing_acl`): a row that names nobody is not made public.
    Refuse,
    /// Public, stated (accepted under `[limits] require_acl`).
    Public,
}

impl NullAcl {
    /// `"refuse"` or `"public"`.
    pub fn parse(s: &str) -> Option<NullAcl> {
        match s {
            "refuse" => Some(NullAcl::Refuse),
            "public" => Some(NullAcl::Public),
            _ => None,
        }
    }
}

impl DebeziumMapping {
    /// `Err` with the reason when the mapping cannot make a document.
    pub fn validate(&self) -> Result<(), String> {
        if self.id_fields.is_empty() {
            return Err("id_fields must name at least one column".into());
        }
        if self.text_fields.is_empty() {
            return Err("text_fields must name at least one column".into());
        }
        if self.content_type.is_binary() {
            return Err(format!(
                "content_type {} is a binary format; a row's text fields hold text",
                self.content_type.as_str()
            ));
        }
        let named = self
            .id_fields
            .iter()
            .chain(&self.text_fields)
            .chain(&self.metadata_fields)
            .chain(&self.title_field)
            .chain(&self.acl_field)
            .chain(&self.source_field);
        if named.into_iter().any(|f| f.is_empty()) {
            return Err("a field name is empty".into());
        }
        if self.acl_field.is_none() && self.null_acl == Some(NullAcl::Refuse) {
            return Err(
                "null_acl = \"refuse\" without acl_field would refuse every row: map the ACL \
                 column with acl_field"
                    .into(),
            );
        }
        Ok(())
    }

    /// The id of the row or key `fields`: `Ok(None)` when one of the id fields is missing or
    /// null (the object does not name the row), `Err` when one has a type no id can be made of.
    pub fn id_of(&self, fields: &Map<String, Value>) -> Result<Option<String>, DecodeError> {
        let mut parts = Vec::with_capacity(self.id_fields.len());
        for f in &self.id_fields {
            let part = match fields.get(f) {
                None | Some(Value::Null) => return Ok(None),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(other) => {
                    return Err(invalid(
                        f,
                        format!(
                            "an id field must be a string, an integer or a boolean, found {}",
                            json_type(other)
                        ),
                    ))
                }
            };
            parts.push(part);
        }
        let joined = if parts.len() == 1 {
            parts.pop().unwrap_or_default()
        } else {
            parts
                .iter()
                .map(|p| p.replace('%', "%25").replace('/', "%2F"))
                .collect::<Vec<_>>()
                .join(ID_SEPARATOR)
        };
        Ok(Some(format!("{}{joined}", self.id_prefix)))
    }

    /// The document a row (`after`) describes, with id `id`; `source` is the event's `source`
    /// block (for the default source). Its ACL is held to `limits.require_acl`.
    pub fn document(
        &self,
        id: String,
        row: &Map<String, Value>,
        source: Option<&Map<String, Value>>,
        limits: &RecordLimits,
    ) -> Result<Document, DecodeError> {
        let mut texts = Vec::new();
        for f in &self.text_fields {
            if let Some(t) = text_value(f, column(row, f)?)? {
                texts.push(t);
            }
        }
        let title = match &self.title_field {
            Some(f) => text_value(f, column(row, f)?)?.unwrap_or_default(),
            None => String::new(),
        };
        let source = match &self.source_field {
            Some(f) => text_value(f, column(row, f)?)?.unwrap_or_default(),
            None => source.map(default_source).unwrap_or_default(),
        };
        let mut metadata = BTreeMap::new();
        for f in &self.metadata_fields {
            let v = column(row, f)?;
            if v.as_str() == Some(UNAVAILABLE_VALUE) {
                return Err(unavailable(f));
            }
            metadata.insert(f.clone(), canonical_json(v));
        }
        let acl = match (&self.acl_field, self.null_acl) {
            (Some(f), rule) => match acl_value(f, column(row, f)?)? {
                Acl::Unstated if rule == Some(NullAcl::Public) => Acl::Public,
                Acl::Unstated => {
                    return Err(DecodeError::MissingAcl {
                        reason: format!(
                            "the ACL column {f:?} is null or names no principal, and the \
                             source's null_acl is \"refuse\" (set null_acl = \"public\" to make \
                             such rows public)"
                        ),
                    })
                }
                acl => acl,
            },
            (None, Some(NullAcl::Public)) => Acl::Public,
            (None, _) => Acl::Unstated,
        }
        .resolve(limits)?;
        Ok(Document {
            id,
            title,
            text: texts.join(TEXT_SEPARATOR),
            content_type: self.content_type,
            source,
            metadata,
            acl,
        })
    }
}

/// `debezium://<db>/<schema>.<table>` from a change event's `source` block (`db`, `schema`,
/// `table`), or `debezium://<db>/<table>` when it has no schema (MySQL); empty without a table.
pub fn default_source(source: &Map<String, Value>) -> String {
    let get = |k: &str| source.get(k).and_then(Value::as_str).unwrap_or_default();
    let (db, schema, table) = (get("db"), get("schema"), get("table"));
    match (table.is_empty(), schema.is_empty()) {
        (true, _) => String::new(),
        (false, true) => format!("debezium://{db}/{table}"),
        (false, false) => format!("debezium://{db}/{schema}.{table}"),
    }
}

fn column<'r>(row: &'r Map<String, Value>, field: &str) -> Result<&'r Value, DecodeError> {
    row.get(field)
        .ok_or_else(|| invalid(field, "the row has no such column".into()))
}

fn text_value(field: &str, v: &Value) -> Result<Option<String>, DecodeError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s == UNAVAILABLE_VALUE => Err(unavailable(field)),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Number(n) => Ok(Some(n.to_string())),
        Value::Bool(b) => Ok(Some(b.to_string())),
        other => Err(invalid(
            field,
            format!("expected a string, found {}", json_type(other)),
        )),
    }
}

/// The ACL a row's column holds ([`Acl::Unstated`] for null or no principal).
fn acl_value(field: &str, v: &Value) -> Result<Acl, DecodeError> {
    let rename = |e: DecodeError| match e {
        DecodeError::InvalidField { field: f, reason } => {
            invalid(&f.replacen("acl", field, 1), reason)
        }
        other => other,
    };
    match v {
        Value::String(s) if s == UNAVAILABLE_VALUE => Err(unavailable(field)),
        Value::String(s) => {
            let principals = s.split(',').map(str::trim).filter(|p| !p.is_empty());
            Acl::principals(principals).map_err(|reason| invalid(field, reason))
        }
        // An array (or null): the envelope's rules, but a string is a list of principals above,
        // never the envelope's "public".
        other => acl_field(Some(other.clone())).map_err(rename),
    }
}

fn invalid(field: &str, reason: String) -> DecodeError {
    DecodeError::InvalidField {
        field: field.to_owned(),
        reason,
    }
}

fn unavailable(field: &str) -> DecodeError {
    invalid(
        field,
        format!(
            "the row carries {UNAVAILABLE_VALUE} (an unchanged TOASTed value): set the table's \
             REPLICA IDENTITY to FULL"
        ),
    )
}
