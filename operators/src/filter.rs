//! The retrieval filter both routes apply inside their search (BM25 in tantivy, vectors in
//! Milvus), so that top-k is computed over the chunks a caller may see.

use crate::chunk::ChunkKind;

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
