//! JSONL input: each line a document envelope (passed on as it is, but given the mapping's ACL
//! when it states none) or a BEIR corpus line (`{"_id","title","text","metadata"}`, made an
//! upsert with the mapping's ACL).

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;

use freshet_kafka::{DocumentRecord, Op, Produce};
use freshet_operators::document::{ContentType, Document};
use freshet_operators::json::canonical_json;
use serde_json::{Map, Value};

use crate::publish::{upsert_record, BadInput, Batcher, JsonlFormat, Mapping, PublishReport};
use crate::{Error, Result};

/// Publishes every line of the JSONL file `path` through `producer`.
///
/// A line is a document envelope (passed on as it is, keyed by its `id`) or a BEIR corpus line
/// (`{"_id","title","text","metadata"}`), which becomes an upsert with content type
/// `text/plain` and source `beir:<file stem>` (or [`Mapping::source`]). Blank lines are
/// ignored; a line that is neither is reported in [`PublishReport::bad`] and skipped.
pub fn publish_jsonl(
    path: &Path,
    producer: &dyn Produce,
    mapping: &Mapping,
) -> Result<PublishReport> {
    let io_err = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = fs::File::open(path).map_err(io_err)?;
    let mut reader = BufReader::new(file);
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let beir_source = mapping
        .source
        .clone()
        .unwrap_or_else(|| format!("beir:{stem}"));

    let mut publisher = Batcher::new(producer, mapping.batch_size);
    let mut bad = Vec::new();
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io_err)? == 0 {
            break;
        }
        line_no += 1;
        let bytes = if line_no == 1 {
            buf.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&buf)
        } else {
            &buf[..]
        };
        let line = match std::str::from_utf8(bytes) {
            Ok(l) => l.trim(),
            Err(e) => {
                bad.push(BadInput {
                    path: path.to_path_buf(),
                    line: Some(line_no),
                    reason: format!("not UTF-8: {e}"),
                });
                continue;
            }
        };
        if line.is_empty() {
            continue;
        }
        match map_jsonl_line(line, mapping, &beir_source) {
            Ok(out) => publisher.add(out)?,
            Err(reason) => {
                tracing::warn!(path = %path.display(), line = line_no, %reason, "skipping bad line");
                bad.push(BadInput {
                    path: path.to_path_buf(),
                    line: Some(line_no),
                    reason,
                });
            }
        }
    }
    let mut report = publisher.finish()?;
    report.bad = bad;
    tracing::info!(
        path = %path.display(), topic = producer.topic(), published = report.published,
        bad = report.bad.len(), "published jsonl"
    );
    Ok(report)
}

/// Maps one JSONL line (without its newline) to a record. `beir_source` is the `source` given
/// to BEIR documents.
pub fn map_jsonl_line(
    line: &str,
    mapping: &Mapping,
    beir_source: &str,
) -> std::result::Result<DocumentRecord, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let Value::Object(obj) = value else {
        return Err("not a JSON object".to_string());
    };
    let format = match mapping.format {
        JsonlFormat::Auto if obj.contains_key("op") => JsonlFormat::Envelope,
        JsonlFormat::Auto if obj.contains_key("_id") => JsonlFormat::Beir,
        JsonlFormat::Auto => {
            return Err(
                "neither a document envelope (no \"op\") nor a BEIR corpus line (no \"_id\")"
                    .to_string(),
            )
        }
        f => f,
    };
    match format {
        JsonlFormat::Beir => beir_line(obj, mapping, beir_source),
        _ => envelope_line(obj, mapping),
    }
}

/// An envelope line, passed on as it is, except that an upsert stating no ACL (`acl` absent,
/// null or `[]`) gets the one [`Mapping::acl`] gives its id.
fn envelope_line(
    mut obj: Map<String, Value>,
    mapping: &Mapping,
) -> std::result::Result<DocumentRecord, String> {
    let op = match obj.get("op") {
        Some(Value::String(op)) if op == "upsert" => Op::Upsert,
        Some(Value::String(op)) if op == "delete" => Op::Delete,
        Some(other) => return Err(format!("unknown op {other}")),
        None => return Err("envelope without \"op\"".to_string()),
    };
    let id = match obj.get("id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        Some(Value::String(_)) => return Err("empty \"id\"".to_string()),
        Some(_) => return Err("\"id\" is not a string".to_string()),
        None => return Err("envelope without \"id\"".to_string()),
    };
    let unstated = match obj.get("acl") {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    };
    if op == Op::Upsert && unstated {
        if let Some(acl) = mapping.acl.for_id(&id).to_json() {
            obj.insert("acl".into(), acl);
        }
    }
    let value = serde_json::to_vec(&Value::Object(obj)).map_err(|e| e.to_string())?;
    Ok(DocumentRecord {
        id,
        op,
        value: Some(value),
    })
}

fn beir_line(
    mut obj: Map<String, Value>,
    mapping: &Mapping,
    source: &str,
) -> std::result::Result<DocumentRecord, String> {
    let id = match obj.remove("_id") {
        Some(Value::String(id)) if !id.is_empty() => id,
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(_)) => return Err("empty \"_id\"".to_string()),
        Some(_) => return Err("\"_id\" is neither a string nor a number".to_string()),
        None => return Err("BEIR line without \"_id\"".to_string()),
    };
    let title = match obj.remove("title") {
        Some(Value::String(t)) => t,
        None | Some(Value::Null) => String::new(),
        Some(_) => return Err("\"title\" is not a string".to_string()),
    };
    let text = match obj.remove("text") {
        Some(Value::String(t)) => t,
        Some(_) => return Err("\"text\" is not a string".to_string()),
        None => return Err("BEIR line without \"text\"".to_string()),
    };
    let metadata = match obj.remove("metadata") {
        Some(Value::Object(m)) => m,
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err("\"metadata\" is not an object".to_string()),
    };
    let doc = Document {
        id: id.clone(),
        title,
        text,
        content_type: ContentType::PlainText,
        source: source.to_owned(),
        metadata: metadata
            .into_iter()
            .map(|(k, v)| (k, canonical_json(&v)))
            .collect(),
        acl: Vec::new(),
    };
    Ok(upsert_record(doc, mapping.acl.for_id(&id)))
}

#[cfg(test)]
mod tests {
    use freshet_operators::envelope::Acl;
    use serde_json::json;

    use super::*;
    use crate::acl::FileAcls;

    fn parse(v: &Option<Vec<u8>>) -> Value {
        serde_json::from_slice(v.as_ref().unwrap()).unwrap()
    }

    #[test]
    fn beir_line_becomes_upsert() {
        let m = Mapping {
            acl: FileAcls::all(Acl::principals(["group:eng"]).unwrap()),
            ..Mapping::default()
        };
        let out = map_jsonl_line(
            r#"{"_id":"d1","title":"T \"q\"","text":"hello\nworld","metadata":{"url":"u"}}"#,
            &m,
            "beir:corpus",
        )
        .unwrap();
        assert_eq!(out.id, "d1");
        assert_eq!(out.op, Op::Upsert);
        assert_eq!(
            parse(&out.value),
            json!({"op":"upsert","id":"d1","title":"T \"q\"","text":"hello\nworld",
                   "content_type":"text/plain","source":"beir:corpus",
                   "metadata":{"url":"u"},"acl":["group:eng"]})
        );
        // Numeric id, no title/metadata.
        let out = map_jsonl_line(r#"{"_id":7,"text":"x"}"#, &m, "s").unwrap();
        assert_eq!(out.id, "7");
        assert_eq!(parse(&out.value)["title"], "");
        assert_eq!(parse(&out.value)["metadata"], json!({}));
    }

    #[test]
    fn envelopes_pass_through() {
        let m = Mapping::default();
        let up = r#"{"op":"upsert","id":"a","title":"t","text":"x","content_type":"text/html","source":"s","metadata":{},"acl":[]}"#;
        let out = map_jsonl_line(up, &m, "ignored").unwrap();
        assert_eq!(out.id, "a");
        assert_eq!(
            parse(&out.value),
            serde_json::from_str::<Value>(up).unwrap()
        );
        let out = map_jsonl_line(r#"{"op":"delete","id":"a"}"#, &m, "").unwrap();
        assert_eq!(out.op, Op::Delete);
        assert_eq!(parse(&out.value), json!({"op":"delete","id":"a"}));
    }

    /// `--acl` / `--public` and the rules reach BEIR lines and envelopes that state no ACL;
    /// an envelope's own ACL is kept.
    #[test]
    fn the_mapping_gives_unstated_acls() {
        let rules = [crate::AclRuleConfig {
            glob: "hr-*".into(),
            principals: vec!["group:hr".into()],
            public: false,
        }];
        let m = Mapping {
            acl: FileAcls::new(&rules, Acl::Public).unwrap(),
            ..Mapping::default()
        };
        let acl = |line: &str| parse(&map_jsonl_line(line, &m, "s").unwrap().value)["acl"].clone();
        assert_eq!(acl(r#"{"_id":"hr-1","text":"x"}"#), json!(["group:hr"]));
        assert_eq!(acl(r#"{"_id":"b","text":"x"}"#), json!("public"));
        assert_eq!(acl(r#"{"op":"upsert","id":"hr-2"}"#), json!(["group:hr"]));
        assert_eq!(
            acl(r#"{"op":"upsert","id":"hr-2","acl":[]}"#),
            json!(["group:hr"])
        );
        assert_eq!(
            acl(r#"{"op":"upsert","id":"c","acl":null}"#),
            json!("public")
        );
        assert_eq!(
            acl(r#"{"op":"upsert","id":"hr-3","acl":["user:x"]}"#),
            json!(["user:x"])
        );
        assert_eq!(
            acl(r#"{"op":"upsert","id":"hr-3","acl":"public"}"#),
            json!("public")
        );
        let del = map_jsonl_line(r#"{"op":"delete","id":"hr-4"}"#, &m, "s").unwrap();
        assert_eq!(parse(&del.value), json!({"op":"delete","id":"hr-4"}));
        // without any ACL configured nothing is added
        let plain = Mapping::default();
        let out = map_jsonl_line(r#"{"op":"upsert","id":"a"}"#, &plain, "s").unwrap();
        assert_eq!(parse(&out.value), json!({"op":"upsert","id":"a"}));
    }

    #[test]
    fn bad_lines_are_errors_not_panics() {
        let m = Mapping::default();
        for bad in [
            "{",
            "[]",
            "42",
            r#"{"title":"x"}"#,
            r#"{"op":"merge","id":"a"}"#,
            r#"{"op":"upsert"}"#,
            r#"{"op":"upsert","id":""}"#,
            r#"{"op":"upsert","id":5}"#,
            r#"{"_id":"a"}"#,
            r#"{"_id":"a","text":1}"#,
            r#"{"_id":"a","text":"t","metadata":[1]}"#,
            r#"{"_id":[],"text":"t"}"#,
        ] {
            assert!(map_jsonl_line(bad, &m, "s").is_err(), "{bad}");
        }
        let strict = Mapping {
            format: JsonlFormat::Beir,
            ..Mapping::default()
        };
        assert!(map_jsonl_line(r#"{"op":"delete","id":"a"}"#, &strict, "s").is_err());
    }
}
