//! Helpers for the CDC tests: an `articles` table whose changes are written as Debezium's
//! PostgreSQL connector writes them through Kafka Connect's JSON converter (with or without the
//! schema wrapper; the structure of `operators/tests/fixtures/debezium`, though `serde_json`
//! orders each object's members by name), the `[[sources]]` configuration that maps the table,
//! and the documents its rows say, written independently of the decoder as envelopes.
//! [`postgres`] captures a real PostgreSQL table's changes and writes them the same way.

pub mod postgres;

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::{json, Value};

use crate::Case;

/// Every document id of the table starts with this.
pub const ID_PREFIX: &str = "articles:";
/// The `source` the mapping gives every document (the event's `source` block).
pub const SOURCE: &str = "debezium://shop/public.articles";

/// One row of `articles (id int primary key, title text, summary text, body text, lang text,
/// acl text)`: `acl` is a JSON array (a `text[]` column) or a comma-separated string.
pub fn row(
    id: i64,
    title: &str,
    summary: Option<&str>,
    body: &str,
    lang: &str,
    acl: Value,
) -> Value {
    json!({"id": id, "title": title, "summary": summary, "body": body, "lang": lang, "acl": acl})
}

/// The record key of row `id`, with the converter's schema wrapper or without it.
pub fn key(id: i64, wrapped: bool) -> Vec<u8> {
    let payload = json!({ "id": id });
    let v = if wrapped {
        json!({"schema": {"type": "struct", "fields": [
                   {"type": "int32", "optional": false, "field": "id"}],
                   "optional": false, "name": "shop.public.articles.Key"},
               "payload": payload})
    } else {
        payload
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

fn row_schema(field: &str) -> Value {
    let col = |t: &str, name: &str, optional: bool| json!({"type": t, "optional": optional, "field": name});
    json!({"type": "struct", "optional": true, "name": "shop.public.articles.Value", "field": field,
           "fields": [col("int32", "id", false), col("string", "title", true),
                      col("string", "summary", true), col("string", "body", true),
                      col("string", "lang", true), col("string", "acl", true)]})
}

/// A change event value: `op` with `before` and `after`, as the connector writes it.
pub fn event(op: &str, before: Value, after: Value, wrapped: bool, lsn: i64) -> Vec<u8> {
    event_at(
        op,
        before,
        after,
        wrapped,
        &Position::new("shop", "public", "articles", lsn),
    )
}

/// Where a change happened, for the event's `source` block.
pub struct Position<'a> {
    pub db: &'a str,
    pub schema: &'a str,
    pub table: &'a str,
    pub lsn: i64,
    pub tx_id: i64,
    pub ts_ms: i64,
}

impl<'a> Position<'a> {
    pub fn new(db: &'a str, schema: &'a str, table: &'a str, lsn: i64) -> Self {
        Position {
            db,
            schema,
            table,
            lsn,
            tx_id: 700 + lsn,
            ts_ms: 1_732_000_000_000 + lsn,
        }
    }
}

/// [`event`] at `at`.
pub fn event_at(
    op: &str,
    before: Value,
    after: Value,
    wrapped: bool,
    at: &Position<'_>,
) -> Vec<u8> {
    let (ts, lsn) = (at.ts_ms, at.lsn);
    let payload = json!({
        "before": before, "after": after,
        "source": {"version": "2.7.3.Final", "connector": "postgresql", "name": "shop",
                   "ts_ms": ts, "ts_us": ts * 1000, "ts_ns": ts * 1_000_000,
                   "snapshot": if op == "r" { "true" } else { "false" }, "db": at.db,
                   "sequence": format!("[null,\"{lsn}\"]"), "schema": at.schema,
                   "table": at.table, "txId": at.tx_id, "lsn": lsn, "xmin": null},
        "op": op, "ts_ms": ts + 5, "ts_us": (ts + 5) * 1000, "ts_ns": (ts + 5) * 1_000_000,
        "transaction": null});
    let v = if wrapped {
        json!({"schema": {"type": "struct", "optional": false,
                          "name": "shop.public.articles.Envelope",
                          "fields": [row_schema("before"), row_schema("after"),
                                     {"type": "struct", "optional": false, "field": "source",
                                      "name": "io.debezium.connector.postgresql.Source"},
                                     {"type": "string", "optional": false, "field": "op"}]},
               "payload": payload})
    } else {
        payload
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

/// Makes the case's pipeline read two topics: the case's document topic (freshet's envelope)
/// and `cdc_topic`, the `articles` table's Debezium topic, through a configuration file. A row
/// whose `acl` is NULL is public (`null_acl = "public"`; the default refuses it).
pub fn use_sources(case: &mut Case, cdc_topic: &str) -> Result<()> {
    let path = case.dir.join("sources.toml");
    std::fs::write(
        &path,
        format!(
            r#"[[sources]]
topic = "{docs}"

[[sources]]
topic = "{cdc_topic}"
format = "debezium"
id_fields = ["id"]
id_prefix = "{ID_PREFIX}"
title_field = "title"
text_fields = ["summary", "body"]
content_type = "text/markdown"
metadata_fields = ["lang"]
acl_field = "acl"
null_acl = "public"
"#,
            docs = case.kafka.topic
        ),
    )?;
    case.extra_env
        .push(("FRESHET_CONFIG".into(), path.display().to_string()));
    Ok(())
}

/// The envelope of the document a row says, by hand: id with the prefix, the title, summary
/// and body joined by a blank line (a null summary left out), the language as metadata, the
/// ACL as a list (a comma-separated value split and trimmed).
pub fn document_of(row: &Value) -> (String, Vec<u8>) {
    document_in(row, SOURCE)
}

/// [`document_of`] with another `source`.
pub fn document_in(row: &Value, source: &str) -> (String, Vec<u8>) {
    let id = format!("{ID_PREFIX}{}", row["id"]);
    let text: Vec<&str> = ["summary", "body"]
        .iter()
        .filter_map(|c| row[*c].as_str())
        .collect();
    let acl: Vec<String> = match &row["acl"] {
        Value::String(s) => s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect(),
        Value::Array(a) => a
            .iter()
            .filter_map(|p| p.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    let doc = json!({"op": "upsert", "id": id, "title": row["title"], "text": text.join("\n\n"),
                     "content_type": "text/markdown", "source": source,
                     "metadata": {"lang": row["lang"]}, "acl": acl});
    (id, serde_json::to_vec(&doc).unwrap_or_default())
}

/// The table as the test changed it, by primary key.
pub type Table = BTreeMap<i64, Value>;

/// The envelopes of every document `table` says, to follow the document topic's records in a
/// reference log.
pub fn documents_of(table: &Table) -> Vec<(String, Option<Vec<u8>>)> {
    table
        .values()
        .map(|r| {
            let (id, v) = document_of(r);
            (id, Some(v))
        })
        .collect()
}
