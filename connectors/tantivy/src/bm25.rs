//! BM25 term scoring with configurable `k1` and `b`.
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

use std::fmt;
use std::sync::Arc;

use tantivy::fieldnorm::FieldNormReader;
use tantivy::postings::{Postings, SegmentPostings};
use tantivy::query::{EmptyScorer, EnableScoring, Explanation, Query, Scorer, Weight};
use tantivy::schema::IndexRecordOption;
use tantivy::{DocId, DocSet, Score, SegmentReader, Term, TERMINATED};

use crate::error::{Error, Result};

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
        Ok(Box::new(Bm25TermWeight {
            term: self.term.clone(),
            weight: idf * (k1 + 1.0),
            norm: Arc::new(norm),
        }))
    }

    fn query_terms<'a>(&'a self, visitor: &mut dyn FnMut(&'a Term, bool)) {
        visitor(&self.term, false);
    }
}

struct Bm25TermWeight {
    term: Term,
    /// `idf · (k1 + 1)`.
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
        let mut e = Explanation::new("bm25 (freshet k1/b)", s.score());
        e.add_detail(Explanation::new("idf·(k1+1)", self.weight));
        e.add_detail(Explanation::new("tf", s.postings.term_freq() as Score));
        Ok(e)
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
mod tests {
    use super::*;
    use tantivy::collector::TopDocs;
    use tantivy::query::TermQuery;
    use tantivy::schema::{Schema, TEXT};
    use tantivy::{doc, Index};

    /// Four documents of lengths 2, 4, 6, 1 (avgdl 3.25); "apple" in 3 of them.
    const FRUIT: [&str; 4] = [
        "apple banana",
        "apple apple apple cherry",
        "banana cherry date elder fig grape",
        "apple",
    ];

    fn index(texts: &[&str]) -> (Index, tantivy::schema::Field) {
        let mut b = Schema::builder();
        let f = b.add_text_field("t", TEXT);
        let index = Index::create_in_ram(b.build());
        let mut w = index.writer(15_000_000).expect("writer");
        for t in texts {
            w.add_document(doc!(f => *t)).expect("add");
        }
        #[expect(
            clippy::disallowed_methods,
            reason = "a test's index in memory, of no Kafka offsets"
        )]
        w.commit().expect("commit");
        (index, f)
    }

    fn scores(index: &Index, q: &dyn Query) -> Vec<(u32, Score)> {
        let searcher = index.reader().expect("reader").searcher();
        let mut hits: Vec<(u32, Score)> = searcher
            .search(q, &TopDocs::with_limit(10).order_by_score())
            .expect("search")
            .into_iter()
            .map(|(s, a)| (a.doc_id, s))
            .collect();
        hits.sort_by_key(|h| h.0);
        hits
    }

    #[test]
    fn equals_tantivy_at_its_fixed_parameters() {
        let (index, f) = index(&FRUIT);
        let term = Term::from_field_text(f, "apple");
        let ours = scores(
            &index,
            &Bm25TermQuery::new(term.clone(), Bm25Params { k1: 1.2, b: 0.75 }),
        );
        let theirs = scores(&index, &TermQuery::new(term, IndexRecordOption::WithFreqs));
        assert_eq!(ours.len(), 3);
        assert_eq!(ours.len(), theirs.len());
        for (a, b) in ours.iter().zip(&theirs) {
            assert_eq!(a.0, b.0);
            assert!((a.1 - b.1).abs() < 1e-5, "{ours:?} vs {theirs:?}");
        }
    }

    #[test]
    fn hand_computed_score_and_parameters_matter() {
        let (index, f) = index(&FRUIT);
        let term = Term::from_field_text(f, "apple");
        let p = Bm25Params { k1: 0.9, b: 0.4 };
        let got = scores(&index, &Bm25TermQuery::new(term.clone(), p));
        let idf = (1.0f32 + (4.0 - 3.0 + 0.5) / (3.0 + 0.5)).ln();
        let expect = |tf: f32, dl: f32| {
            idf * (p.k1 + 1.0) * tf / (tf + p.k1 * (1.0 - p.b + p.b * dl / 3.25))
        };
        let want = [
            (0, expect(1.0, 2.0)),
            (1, expect(3.0, 4.0)),
            (3, expect(1.0, 1.0)),
        ];
        assert_eq!(got.len(), 3);
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.0, w.0);
            assert!((g.1 - w.1).abs() < 1e-5, "doc {}: {} vs {}", g.0, g.1, w.1);
        }
        // b = 0: length is ignored, so the two tf = 1 documents tie.
        let flat = scores(
            &index,
            &Bm25TermQuery::new(term, Bm25Params { k1: 0.9, b: 0.0 }),
        );
        assert!((flat[0].1 - flat[2].1).abs() < 1e-6);
        assert!(flat[1].1 > flat[0].1);
    }

    #[test]
    fn missing_term_and_parameter_ranges() {
        let (index, f) = index(&["apple"]);
        let q = Bm25TermQuery::new(Term::from_field_text(f, "zzz"), Bm25Params::default());
        assert!(scores(&index, &q).is_empty());
        assert!(Bm25Params { k1: -1.0, b: 0.4 }.validate().is_err());
        assert!(Bm25Params {
            k1: f32::NAN,
            b: 0.4
        }
        .validate()
        .is_err());
        assert!(Bm25Params { k1: 1.0, b: 1.5 }.validate().is_err());
        assert!(Bm25Params::default().validate().is_ok());
    }
}
