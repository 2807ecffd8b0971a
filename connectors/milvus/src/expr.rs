//! Milvus boolean expressions built from values, with string escaping that both Milvus 2.3.5
//! (ANTLR grammar + Go `strconv.Unquote`) and milvus-lite 3.2.2 (its own tokenizer) read back
//! to the original string.
//!
//! The common subset of the two parsers: inside a double-quoted literal, `\"`, `\\`, `\n`, `\r`
//! and `\t` are the only escapes both accept (lite rejects `\u`, `\x`, octal); a raw newline or
//! carriage return is rejected by both; every other character, including NUL and other control
//! characters, may appear raw.

use crate::error::{Error, Result};
use crate::schema::{F_ACL, F_ACL_PUBLIC, F_CHUNK_ID, F_DOC_ID, F_METADATA, F_SOURCE};
use freshet_core::chunk::ChunkKind;

/// `s` as a double-quoted Milvus string literal.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `[ "a", "b" ]` as a Milvus list literal.
pub fn quote_list<S: AsRef<str>>(items: &[S]) -> String {
    let mut out = String::from("[");
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&quote(s.as_ref()));
    }
    out.push(']');
    out
}

/// `field in ["a","b"]`.
pub fn in_list<S: AsRef<str>>(field: &str, items: &[S]) -> String {
    format!("{field} in {}", quote_list(items))
}

pub use freshet_core::filter::ChunkFilter;

/// The filter as a Milvus boolean expression (empty string: no filter).
pub fn filter_expr(f: &ChunkFilter) -> Result<String> {
    let mut parts: Vec<String> = Vec::new();
    if let Some(ids) = &f.doc_ids {
        parts.push(in_list(F_DOC_ID, ids));
    }
    if let Some(sources) = &f.sources {
        parts.push(in_list(F_SOURCE, sources));
    }
    // The collection holds leaf chunks only (the sink refuses parents: they have no vector), so
    // a kind condition that admits leaves is always true and is left out: evaluated per row it
    // cost Milvus 2.3.5 about 1.8 ms of an 8 ms search over 107k chunks. One that excludes
    // leaves matches nothing ([`excludes_all_stored`]).
    // Public chunks through the boolean column the sink writes with the ACL (cheaper per row
    // than `array_length(acl) == 0`), the others by their ACL entries.
    if let Some(p) = &f.principals {
        if p.is_empty() {
            parts.push(format!("{F_ACL_PUBLIC} == true"));
        } else {
            parts.push(format!(
                "{F_ACL_PUBLIC} == true or array_contains_any({F_ACL}, {})",
                quote_list(p)
            ));
        }
    }
    for (key, value) in &f.metadata_eq {
        parts.push(metadata_eq_expr(key, value)?);
    }
    for (key, values) in &f.metadata_in {
        parts.push(metadata_in_expr(key, values)?);
    }
    Ok(match parts.len() {
        0 => String::new(),
        1 => parts.pop().expect("one part"),
        _ => parts
            .iter()
            .map(|p| format!("({p})"))
            .collect::<Vec<_>>()
            .join(" and "),
    })
}

/// True if `f` can match no row of a collection that holds only leaf chunks: it matches nothing
/// at all, or its kinds leave leaves out.
pub fn excludes_all_stored(f: &ChunkFilter) -> bool {
    f.matches_nothing()
        || f.kinds
            .as_ref()
            .is_some_and(|k| !k.contains(&ChunkKind::Leaf))
}

/// `metadata["key"]` equal to a JSON value given as text, or an array holding it:
/// `metadata["key"] == v or json_contains(metadata["key"], v)` (to be parenthesised by the
/// caller), as tantivy's JSON index (which
/// indexes every array element) and `ChunkFilter::matches` mean it. `==` alone compares a whole
/// array; `json_contains` alone looks only into arrays (both Milvus 2.3.5 and milvus-lite).
fn metadata_eq_expr(key: &str, json_value: &str) -> Result<String> {
    let field = format!("{F_METADATA}[{}]", quote(key));
    let v = metadata_literal(key, json_value)?;
    Ok(format!("{field} == {v} or json_contains({field}, {v})"))
}

/// `metadata["key"]` equal to any of the JSON values given as text: equalities joined by `or`
/// as a balanced tree, `((a or b) or (c or d))`.
///
/// The forms that look simpler fail on one of the two servers: milvus-lite 3.2.2 accepts `in`
/// only on a plain field ("left side of 'in' must be a field reference"), Milvus 2.3.5 rejects a
/// JSON `in` list mixing types, and a vector search on 2.3.5 fails on a flat `or` chain of 50
/// or more terms (a nesting limit: 48 work; probed by hand). A balanced tree of 256 equalities
/// nests 8 deep and works on both.
fn metadata_in_expr(key: &str, json_values: &[String]) -> Result<String> {
    let equalities = json_values
        .iter()
        .map(|v| metadata_eq_expr(key, v))
        .collect::<Result<Vec<_>>>()?;
    Ok(match equalities.len() {
        0 => "false".to_owned(),
        _ => balanced_or(&equalities),
    })
}

/// `items` joined by `or` as a balanced binary tree (each inner node parenthesised).
fn balanced_or(items: &[String]) -> String {
    match items {
        [one] => one.clone(),
        _ => {
            let (left, right) = items.split_at(items.len() / 2);
            format!("({} or {})", balanced_or(left), balanced_or(right))
        }
    }
}

/// A JSON value given as text as a Milvus literal.
fn metadata_literal(key: &str, json_value: &str) -> Result<String> {
    let value: serde_json::Value = serde_json::from_str(json_value).map_err(|e| {
        Error::InvalidFilter(format!(
            "metadata value for key {key:?} is not JSON ({e}); quote strings: \"\\\"en\\\"\""
        ))
    })?;
    Ok(match value {
        serde_json::Value::String(s) => quote(&s),
        serde_json::Value::Bool(b) => b.to_string(),
        serde_json::Value::Number(n) => {
            if n.is_i64() {
                n.to_string()
            } else if n.is_u64() {
                // Milvus reads an integer literal as int64: a larger one fails the whole search.
                return Err(Error::InvalidFilter(format!(
                    "metadata number {n} for key {key:?} is beyond the 64-bit signed range"
                )));
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if !f.is_finite() {
                    return Err(Error::InvalidFilter(format!("metadata number {n}")));
                }
                // Plain decimal notation (no exponent): both parsers read it.
                let mut s = format!("{f}");
                if !s.contains('.') {
                    s.push_str(".0");
                }
                s
            }
        }
        other => {
            return Err(Error::InvalidFilter(format!(
                "metadata value for key {key:?} must be a string, number or bool, got {other}"
            )))
        }
    })
}

/// `chunk_id in [...]` for a batch of ids.
pub(crate) fn ids_expr<S: AsRef<str>>(ids: &[S]) -> String {
    in_list(F_CHUNK_ID, ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote("plain"), r#""plain""#);
        assert_eq!(quote(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(quote("n\nr\rt\t"), r#""n\nr\rt\t""#);
        assert_eq!(quote("nul\0é🎉'"), "\"nul\0é🎉'\"");
        assert_eq!(quote(""), r#""""#);
        assert_eq!(quote_list(&["a", "\""]), r#"["a","\""]"#);
        assert_eq!(quote_list::<&str>(&[]), "[]");
    }

    /// What `metadata_eq_expr` writes for `key` and a literal.
    fn eq(key: &str, v: &str) -> String {
        format!("metadata[{key}] == {v} or json_contains(metadata[{key}], {v})")
    }

    #[test]
    fn filter_exprs() {
        assert_eq!(filter_expr(&ChunkFilter::none()).unwrap(), "");
        assert_eq!(
            filter_expr(&ChunkFilter::none().doc_ids(["d1"])).unwrap(),
            r#"doc_id in ["d1"]"#
        );
        assert_eq!(
            filter_expr(&ChunkFilter::none().sources(["a/b.md", "c\"d"])).unwrap(),
            r#"source in ["a/b.md","c\"d"]"#
        );
        assert_eq!(
            filter_expr(&ChunkFilter::none().principals(Vec::<String>::new())).unwrap(),
            "acl_public == true"
        );
        assert_eq!(
            filter_expr(
                &ChunkFilter::none()
                    .principals(["g\"1"])
                    .metadata_eq("la\"ng", r#""e\"n""#)
                    .metadata_eq("year", "2020")
                    .metadata_eq("score", "0.5")
                    .metadata_eq("big", "1e3")
                    .metadata_eq("draft", "false")
                    .kinds([ChunkKind::Leaf])
            )
            .unwrap(),
            format!(
                r#"(acl_public == true or array_contains_any(acl, ["g\"1"])) and ({}) and ({}) and ({}) and ({}) and ({})"#,
                eq(r#""la\"ng""#, r#""e\"n""#),
                eq(r#""year""#, "2020"),
                eq(r#""score""#, "0.5"),
                eq(r#""big""#, "1000.0"),
                eq(r#""draft""#, "false"),
            )
        );
        assert_eq!(
            filter_expr(
                &ChunkFilter::none()
                    .metadata_eq("a", "1")
                    .metadata_in("lang", [r#""en""#, r#""fr""#])
            )
            .unwrap(),
            format!(
                r#"({}) and (({} or {}))"#,
                eq(r#""a""#, "1"),
                eq(r#""lang""#, r#""en""#),
                eq(r#""lang""#, r#""fr""#)
            )
        );
        assert_eq!(
            filter_expr(
                &ChunkFilter::none().metadata_in("k", [r#""a""#, "1", "true", "2.5", "1e3"])
            )
            .unwrap(),
            format!(
                "(({} or {}) or ({} or ({} or {})))",
                eq(r#""k""#, r#""a""#),
                eq(r#""k""#, "1"),
                eq(r#""k""#, "true"),
                eq(r#""k""#, "2.5"),
                eq(r#""k""#, "1000.0")
            )
        );
        let many: Vec<String> = (0..256).map(|i| i.to_string()).collect();
        let e = filter_expr(&ChunkFilter::none().metadata_in("k", many)).unwrap();
        let depth = e
            .chars()
            .scan(0i32, |d, c| {
                *d += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                Some(*d)
            })
            .max();
        assert_eq!(
            depth,
            Some(9),
            "8 levels of `or` plus json_contains' own parentheses"
        );
        assert_eq!(e.matches(" or ").count(), 255 + 256);
        assert!(filter_expr(&ChunkFilter::none().metadata_in("k", ["en"])).is_err());
        assert!(ChunkFilter::none()
            .metadata_in("k", Vec::<String>::new())
            .matches_nothing());
        assert!(filter_expr(&ChunkFilter::none().metadata_eq("k", "en")).is_err());
        assert!(filter_expr(&ChunkFilter::none().metadata_eq("k", "[1]")).is_err());
        assert!(filter_expr(&ChunkFilter::none().metadata_eq("k", "null")).is_err());
        assert!(ChunkFilter::none()
            .doc_ids(Vec::<String>::new())
            .matches_nothing());
    }

    #[test]
    fn kinds_against_a_leaf_only_collection() {
        let leaf = ChunkFilter::none().kinds([ChunkKind::Leaf]);
        assert_eq!(filter_expr(&leaf).unwrap(), "");
        assert!(!excludes_all_stored(&leaf));
        assert!(!excludes_all_stored(
            &ChunkFilter::none().kinds([ChunkKind::Parent, ChunkKind::Leaf])
        ));
        assert!(excludes_all_stored(
            &ChunkFilter::none().kinds([ChunkKind::Parent])
        ));
        assert!(excludes_all_stored(&ChunkFilter::none().kinds([])));
        assert!(excludes_all_stored(
            &ChunkFilter::none().doc_ids(Vec::<String>::new())
        ));
        assert!(!excludes_all_stored(&ChunkFilter::none()));
    }

    /// Found by fuzzing the query node: an integer above i64::MAX made Milvus refuse to parse
    /// the whole expression (a 503, and the node marked Milvus failed); it is an invalid filter.
    #[test]
    fn integers_beyond_int64_are_an_invalid_filter() {
        let f = |v: &str| filter_expr(&ChunkFilter::none().metadata_eq("n", v));
        assert_eq!(
            f("9223372036854775807").unwrap(),
            eq(r#""n""#, "9223372036854775807")
        );
        assert_eq!(
            f("-9223372036854775808").unwrap(),
            eq(r#""n""#, "-9223372036854775808")
        );
        assert!(matches!(
            f("9223372036854775808"),
            Err(Error::InvalidFilter(_))
        ));
        assert!(matches!(
            f("18446744073709551615"),
            Err(Error::InvalidFilter(_))
        ));
    }
}
