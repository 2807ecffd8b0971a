//! Canonical JSON: one text per JSON value (no whitespace, object keys sorted by bytes, strings
//! and numbers as `serde_json` writes them), so that equal metadata is byte-equal wherever it is
//! stored or hashed.

use serde_json::Value;

/// Canonical JSON text of a value: no whitespace, object keys sorted (by bytes), strings and
/// numbers as `serde_json` writes them. Independent of serde_json's `preserve_order` feature.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(k, out);
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::String(s) => write_json_string(s, out),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Null => out.push_str("null"),
    }
}

/// Appends `s` as a JSON string literal.
pub fn write_json_string(s: &str, out: &mut String) {
    // Serialising a &str cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_escapes_and_sorts() {
        let v: Value =
            serde_json::from_str(r#"{"b":"a\"b\n\u0001","a":[1,-2,3e2],"é":{}}"#).unwrap();
        assert_eq!(
            canonical_json(&v),
            r#"{"a":[1,-2,300.0],"b":"a\"b\n\u0001","é":{}}"#
        );
        // the canonical text parses back to the same value
        let back: Value = serde_json::from_str(&canonical_json(&v)).unwrap();
        assert_eq!(back, v);
    }
}
