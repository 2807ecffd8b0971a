//! Query construction without a query parser: user text is analysed into terms, filters become
//! non-scoring MUST clauses. Nothing a user types can make query construction fail.

use freshet_operators::chunk::ChunkKind;
use tantivy::query::{BooleanQuery, BoostQuery, ConstScoreQuery, Occur, Query, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::Term;

use crate::error::{Error, Result};
use crate::schema::{analyze, ChunkSchema, PRINCIPAL_PREFIX, PUBLIC_ACL_MARKER};

/// Weight of a title match relative to a body text match.
pub const TITLE_BOOST: f32 = 1.5;

/// Restrictions applied inside the query (so top-k is computed over visible chunks only).
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
    pub fn kinds<I: IntoIterator<Item = ChunkKind>>(mut self, kinds: I) -> Self {
        self.kinds = Some(kinds.into_iter().collect());
        self
    }

    /// True if the filter can match nothing (an empty `doc_ids` or `kinds` list).
    pub fn matches_nothing(&self) -> bool {
        self.doc_ids.as_ref().is_some_and(Vec::is_empty)
            || self.kinds.as_ref().is_some_and(Vec::is_empty)
    }

    /// The filter as MUST clauses (constant score 0, so they do not change BM25 scores).
    pub(crate) fn clauses(&self, s: &ChunkSchema) -> Result<Vec<Box<dyn Query>>> {
        let mut out: Vec<Box<dyn Query>> = Vec::new();
        if let Some(ids) = &self.doc_ids {
            out.push(any_of(
                ids.iter().map(|id| Term::from_field_text(s.doc_id, id)),
            ));
        }
        if let Some(kinds) = &self.kinds {
            out.push(any_of(
                kinds
                    .iter()
                    .map(|k| Term::from_field_text(s.kind, k.as_str())),
            ));
        }
        if let Some(principals) = &self.principals {
            let terms = std::iter::once(Term::from_field_text(s.acl_index, PUBLIC_ACL_MARKER))
                .chain(principals.iter().map(|p| {
                    Term::from_field_text(s.acl_index, &format!("{PRINCIPAL_PREFIX}{p}"))
                }));
            out.push(any_of(terms));
        }
        for (key, value) in &self.metadata_eq {
            out.push(filter_clause(Box::new(TermQuery::new(
                metadata_term(s, key, value)?,
                IndexRecordOption::Basic,
            ))));
        }
        Ok(out)
    }
}

/// The term of `metadata.<key> == <json value>`.
pub(crate) fn metadata_term(s: &ChunkSchema, key: &str, json_value: &str) -> Result<Term> {
    // Keys are literal top-level keys: escape the path syntax of tantivy's split_json_path.
    let escaped = key.replace('\\', "\\\\").replace('.', "\\.");
    let base = Term::from_field_json_path(s.metadata, &escaped, false);
    let value: serde_json::Value = serde_json::from_str(json_value).map_err(|e| {
        Error::InvalidFilter(format!(
            "metadata value for key {key:?} is not JSON ({e}); quote strings: \"\\\"en\\\"\""
        ))
    })?;
    match value {
        serde_json::Value::String(v) => {
            let mut t = base;
            t.append_type_and_str(&v);
            Ok(t)
        }
        serde_json::Value::Number(n) => {
            tantivy::json_utils::convert_to_fast_value_and_append_to_json_term(
                &base,
                &n.to_string(),
                false,
            )
            .ok_or_else(|| Error::InvalidFilter(format!("metadata number {n} for key {key:?}")))
        }
        serde_json::Value::Bool(b) => {
            let mut t = base;
            t.append_type_and_fast_value(b);
            Ok(t)
        }
        other => Err(Error::InvalidFilter(format!(
            "metadata value for key {key:?} must be a string, number or bool, got {other}"
        ))),
    }
}

fn filter_clause(q: Box<dyn Query>) -> Box<dyn Query> {
    Box::new(ConstScoreQuery::new(q, 0.0))
}

fn any_of(terms: impl Iterator<Item = Term>) -> Box<dyn Query> {
    let should: Vec<(Occur, Box<dyn Query>)> = terms
        .map(|t| {
            (
                Occur::Should,
                Box::new(TermQuery::new(t, IndexRecordOption::Basic)) as Box<dyn Query>,
            )
        })
        .collect();
    filter_clause(Box::new(BooleanQuery::new(should)))
}

/// The BM25 query for `text`, or `None` when analysis leaves no term (empty input, only stop
/// words or punctuation).
pub(crate) fn bm25_query(
    s: &ChunkSchema,
    text: &str,
    filter: &ChunkFilter,
) -> Result<Option<Box<dyn Query>>> {
    let terms = analyze(text);
    if terms.is_empty() {
        return Ok(None);
    }
    let mut should: Vec<(Occur, Box<dyn Query>)> = Vec::with_capacity(terms.len() * 2);
    for t in &terms {
        should.push((
            Occur::Should,
            Box::new(TermQuery::new(
                Term::from_field_text(s.text, t),
                IndexRecordOption::WithFreqs,
            )),
        ));
        should.push((
            Occur::Should,
            Box::new(BoostQuery::new(
                Box::new(TermQuery::new(
                    Term::from_field_text(s.title, t),
                    IndexRecordOption::WithFreqs,
                )),
                TITLE_BOOST,
            )),
        ));
    }
    let mut must: Vec<(Occur, Box<dyn Query>)> =
        vec![(Occur::Must, Box::new(BooleanQuery::new(should)))];
    must.extend(filter.clauses(s)?.into_iter().map(|q| (Occur::Must, q)));
    Ok(Some(Box::new(BooleanQuery::new(must))))
}
