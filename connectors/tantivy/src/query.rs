//! Query construction without a query parser: user text is analysed into terms, filters become
//! non-scoring MUST clauses. Nothing a user types can make query construction fail.
//!
//! The BM25 query is a [`Bm25Query`]: the sum of BM25 term scores (the caller's [`Bm25Params`])
//! over the documents with any of the terms, restricted to those that pass the filter. Its terms:
//!
//! - the terms of the English analyzer ([`crate::ANALYZER_NAME`], stemmed) over `body` (title,
//!   section path and text as one field), for every query. One field rather than a sum over
//!   `title` and `text` is what Pyserini calls a "flat" index; on SciFact it scored nDCG@10
//!   0.689 against 0.663 for the sum (both at k1 1.2, b 0.75; see the README);
//! - for a query in a CJK script ([`CjkScripts`], the rule that routes chunks), also the terms
//!   of that script's analyzer over its text and title fields, weighted equally (as in
//!   Pyserini's multifield runs): a query with kana is Japanese ([`crate::JA_ANALYZER_NAME`]
//!   over `text_ja` / `title_ja`); a query of Han without kana is Chinese or Japanese (a
//!   Japanese question can be all kanji: 富士山 高さ), so it is analysed with both and searched
//!   in both pairs of fields (an index without Japanese chunks has empty Japanese fields); a
//!   query with Hangul also gets the Korean bigrams over `text_ko` / `title_ko`. A mixed query
//!   such as `BERT 模型` thus matches English chunks through `body` and Chinese ones through
//!   `text_zh`.
//!
//! A query whose analysis leaves no term (empty, stop words or punctuation only) matches nothing.

use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, Query, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::Term;

use crate::analyzers::{analyze, analyze_ja, analyze_ko, analyze_zh, CjkScripts};
use crate::bm25::{Bm25Params, Bm25Query, Bm25Scorer};
use crate::error::{Error, Result};
use crate::schema::{ChunkSchema, PRINCIPAL_PREFIX, PUBLIC_ACL_MARKER};

pub use freshet_core::filter::ChunkFilter;

/// The filter as MUST clauses (constant score 0, so they do not change BM25 scores).
pub(crate) fn filter_clauses(f: &ChunkFilter, s: &ChunkSchema) -> Result<Vec<Box<dyn Query>>> {
    let mut out: Vec<Box<dyn Query>> = Vec::new();
    if let Some(ids) = &f.doc_ids {
        out.push(any_of(
            ids.iter().map(|id| Term::from_field_text(s.doc_id, id)),
        ));
    }
    if let Some(sources) = &f.sources {
        out.push(any_of(
            sources.iter().map(|v| Term::from_field_text(s.source, v)),
        ));
    }
    if let Some(kinds) = &f.kinds {
        out.push(any_of(
            kinds
                .iter()
                .map(|k| Term::from_field_text(s.kind, k.as_str())),
        ));
    }
    if let Some(principals) = &f.principals {
        let terms = std::iter::once(Term::from_field_text(s.acl_index, PUBLIC_ACL_MARKER)).chain(
            principals
                .iter()
                .map(|p| Term::from_field_text(s.acl_index, &format!("{PRINCIPAL_PREFIX}{p}"))),
        );
        out.push(any_of(terms));
    }
    for (key, value) in &f.metadata_eq {
        out.push(filter_clause(Box::new(TermQuery::new(
            metadata_term(s, key, value)?,
            IndexRecordOption::Basic,
        ))));
    }
    for (key, values) in &f.metadata_in {
        let terms = values
            .iter()
            .map(|v| metadata_term(s, key, v))
            .collect::<Result<Vec<_>>>()?;
        out.push(any_of(terms.into_iter()));
    }
    Ok(out)
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
    params: Bm25Params,
    scorer: Bm25Scorer,
) -> Result<Option<Box<dyn Query>>> {
    let scripts = CjkScripts::of([text]);
    let when = |yes: bool, analyze: fn(&str) -> Vec<String>| {
        if yes {
            analyze(text)
        } else {
            Vec::new()
        }
    };
    let en_terms = analyze(text);
    let zh_terms = when(scripts.chinese(), analyze_zh);
    let ja_terms = when(scripts.han || scripts.kana, analyze_ja);
    let ko_terms = when(scripts.korean(), analyze_ko);
    let mut terms: Vec<Term> = Vec::new();
    for t in &en_terms {
        terms.push(Term::from_field_text(s.body, t));
    }
    for (script_terms, text_field, title_field) in [
        (&zh_terms, s.text_zh, s.title_zh),
        (&ja_terms, s.text_ja, s.title_ja),
        (&ko_terms, s.text_ko, s.title_ko),
    ] {
        for t in script_terms {
            terms.push(Term::from_field_text(text_field, t));
            terms.push(Term::from_field_text(title_field, t));
        }
    }
    if terms.is_empty() {
        return Ok(None);
    }
    let must: Vec<(Occur, Box<dyn Query>)> = filter_clauses(filter, s)?
        .into_iter()
        .map(|q| (Occur::Must, q))
        .collect();
    let filter = (!must.is_empty()).then(|| Box::new(BooleanQuery::new(must)) as Box<dyn Query>);
    Ok(Some(Box::new(Bm25Query::new(
        terms, params, filter, scorer,
    ))))
}
