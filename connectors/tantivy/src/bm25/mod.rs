//! BM25 scoring with configurable `k1` and `b`, and top-k pruning that keeps the exact top k.
//!
//! tantivy's [`TermQuery`](tantivy::query::TermQuery) scores with BM25 at fixed `k1 = 1.2`,
//! `b = 0.75`. [`Bm25TermQuery`] is the same scoring (tantivy's `Bm25StatisticsProvider`
//! statistics, the same IDF, the same quantised field lengths) with the two parameters chosen by
//! the caller. The defaults are those of Anserini and
//! Pyserini (`k1 = 0.9`, `b = 0.4`), which the published BEIR BM25 baselines use.
//!
//! The score of a document for one term is
//! `boost · idf · (k1 + 1) · tf / (tf + k1 · (1 − b + b · dl / avgdl))`
//! with `idf = ln(1 + (N − n + 0.5) / (n + 0.5))`.
//!
//! [`Bm25Query`] is the whole BM25 route: the sum over query terms, restricted to the chunks that
//! pass non-scoring filter clauses. Its top k is found by MaxScore ([`prune`]), not by scoring
//! every posting: see that module for why MaxScore over per-term bounds rather than tantivy's
//! block-max WAND, and [`Bm25Scorer`] for the exhaustive reference it must equal.

use std::fmt;
use std::sync::Arc;

use tantivy::fieldnorm::FieldNormReader;
use tantivy::postings::{Postings, SegmentPostings};
use tantivy::query::{EmptyScorer, EnableScoring, Explanation, Query, Scorer, Weight};
use tantivy::schema::IndexRecordOption;
use tantivy::{DocId, DocSet, Score, SegmentReader, Term, TERMINATED};

use crate::error::{Error, Result};

mod prune;
mod union;

pub(crate) use union::Bm25Query;

/// How [`Bm25Query`] finds its top k.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bm25Scorer {
    /// MaxScore pruning: skips the documents that cannot enter the top k. The same
    /// top k as [`Bm25Scorer::Exhaustive`]: the same documents, scores and tie order.
    #[default]
    Pruned,
    /// Scores every posting of every query term (the reference for tests and benchmarks).
    Exhaustive,
}

/// The two free parameters of BM25.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bm25Params {
    /// Term-frequency saturation: higher lets repeated terms count for more.
    pub k1: f32,
    /// Length normalisation: 0 ignores field length, 1 normalises fully.
    pub b: f32,
}

impl Default for Bm25Params {
    /// Anserini's and Pyserini's defaults (`k1 = 0.9`, `b = 0.4`).
    fn default() -> Self {
        Bm25Params { k1: 0.9, b: 0.4 }
    }
}

impl Bm25Params {
    /// Checks the ranges (`k1` finite and ≥ 0, `b` in [0, 1]).
    pub fn validate(self) -> Result<Bm25Params> {
        if !(self.k1.is_finite() && self.k1 >= 0.0) {
            return Err(Error::InvalidArgument(format!(
                "bm25 k1 must be a finite number >= 0, got {}",
                self.k1
            )));
        }
        if !(0.0..=1.0).contains(&self.b) {
            return Err(Error::InvalidArgument(format!(
                "bm25 b must be between 0 and 1, got {}",
                self.b
            )));
        }
        Ok(self)
    }
}

/// `ln(1 + (N − n + 0.5) / (n + 0.5))`.
fn idf(doc_freq: u64, doc_count: u64) -> Score {
    let n = doc_freq.min(doc_count) as Score;
    let x = (doc_count as Score - n + 0.5) / (n + 0.5);
    (1.0 + x).ln()
}

/// A single term scored with BM25 at the given parameters.
#[derive(Clone)]
pub(crate) struct Bm25TermQuery {
    term: Term,
    params: Bm25Params,
}

impl fmt::Debug for Bm25TermQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Bm25TermQuery({:?}, k1={}, b={})",
            self.term, self.params.k1, self.params.b
        )
    }
}

impl Bm25TermQuery {
    pub(crate) fn new(term: Term, params: Bm25Params) -> Bm25TermQuery {
        Bm25TermQuery { term, params }
    }
}

impl Query for Bm25TermQuery {
    fn weight(&self, enable_scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        Ok(Box::new(self.term_weight(enable_scoring)?))
    }

    fn query_terms<'a>(&'a self, visitor: &mut dyn FnMut(&'a Term, bool)) {
        visitor(&self.term, false);
    }
}

impl Bm25TermQuery {
    fn term_weight(&self, enable_scoring: EnableScoring<'_>) -> tantivy::Result<Bm25TermWeight> {
        // tantivy's statistics (a custom provider, if the caller gave one); without scoring,
        // every match scores the same.
        let (idf, avg_len) = match enable_scoring {
            EnableScoring::Enabled {
                statistics_provider: stats,
                ..
            } => {
                let docs = stats.total_num_docs()?;
                let tokens = stats.total_num_tokens(self.term.field())?;
                let avg = if docs == 0 {
                    1.0
                } else {
                    (tokens as Score / docs as Score).max(Score::MIN_POSITIVE)
                };
                (idf(stats.doc_freq(&self.term)?, docs), avg)
            }
            EnableScoring::Disabled { .. } => (1.0, 1.0),
        };
        let Bm25Params { k1, b } = self.params;
        let mut norm = [0.0 as Score; 256];
        for (id, slot) in norm.iter_mut().enumerate() {
            let len = FieldNormReader::id_to_fieldnorm(id as u8) as Score;
            *slot = k1 * (1.0 - b + b * len / avg_len);
        }
        Ok(Bm25TermWeight {
            term: self.term.clone(),
            weight: idf * (k1 + 1.0),
            norm: Arc::new(norm),
        })
    }
}

struct Bm25TermWeight {
    term: Term,
    /// `idf · (k1 + 1)`: no document scores more for this term (`tf / (tf + norm) ≤ 1`).
    weight: Score,
    /// `k1 · (1 − b + b · dl / avgdl)` per quantised field length id.
    norm: Arc<[Score; 256]>,
}

impl Bm25TermWeight {
    fn term_scorer(
        &self,
        reader: &SegmentReader,
        boost: Score,
    ) -> tantivy::Result<Option<Scorer1>> {
        let field = self.term.field();
        let postings = reader
            .inverted_index(field)?
            .read_postings(&self.term, IndexRecordOption::WithFreqs)?;
        Ok(match postings {
            Some(postings) => Some(Scorer1 {
                postings,
                fieldnorms: reader.get_fieldnorms_reader(field)?,
                weight: self.weight * boost,
                norm: self.norm.clone(),
            }),
            None => None,
        })
    }
}

impl Weight for Bm25TermWeight {
    fn scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        Ok(match self.term_scorer(reader, boost)? {
            Some(s) => Box::new(s),
            None => Box::new(EmptyScorer),
        })
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        let not_matching =
            || tantivy::TantivyError::InvalidArgument(format!("document {doc} does not match"));
        let mut s = self.term_scorer(reader, 1.0)?.ok_or_else(not_matching)?;
        if s.seek(doc) != doc {
            return Err(not_matching());
        }
        Ok(s.explain())
    }
}

/// Scores one term's postings in one segment.
struct Scorer1 {
    postings: SegmentPostings,
    fieldnorms: FieldNormReader,
    weight: Score,
    norm: Arc<[Score; 256]>,
}

impl DocSet for Scorer1 {
    fn advance(&mut self) -> DocId {
        self.postings.advance()
    }
    fn seek(&mut self, target: DocId) -> DocId {
        self.postings.seek(target)
    }
    fn doc(&self) -> DocId {
        self.postings.doc()
    }
    fn size_hint(&self) -> u32 {
        self.postings.size_hint()
    }
}

impl Scorer1 {
    /// The most this term adds to any document's score: `weight · tf / (tf + norm)` with
    /// `tf / (tf + norm) ≤ 1`.
    fn upper_bound(&self) -> Score {
        self.weight
    }

    fn explain(&mut self) -> Explanation {
        let mut e = Explanation::new("bm25 (freshet k1/b)", self.score());
        e.add_detail(Explanation::new("idf·(k1+1)", self.weight));
        e.add_detail(Explanation::new("tf", self.postings.term_freq() as Score));
        e
    }
}

impl Scorer for Scorer1 {
    fn score(&mut self) -> Score {
        let doc = self.postings.doc();
        if doc == TERMINATED {
            return 0.0;
        }
        let tf = self.postings.term_freq() as Score;
        let norm = self.norm[self.fieldnorms.fieldnorm_id(doc) as usize];
        self.weight * tf / (tf + norm)
    }
}

#[cfg(test)]
mod prune_tests;
#[cfg(test)]
mod tests;
