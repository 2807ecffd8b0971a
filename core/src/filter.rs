//! The retrieval filter both routes apply inside their search (BM25 in tantivy, vectors in
//! Milvus), so that top-k is computed over the chunks a caller may see.

use serde_json::Value;

use crate::chunk::{Chunk, ChunkKind};

/// Restrictions applied inside a search (so top-k is computed over visible chunks only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkFilter {
    /// Only chunks of these documents. `Some(vec![])` matches nothing.
    pub doc_ids: Option<Vec<String>>,
    /// The caller's principals. A chunk is visible iff its `acl` is empty or intersects these.
    /// `None` means no ACL check at all (trusted callers); `Some(vec![])` sees public chunks only.
    pub principals: Option<Vec<String>>,
    /// Top-level metadata key equals a JSON value, given as JSON text: `("lang", "\"en\"")`,
    /// `("year", "2020")`, `("draft", "false")`. Strings match exactly (case-sensitive); numbers
    /// match numerically (`2020` == `2020.0`); a value also matches an array element of that key.
    /// All pairs must hold.
    pub metadata_eq: Vec<(String, String)>,
    /// Top-level metadata key equals any of these JSON values (same matching as `metadata_eq`).
    /// All keys must hold; an empty value list matches nothing.
    pub metadata_in: Vec<(String, Vec<String>)>,
    /// Only chunks whose document `source` is one of these. `Some(vec![])` matches nothing.
    pub sources: Option<Vec<String>>,
    /// Only chunks of these kinds. `Some(vec![])` matches nothing.
    pub kinds: Option<Vec<ChunkKind>>,
}

impl ChunkFilter {
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
    pub fn metadata_in<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        key: impl Into<String>,
        json_values: I,
    ) -> Self {
        self.metadata_in.push((
            key.into(),
            json_values.into_iter().map(Into::into).collect(),
        ));
        self
    }
    pub fn sources<I: IntoIterator<Item = S>, S: Into<String>>(mut self, sources: I) -> Self {
        self.sources = Some(sources.into_iter().map(Into::into).collect());
        self
    }
    pub fn kinds<I: IntoIterator<Item = ChunkKind>>(mut self, kinds: I) -> Self {
        self.kinds = Some(kinds.into_iter().collect());
        self
    }

    /// True if the filter can match nothing (an empty `doc_ids`, `sources`, `kinds` or `metadata_in` list).
    pub fn matches_nothing(&self) -> bool {
        self.doc_ids.as_ref().is_some_and(Vec::is_empty)
            || self.kinds.as_ref().is_some_and(Vec::is_empty)
            || self.sources.as_ref().is_some_and(Vec::is_empty)
            || self.metadata_in.iter().any(|(_, v)| v.is_empty())
    }
}

impl ChunkFilter {
    /// Whether `chunk` passes the filter: the plain statement of what the index translations
    /// (tantivy's filter clauses, Milvus' boolean expression) compute inside their searches, and
    /// the reference they are tested against.
    ///
    /// A metadata condition holds when the chunk's top-level `key` equals the value, or is an
    /// array with an element equal to it: strings and booleans exactly, numbers numerically
    /// (`2020` equals `2020.0`). A condition value that is not a string, number or boolean (the
    /// translations refuse it) matches nothing.
    pub fn matches(&self, chunk: &Chunk) -> bool {
        if self
            .doc_ids
            .as_ref()
            .is_some_and(|ids| !ids.contains(&chunk.doc_id))
        {
            return false;
        }
        if self
            .sources
            .as_ref()
            .is_some_and(|s| !s.contains(&chunk.source))
        {
            return false;
        }
        if self
            .kinds
            .as_ref()
            .is_some_and(|k| !k.contains(&chunk.kind))
        {
            return false;
        }
        if let Some(p) = &self.principals {
            if !chunk.acl.is_empty() && !chunk.acl.iter().any(|a| p.contains(a)) {
                return false;
            }
        }
        if self.metadata_eq.is_empty() && self.metadata_in.is_empty() {
            return true;
        }
        let metadata: serde_json::Map<String, Value> =
            serde_json::from_str(&chunk.metadata_json).unwrap_or_default();
        let holds = |key: &str, json_value: &str| {
            let Ok(wanted) = serde_json::from_str::<Value>(json_value) else {
                return false;
            };
            match metadata.get(key) {
                Some(Value::Array(items)) => items.iter().any(|v| scalar_eq(v, &wanted)),
                Some(v) => scalar_eq(v, &wanted),
                None => false,
            }
        };
        self.metadata_eq.iter().all(|(k, v)| holds(k, v))
            && self
                .metadata_in
                .iter()
                .all(|(k, vs)| vs.iter().any(|v| holds(k, v)))
    }
}

/// Equality of two JSON scalars as the filters mean it (see [`ChunkFilter::matches`]).
fn scalar_eq(stored: &Value, wanted: &Value) -> bool {
    match (stored, wanted) {
        (Value::String(a), Value::String(b)) => a == b,
        (Value::Bool(a), Value::Bool(b)) => a == b,
        (Value::Number(a), Value::Number(b)) => match (a.as_i64(), b.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (a.as_u64(), b.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => a.as_f64() == b.as_f64(),
            },
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(doc: &str, kind: ChunkKind, acl: &[&str], source: &str, metadata: &str) -> Chunk {
        Chunk {
            kind,
            source: source.into(),
            metadata_json: metadata.into(),
            acl: acl.iter().map(|s| s.to_string()).collect(),
            ..crate::testing::chunk(doc, "t")
        }
    }

    #[test]
    fn each_condition_and_their_conjunction() {
        let c = chunk(
            "d1",
            ChunkKind::Leaf,
            &["group:a"],
            "s3://x",
            r#"{"lang":"en","year":2020,"tags":["x","y"],"draft":false,"score":1.5}"#,
        );
        let f = ChunkFilter::none;
        assert!(f().matches(&c));
        assert!(f().doc_ids(["d1", "d2"]).matches(&c));
        assert!(!f().doc_ids(["d2"]).matches(&c));
        assert!(!f().doc_ids(Vec::<String>::new()).matches(&c));
        assert!(f().sources(["s3://x"]).matches(&c));
        assert!(!f().sources(["s3://y"]).matches(&c));
        assert!(f().kinds([ChunkKind::Leaf]).matches(&c));
        assert!(!f().kinds([ChunkKind::Parent]).matches(&c));
        assert!(f().principals(["group:a", "group:b"]).matches(&c));
        assert!(!f().principals(["group:b"]).matches(&c));
        assert!(!f().principals(Vec::<String>::new()).matches(&c));
        assert!(f().metadata_eq("lang", "\"en\"").matches(&c));
        assert!(!f().metadata_eq("lang", "\"EN\"").matches(&c));
        assert!(f().metadata_eq("year", "2020.0").matches(&c));
        assert!(!f().metadata_eq("year", "\"2020\"").matches(&c));
        assert!(
            f().metadata_eq("tags", "\"y\"").matches(&c),
            "an array element"
        );
        assert!(f().metadata_eq("draft", "false").matches(&c));
        assert!(f().metadata_eq("score", "1.5").matches(&c));
        assert!(!f().metadata_eq("missing", "1").matches(&c));
        assert!(!f().metadata_eq("lang", "not json").matches(&c));
        assert!(
            !f().metadata_eq("tags", "[\"x\",\"y\"]").matches(&c),
            "not a scalar"
        );
        assert!(f().metadata_in("year", ["2019", "2020"]).matches(&c));
        assert!(!f().metadata_in("year", ["2019"]).matches(&c));
        assert!(!f().metadata_in("year", Vec::<String>::new()).matches(&c));
        let all = f()
            .doc_ids(["d1"])
            .principals(["group:a"])
            .metadata_eq("lang", "\"en\"")
            .metadata_in("tags", ["\"z\"", "\"x\""]);
        assert!(all.matches(&c));
        assert!(!all.clone().metadata_eq("draft", "true").matches(&c));
        // a public chunk is visible to every caller
        let public = chunk("d2", ChunkKind::Parent, &[], "", "{}");
        assert!(f().principals(Vec::<String>::new()).matches(&public));
    }
}
