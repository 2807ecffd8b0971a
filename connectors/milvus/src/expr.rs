//! Milvus boolean expressions built from values, with string escaping that both Milvus 2.3.5
//! (ANTLR grammar + Go `strconv.Unquote`) and milvus-lite 3.2.2 (its own tokenizer) read back
//! to the original string.
//!
//! The common subset of the two parsers: inside a double-quoted literal, `\"`, `\\`, `\n`, `\r`
//! and `\t` are the only escapes both accept (lite rejects `\u`, `\x`, octal); a raw newline or
//! carriage return is rejected by both; every other character, including NUL and other control
//! characters, may appear raw.

use freshet_operators::chunk::ChunkKind;

use crate::error::{Error, Result};
use crate::schema::{F_ACL, F_CHUNK_ID, F_DOC_ID, F_KIND, F_METADATA};

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

/// Restrictions evaluated inside Milvus during the vector search (before top-k).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VectorFilter {
    /// Only chunks of these documents. `Some(vec![])` matches nothing.
    pub doc_ids: Option<Vec<String>>,
    /// The caller's principals: a chunk is visible iff its ACL is empty or intersects these.
    /// `None` skips the ACL check (trusted callers); `Some(vec![])` sees public chunks only.
    pub principals: Option<Vec<String>>,
    /// Top-level metadata key equals a JSON value given as JSON text: `("lang", "\"en\"")`,
    /// `("year", "2020")`, `("draft", "false")`. All pairs must hold.
    pub metadata_eq: Vec<(String, String)>,
    /// Only chunks of these kinds. `Some(vec![])` matches nothing.
    pub kinds: Option<Vec<ChunkKind>>,
}

impl VectorFilter {
    /// No restriction.
    pub fn none() -> Self {
        Self::default()
    }
    pub fn doc_ids<I: IntoIterator<Item = S>, S: Into<String>>(mut self, ids: I) -> Self {
        self.doc_ids = Some(ids.into_iter().map(Into::into).collect());
        self
    }
    pub fn principals<I: IntoIterator<Item = S>, S: Into<String>>(mut self, p: I) -> Self {
        self.principals = Some(p.into_iter().map(Into::into).collect());
        self
    }
    pub fn metadata_eq(mut self, key: impl Into<String>, json_value: impl Into<String>) -> Self {
        self.metadata_eq.push((key.into(), json_value.into()));
        self
    }
    pub fn kinds<I: IntoIterator<Item = ChunkKind>>(mut self, kinds: I) -> Self {
        self.kinds = Some(kinds.into_iter().collect());
        self
    }

    /// True if the filter can match nothing (an empty `doc_ids` or `kinds` list).
    pub fn matches_nothing(&self) -> bool {
        self.doc_ids.as_ref().is_some_and(Vec::is_empty)
            || self.kinds.as_ref().is_some_and(Vec::is_empty)
    }

    /// The filter as a Milvus boolean expression (empty string: no filter).
    pub fn to_expr(&self) -> Result<String> {
        let mut parts: Vec<String> = Vec::new();
        if let Some(ids) = &self.doc_ids {
            parts.push(in_list(F_DOC_ID, ids));
        }
        if let Some(kinds) = &self.kinds {
            let k: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
            parts.push(in_list(F_KIND, &k));
        }
        if let Some(p) = &self.principals {
            if p.is_empty() {
                parts.push(format!("array_length({F_ACL}) == 0"));
            } else {
                parts.push(format!(
                    "array_length({F_ACL}) == 0 or array_contains_any({F_ACL}, {})",
                    quote_list(p)
                ));
            }
        }
        for (key, value) in &self.metadata_eq {
            parts.push(metadata_eq_expr(key, value)?);
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
}

/// `metadata["key"] == <literal>` for a JSON value given as text.
fn metadata_eq_expr(key: &str, json_value: &str) -> Result<String> {
    let value: serde_json::Value = serde_json::from_str(json_value).map_err(|e| {
        Error::InvalidFilter(format!(
            "metadata value for key {key:?} is not JSON ({e}); quote strings: \"\\\"en\\\"\""
        ))
    })?;
    let literal = match value {
        serde_json::Value::String(s) => quote(&s),
        serde_json::Value::Bool(b) => b.to_string(),
        serde_json::Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                n.to_string()
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
    };
    Ok(format!("{F_METADATA}[{}] == {literal}", quote(key)))
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

    #[test]
    fn filter_exprs() {
        assert_eq!(VectorFilter::none().to_expr().unwrap(), "");
        assert_eq!(
            VectorFilter::none().doc_ids(["d1"]).to_expr().unwrap(),
            r#"doc_id in ["d1"]"#
        );
        assert_eq!(
            VectorFilter::none()
                .principals(Vec::<String>::new())
                .to_expr()
                .unwrap(),
            "array_length(acl) == 0"
        );
        assert_eq!(
            VectorFilter::none()
                .principals(["g\"1"])
                .metadata_eq("la\"ng", r#""e\"n""#)
                .metadata_eq("year", "2020")
                .metadata_eq("score", "0.5")
                .metadata_eq("big", "1e3")
                .metadata_eq("draft", "false")
                .kinds([ChunkKind::Leaf])
                .to_expr()
                .unwrap(),
            r#"(kind in ["leaf"]) and (array_length(acl) == 0 or array_contains_any(acl, ["g\"1"])) and (metadata["la\"ng"] == "e\"n") and (metadata["year"] == 2020) and (metadata["score"] == 0.5) and (metadata["big"] == 1000.0) and (metadata["draft"] == false)"#
        );
        assert!(VectorFilter::none()
            .metadata_eq("k", "en")
            .to_expr()
            .is_err());
        assert!(VectorFilter::none()
            .metadata_eq("k", "[1]")
            .to_expr()
            .is_err());
        assert!(VectorFilter::none()
            .metadata_eq("k", "null")
            .to_expr()
            .is_err());
        assert!(VectorFilter::none()
            .doc_ids(Vec::<String>::new())
            .matches_nothing());
    }
}
