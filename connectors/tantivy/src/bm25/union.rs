//! [`Bm25Query`]: the sum of BM25 term scores over the chunks that pass non-scoring filter
//! clauses, as one tantivy query, so that top-k collection reaches its own
//! [`Weight::for_each_pruning`] (tantivy's boolean query prunes only unions of its own term
//! scorers).
//!
//! A document's score is the sum, in query-term order, of the scores of the terms it contains;
//! the exhaustive scorer and the pruned one ([`super::prune`]) add in the same order, so they
//! give the same floats.

use std::fmt;

use tantivy::query::{EnableScoring, Explanation, Query, Scorer, Weight};
use tantivy::{DocId, DocSet, Score, SegmentReader, Term, TERMINATED};

use super::{Bm25Params, Bm25Scorer, Bm25TermQuery, Bm25TermWeight, Scorer1};

/// BM25 over `terms` (a disjunction: a document matches with any of them), restricted to the
/// documents that match `filter` (which adds nothing to the score).
pub(crate) struct Bm25Query {
    terms: Vec<Bm25TermQuery>,
    filter: Option<Box<dyn Query>>,
    scorer: Bm25Scorer,
}

impl Clone for Bm25Query {
    fn clone(&self) -> Self {
        Bm25Query {
            terms: self.terms.clone(),
            filter: self.filter.as_ref().map(|f| f.box_clone()),
            scorer: self.scorer,
        }
    }
}

impl fmt::Debug for Bm25Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bm25Query")
            .field("terms", &self.terms)
            .field("filter", &self.filter)
            .field("scorer", &self.scorer)
            .finish()
    }
}

impl Bm25Query {
    /// `terms` scored with `params`; `filter`, when given, must match (its score is ignored).
    pub(crate) fn new(
        terms: Vec<Term>,
        params: Bm25Params,
        filter: Option<Box<dyn Query>>,
        scorer: Bm25Scorer,
    ) -> Bm25Query {
        Bm25Query {
            terms: terms
                .into_iter()
                .map(|t| Bm25TermQuery::new(t, params))
                .collect(),
            filter,
            scorer,
        }
    }
}

impl Query for Bm25Query {
    fn weight(&self, enable_scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        let terms = self
            .terms
            .iter()
            .map(|t| t.term_weight(enable_scoring))
            .collect::<tantivy::Result<Vec<_>>>()?;
        let filter = match &self.filter {
            Some(f) => Some(f.weight(enable_scoring)?),
            None => None,
        };
        Ok(Box::new(Bm25UnionWeight {
            terms,
            filter,
            scorer: self.scorer,
        }))
    }

    fn query_terms<'a>(&'a self, visitor: &mut dyn FnMut(&'a Term, bool)) {
        for t in &self.terms {
            t.query_terms(visitor);
        }
        if let Some(f) = &self.filter {
            f.query_terms(visitor);
        }
    }
}

pub(super) struct Bm25UnionWeight {
    terms: Vec<Bm25TermWeight>,
    filter: Option<Box<dyn Weight>>,
    scorer: Bm25Scorer,
}

impl Bm25UnionWeight {
    /// One scorer per query term that occurs in this segment, in query-term order.
    fn term_scorers(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Vec<Scorer1>> {
        let mut out = Vec::with_capacity(self.terms.len());
        for t in &self.terms {
            if let Some(s) = t.term_scorer(reader, boost)? {
                if s.doc() != TERMINATED {
                    out.push(s);
                }
            }
        }
        Ok(out)
    }

    fn filter_scorer(&self, reader: &SegmentReader) -> tantivy::Result<Option<Box<dyn Scorer>>> {
        match &self.filter {
            Some(f) => Ok(Some(f.scorer(reader, 1.0)?)),
            None => Ok(None),
        }
    }

    fn union_scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<UnionScorer> {
        let terms = self.term_scorers(reader, boost)?;
        let filter = self.filter_scorer(reader)?;
        Ok(UnionScorer::new(terms, filter))
    }
}

impl Weight for Bm25UnionWeight {
    fn scorer(&self, reader: &SegmentReader, boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        Ok(Box::new(self.union_scorer(reader, boost)?))
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        let mut s = self.union_scorer(reader, 1.0)?;
        if s.seek(doc) != doc {
            return Err(tantivy::TantivyError::InvalidArgument(format!(
                "document {doc} does not match"
            )));
        }
        let mut e = Explanation::new("sum of bm25 term scores", s.score());
        for t in s.terms.iter_mut().filter(|t| t.doc() == doc) {
            e.add_detail(t.explain());
        }
        Ok(e)
    }

    fn for_each_pruning(
        &self,
        threshold: Score,
        reader: &SegmentReader,
        callback: &mut dyn FnMut(DocId, Score) -> Score,
    ) -> tantivy::Result<()> {
        match self.scorer {
            Bm25Scorer::Exhaustive => {
                let mut s = self.union_scorer(reader, 1.0)?;
                let mut threshold = threshold;
                let mut doc = s.doc();
                while doc != TERMINATED {
                    let score = s.score();
                    if score > threshold {
                        threshold = callback(doc, score);
                    }
                    doc = s.advance();
                }
            }
            Bm25Scorer::Pruned => {
                let terms = self.term_scorers(reader, 1.0)?;
                let filter = self.filter_scorer(reader)?;
                super::prune::max_score(terms, filter, reader.alive_bitset(), threshold, callback);
            }
        }
        Ok(())
    }
}

/// The sum over the term scorers positioned on a document, in query-term order (the score both
/// scorers give).
pub(super) fn sum_at(terms: &mut [Scorer1], doc: DocId) -> Score {
    let mut score: Score = 0.0;
    for t in terms.iter_mut() {
        if t.doc() == doc {
            score += t.score();
        }
    }
    score
}

/// Every document that contains a query term and passes the filter, in doc id order.
pub(super) struct UnionScorer {
    terms: Vec<Scorer1>,
    filter: Option<Box<dyn Scorer>>,
    doc: DocId,
}

impl UnionScorer {
    fn new(terms: Vec<Scorer1>, filter: Option<Box<dyn Scorer>>) -> UnionScorer {
        let mut s = UnionScorer {
            terms,
            filter,
            doc: 0,
        };
        s.doc = s.min_doc();
        s.align();
        s
    }

    fn min_doc(&self) -> DocId {
        self.terms
            .iter()
            .map(|t| t.doc())
            .min()
            .unwrap_or(TERMINATED)
    }

    /// Moves to the first document at or after the current one that the filter also matches.
    fn align(&mut self) -> DocId {
        let Some(filter) = self.filter.as_mut() else {
            return self.doc;
        };
        while self.doc != TERMINATED {
            let f = if filter.doc() < self.doc {
                filter.seek(self.doc)
            } else {
                filter.doc()
            };
            if f == self.doc {
                break;
            }
            for t in self.terms.iter_mut() {
                if t.doc() < f {
                    t.seek(f);
                }
            }
            self.doc = self
                .terms
                .iter()
                .map(|t| t.doc())
                .min()
                .unwrap_or(TERMINATED);
        }
        self.doc
    }
}

impl DocSet for UnionScorer {
    fn advance(&mut self) -> DocId {
        if self.doc == TERMINATED {
            return TERMINATED;
        }
        let doc = self.doc;
        for t in self.terms.iter_mut() {
            if t.doc() == doc {
                t.advance();
            }
        }
        self.doc = self.min_doc();
        self.align()
    }

    fn seek(&mut self, target: DocId) -> DocId {
        if self.doc >= target {
            return self.doc;
        }
        for t in self.terms.iter_mut() {
            if t.doc() < target {
                t.seek(target);
            }
        }
        self.doc = self.min_doc();
        self.align()
    }

    fn doc(&self) -> DocId {
        self.doc
    }

    fn size_hint(&self) -> u32 {
        self.terms.iter().map(|t| t.size_hint()).max().unwrap_or(0)
    }
}

impl Scorer for UnionScorer {
    fn score(&mut self) -> Score {
        if self.doc == TERMINATED {
            return 0.0;
        }
        sum_at(&mut self.terms, self.doc)
    }
}
