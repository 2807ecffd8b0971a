//! A real PostgreSQL (Debian's package, started by `deploy/start-postgres.sh` on
//! `127.0.0.1:$FRESHET_POSTGRES_PORT`) whose changes are captured by logical decoding with
//! `wal2json` (format 2) and written as Debezium's PostgreSQL connector writes them: an insert
//! is `c`, an update `u` (`before` is the replica identity wal2json reports), a delete `d`
//! followed by its tombstone, and an update of the primary key a `d` of the old key, its
//! tombstone and a `c` of the new key. Debezium itself is not involved: this is the part of its
//! connector that turns decoded WAL into change events, for one table of text and integer
//! columns. `psql` runs the SQL (no client library).

use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Map, Value};

use super::{event_at, Position};

/// One database of the test server, dropped (with its replication slot) at the end.
pub struct Postgres {
    port: String,
    pub db: String,
    slot: Option<String>,
}

/// One change as wal2json decoded it, with its position in the WAL.
#[derive(Clone, Debug)]
pub struct WalChange {
    pub lsn: i64,
    pub xid: i64,
    pub data: Value,
}

/// A Kafka record: key and value (`None`: a tombstone).
pub type KafkaRecord = (Vec<u8>, Option<Vec<u8>>);

impl Postgres {
    /// Creates database `name` on the test server (`FRESHET_POSTGRES_PORT`).
    pub fn create(name: &str) -> Result<Postgres> {
        let port = crate::env("FRESHET_POSTGRES_PORT");
        psql(&port, "postgres", &format!("CREATE DATABASE {name}"))?;
        Ok(Postgres {
            port,
            db: name.to_string(),
            slot: None,
        })
    }

    /// Runs `sql` (one or more statements, one transaction per statement unless it says
    /// otherwise) and returns psql's unaligned, tuples-only output.
    pub fn sql(&self, sql: &str) -> Result<String> {
        psql(&self.port, &self.db, sql)
    }

    /// Creates the logical replication slot `slot` with wal2json: changes from now on are kept
    /// for [`Postgres::changes`].
    pub fn create_slot(&mut self, slot: &str) -> Result<()> {
        self.sql(&format!(
            "SELECT 1 FROM pg_create_logical_replication_slot('{slot}', 'wal2json')"
        ))?;
        self.slot = Some(slot.to_string());
        Ok(())
    }

    /// The changes committed since the last call (consumed from the slot), in commit order.
    pub fn changes(&self) -> Result<Vec<WalChange>> {
        let slot = self.slot.as_deref().ok_or_else(|| anyhow!("no slot"))?;
        let out = self.sql(&format!(
            "SELECT json_build_object('lsn', lsn::text, 'xid', xid::text, 'data', data::json) \
             FROM pg_logical_slot_get_changes('{slot}', NULL, NULL, 'format-version', '2', \
             'include-pk', 'true', 'include-transaction', 'false')"
        ))?;
        out.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|line| {
                let v: Value = serde_json::from_str(line)?;
                Ok(WalChange {
                    lsn: parse_lsn(v["lsn"].as_str().unwrap_or_default())?,
                    xid: v["xid"].as_str().unwrap_or_default().parse()?,
                    data: v["data"].clone(),
                })
            })
            .collect()
    }

    /// Every row of `table` as a JSON object, by the first column.
    pub fn rows(&self, table: &str) -> Result<Vec<Value>> {
        let out = self.sql(&format!(
            "SELECT coalesce(json_agg(t ORDER BY 1), '[]') FROM {table} t"
        ))?;
        match serde_json::from_str(out.trim())? {
            Value::Array(rows) => Ok(rows),
            other => bail!("expected rows, got {other}"),
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(slot) = &self.slot {
            let _ = self.sql(&format!("SELECT pg_drop_replication_slot('{slot}')"));
        }
        let drop_db = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.db);
        let _ = psql(&self.port, "postgres", &drop_db);
    }
}

/// Runs `sql` on database `db` with `psql` and returns its unaligned, tuples-only output.
fn psql(port: &str, db: &str, sql: &str) -> Result<String> {
    let out = Command::new("psql")
        .args([
            "-X",
            "-q",
            "-At",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
        ])
        .args(["-p", port, "-U", "postgres", "-d", db, "-c", sql])
        .output()
        .context("running psql (is the postgresql package installed?)")?;
    if !out.status.success() {
        bail!(
            "psql failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// `0/1526058` → 22175832.
fn parse_lsn(s: &str) -> Result<i64> {
    let (hi, lo) = s.split_once('/').ok_or_else(|| anyhow!("bad LSN {s:?}"))?;
    Ok((i64::from_str_radix(hi, 16)? << 32) + i64::from_str_radix(lo, 16)?)
}

/// wal2json's `[{"name":…,"value":…}]` as an object.
fn columns(v: &Value) -> Map<String, Value> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c["name"].as_str()?.to_string(), c["value"].clone())))
        .collect()
}

/// The record key: the primary key columns of `row`, as the JSON converter writes a key
/// `<server>.<schema>.<table>.Key` with the schema wrapper or without it.
fn key(change: &Value, row: &Map<String, Value>, wrapped: bool) -> Vec<u8> {
    let pk: Vec<&str> = change["pk"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let payload: Map<String, Value> = pk
        .iter()
        .map(|n| (n.to_string(), row.get(*n).cloned().unwrap_or(Value::Null)))
        .collect();
    let name = format!(
        "pg.{}.{}.Key",
        change["schema"].as_str().unwrap_or_default(),
        change["table"].as_str().unwrap_or_default()
    );
    let fields: Vec<Value> = pk
        .iter()
        .map(|n| json!({"type": "int32", "optional": false, "field": n}))
        .collect();
    let v = if wrapped {
        json!({"schema": {"type": "struct", "fields": fields, "optional": false, "name": name},
               "payload": payload})
    } else {
        Value::Object(payload)
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

/// The Debezium records of one decoded change of database `db` (see the module docs).
pub fn debezium_records(change: &WalChange, db: &str, wrapped: bool) -> Result<Vec<KafkaRecord>> {
    let d = &change.data;
    let (schema, table) = (
        d["schema"].as_str().unwrap_or_default(),
        d["table"].as_str().unwrap_or_default(),
    );
    let mut at = Position::new(db, schema, table, change.lsn);
    at.tx_id = change.xid;
    let after = columns(&d["columns"]);
    let before = columns(&d["identity"]);
    let event = |op: &str, b: &Map<String, Value>, a: &Map<String, Value>| {
        let obj = |m: &Map<String, Value>| {
            if m.is_empty() {
                Value::Null
            } else {
                Value::Object(m.clone())
            }
        };
        event_at(op, obj(b), obj(a), wrapped, &at)
    };
    let none = Map::new();
    let delete = |old: &Map<String, Value>| {
        let k = key(d, old, wrapped);
        vec![(k.clone(), Some(event("d", old, &none))), (k, None)]
    };
    Ok(match d["action"].as_str() {
        Some("I") => vec![(key(d, &after, wrapped), Some(event("c", &none, &after)))],
        Some("U") if !before.is_empty() && key(d, &before, false) != key(d, &after, false) => {
            let mut out = delete(&before);
            out.push((key(d, &after, wrapped), Some(event("c", &none, &after))));
            out
        }
        Some("U") => vec![(key(d, &after, wrapped), Some(event("u", &before, &after)))],
        Some("D") => delete(&before),
        other => bail!("unexpected wal2json action {other:?} in {d}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_and_a_primary_key_change() {
        assert_eq!(parse_lsn("0/1526058").unwrap(), 0x1526058);
        assert_eq!(parse_lsn("1/0").unwrap(), 1 << 32);
        let change = WalChange {
            lsn: 10,
            xid: 7,
            data: json!({"action": "U", "schema": "public", "table": "t",
                "columns": [{"name": "id", "type": "integer", "value": 3},
                            {"name": "body", "type": "text", "value": "x"}],
                "identity": [{"name": "id", "type": "integer", "value": 2}],
                "pk": [{"name": "id", "type": "integer"}]}),
        };
        let records = debezium_records(&change, "db", false).unwrap();
        let ops: Vec<(String, Option<String>)> = records
            .iter()
            .map(|(k, v)| {
                let op = v.as_ref().map(|v| {
                    let v: Value = serde_json::from_slice(v).unwrap();
                    v["op"].as_str().unwrap().to_string()
                });
                (String::from_utf8(k.clone()).unwrap(), op)
            })
            .collect();
        assert_eq!(
            ops,
            vec![
                (r#"{"id":2}"#.to_string(), Some("d".to_string())),
                (r#"{"id":2}"#.to_string(), None),
                (r#"{"id":3}"#.to_string(), Some("c".to_string())),
            ]
        );
    }
}
