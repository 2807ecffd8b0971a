//! The term scorer against tantivy's and hand-computed scores.

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
    let expect =
        |tf: f32, dl: f32| idf * (p.k1 + 1.0) * tf / (tf + p.k1 * (1.0 - p.b + p.b * dl / 3.25));
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
