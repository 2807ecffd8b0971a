//! The pruned top k equals the exhaustive one (documents, score bits, tie order) on random
//! indexes: several segments, deletes and updates, skewed term frequencies and field lengths,
//! copied chunks (ties), English and Chinese terms, random ACL and metadata filters; and a
//! pruning with wrong bounds is caught.

use freshet_core::chunk::Chunk;
use freshet_core::filter::ChunkFilter;
use freshet_core::testing::{random_chunks, random_filter, Rng};
use tantivy::query::{BooleanQuery, Occur, Query};
use tantivy::DocAddress;

use super::prune::hooks::{BOUND_SCALE, SCORED};
use super::*;
use crate::{ChunkIndexReader, ChunkIndexWriter, CommitPayload};

/// Words by falling frequency (picked with probability ∝ 1 / rank).
const WORDS: [&str; 24] = [
    "glacier", "river", "delta", "basin", "canyon", "valley", "summit", "ridge", "forest",
    "meadow", "tundra", "lagoon", "estuary", "plateau", "moraine", "fjord", "atoll", "geyser",
    "caldera", "mesa", "butte", "bayou", "oxbow", "karst",
];
const ZH_WORDS: [&str; 6] = ["河流", "冰川", "山谷", "森林", "城市", "平原"];

fn zipf<'a>(rng: &mut Rng, words: &[&'a str]) -> &'a str {
    // Rank r with weight 1/(r+1): draw from the harmonic cumulative sum.
    let total: f64 = (1..=words.len()).map(|r| 1.0 / r as f64).sum();
    let x = rng.below(1_000_000) as f64 / 1_000_000.0 * total;
    let mut acc = 0.0;
    for (r, w) in words.iter().enumerate() {
        acc += 1.0 / (r + 1) as f64;
        if x < acc {
            return w;
        }
    }
    words[words.len() - 1]
}

/// A text of skewed length and term frequencies: mostly short, some long, some with one word
/// repeated up to 300 times (past tantivy's 255 cap on block-max term frequencies).
fn random_text(rng: &mut Rng) -> String {
    let len = match rng.below(10) {
        0 => 200 + rng.below(400),
        1..=3 => 1 + rng.below(4),
        _ => 5 + rng.below(60),
    };
    let chinese = rng.chance(6);
    let mut words: Vec<&str> = (0..len)
        .map(|_| {
            if chinese {
                zipf(rng, &ZH_WORDS)
            } else {
                zipf(rng, &WORDS)
            }
        })
        .collect();
    if rng.chance(5) {
        let w = zipf(rng, &WORDS);
        words.extend(std::iter::repeat_n(w, 1 + rng.below(300)));
    }
    words.join(if chinese { "" } else { " " })
}

fn random_query(rng: &mut Rng) -> String {
    let n = 1 + rng.below(6);
    let mut q: Vec<&str> = (0..n).map(|_| zipf(rng, &WORDS)).collect();
    if rng.chance(4) {
        q.push(zipf(rng, &ZH_WORDS));
    }
    q.join(" ")
}

/// A random index in `dir` over several commits (segments), with deletes and updates; some
/// chunks copy another's text and title (equal scores: ties).
fn random_index(rng: &mut Rng, dir: &std::path::Path) {
    let mut w = ChunkIndexWriter::open_or_create(dir, 50_000_000).expect("writer");
    let mut live: Vec<Chunk> = Vec::new();
    let commits = 2 + rng.below(5);
    for c in 0..commits {
        let n = 20 + rng.below(150);
        let mut batch = random_chunks(rng, n);
        for (i, ch) in batch.iter_mut().enumerate() {
            ch.chunk_id = format!("c{c}-{i}");
            if !live.is_empty() && rng.chance(5) {
                let other = rng.pick(&live);
                ch.text = other.text.clone();
                ch.title = other.title.clone();
            } else {
                ch.text = random_text(rng);
            }
        }
        let mut deletes = Vec::new();
        if !live.is_empty() {
            for _ in 0..rng.below(live.len() / 3 + 1) {
                deletes.push(rng.pick(&live).chunk_id.clone());
            }
            // Updates: an existing id with new text.
            for _ in 0..rng.below(5) {
                let mut u = rng.pick(&live).clone();
                u.text = random_text(rng);
                batch.push(u);
            }
        }
        w.apply(&batch, &deletes).expect("apply");
        w.commit(&CommitPayload::new(Default::default(), c as u64 + 1))
            .expect("commit");
        live.retain(|l| !deletes.contains(&l.chunk_id));
        live.extend(batch);
    }
    w.close().expect("close");
}

fn hits(r: &ChunkIndexReader, q: &str, k: usize, f: &ChunkFilter) -> Vec<(u32, DocAddress)> {
    r.bm25_hits(q, k, f)
        .expect("search")
        .into_iter()
        .map(|(s, a)| (s.to_bits(), a))
        .collect()
}

/// Runs random searches on random indexes; returns (searches whose pruned top k differs from
/// the exhaustive one, searches with a non-empty top k, documents scored by pruning, documents
/// the exhaustive scorer would score).
fn compare(seeds: std::ops::Range<u64>, searches: usize) -> (usize, usize, u64) {
    let (mut differ, mut nonempty, mut multi_segment, mut seeds_run) = (0, 0, 0, 0);
    SCORED.with(|c| c.set(0));
    for seed in seeds {
        seeds_run += 1;
        let mut rng = Rng::new(seed);
        let dir = tempfile::tempdir().expect("tempdir");
        random_index(&mut rng, dir.path());
        let pruned = ChunkIndexReader::open_manual(dir.path()).expect("reader");
        let exhaustive = ChunkIndexReader::open_manual(dir.path())
            .expect("reader")
            .with_bm25_scorer(Bm25Scorer::Exhaustive);
        assert!(pruned.reload().is_ok() && exhaustive.reload().is_ok());
        let segments = pruned
            .snapshot()
            .expect("snapshot")
            .searcher
            .segment_readers()
            .len();
        multi_segment += usize::from(segments > 1);
        for i in 0..searches {
            let q = random_query(&mut rng);
            let k = *rng.pick(&[1, 2, 3, 5, 10, 50, 1000]);
            let f = if rng.chance(2) {
                random_filter(&mut rng)
            } else {
                ChunkFilter::none()
            };
            let want = hits(&exhaustive, &q, k, &f);
            let got = hits(&pruned, &q, k, &f);
            nonempty += usize::from(!want.is_empty());
            if got != want {
                differ += 1;
                if BOUND_SCALE.with(|c| c.get()) == 1.0 {
                    panic!("seed {seed} search {i}: {q:?} k={k} {f:?}\npruned {got:?}\nexhaustive {want:?}");
                }
            }
        }
    }
    assert!(
        multi_segment * 2 >= seeds_run,
        "{multi_segment} of {seeds_run} indexes have several segments"
    );
    (differ, nonempty, SCORED.with(|c| c.get()))
}

#[test]
fn pruned_top_k_equals_exhaustive_on_random_indexes() {
    let (differ, nonempty, _) = compare(0..12, 60);
    assert_eq!(differ, 0);
    assert!(nonempty > 400, "{nonempty} of 720 searches found something");
}

#[test]
fn halved_bounds_are_caught() {
    BOUND_SCALE.with(|c| c.set(0.5));
    let (differ, nonempty, _) = compare(0..4, 60);
    BOUND_SCALE.with(|c| c.set(1.0));
    assert!(
        differ > 0,
        "halved bounds went unnoticed in {nonempty} searches"
    );
}

/// On an index where a few documents are far above the rest, pruning scores only those.
#[test]
fn pruning_skips_documents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).expect("writer");
    let mut chunks = Vec::new();
    for i in 0..2000 {
        let text = if i % 500 == 0 {
            "karst karst oxbow"
        } else {
            "river valley glacier"
        };
        chunks.push(Chunk {
            chunk_id: format!("c{i}"),
            ..freshet_core::testing::chunk("d", text)
        });
    }
    w.apply(&chunks, &[]).expect("apply");
    w.commit(&CommitPayload::new(Default::default(), 1))
        .expect("commit");
    w.close().expect("close");
    let r = ChunkIndexReader::open_manual(dir.path()).expect("reader");
    let e = ChunkIndexReader::open_manual(dir.path())
        .expect("reader")
        .with_bm25_scorer(Bm25Scorer::Exhaustive);
    let q = "karst river valley";
    SCORED.with(|c| c.set(0));
    let got = r.bm25_hits(q, 1, &ChunkFilter::none()).expect("search");
    let scored = SCORED.with(|c| c.get());
    assert_eq!(
        got,
        e.bm25_hits(q, 1, &ChunkFilter::none()).expect("search")
    );
    // The first "karst" chunk sets the threshold; the other three tie with it (scored, and
    // refused: the lower doc id wins); the "river valley" chunks cannot reach it.
    assert!(scored < 20, "pruning scored {scored} of 2000 matches");
}

/// The exhaustive scorer scores as the boolean union of term queries that it replaced (up to
/// float rounding: the union adds in another order).
#[test]
fn exhaustive_equals_a_boolean_union_of_term_queries() {
    let mut rng = Rng::new(7);
    let dir = tempfile::tempdir().expect("tempdir");
    random_index(&mut rng, dir.path());
    let r = ChunkIndexReader::open_manual(dir.path()).expect("reader");
    let searcher = r.snapshot().expect("snapshot").searcher.clone();
    let s = crate::schema::ChunkSchema::new();
    let p = Bm25Params::default();
    for _ in 0..50 {
        let q = random_query(&mut rng);
        let terms = crate::analyze(&q);
        let ours = Bm25Query::new(
            terms
                .iter()
                .map(|t| Term::from_field_text(s.body, t))
                .collect(),
            p,
            None,
            Bm25Scorer::Exhaustive,
        );
        let union = BooleanQuery::new(
            terms
                .iter()
                .map(|t| {
                    let q: Box<dyn Query> =
                        Box::new(Bm25TermQuery::new(Term::from_field_text(s.body, t), p));
                    (Occur::Should, q)
                })
                .collect(),
        );
        let top = |q: &dyn Query| {
            searcher
                .search(
                    q,
                    &tantivy::collector::TopDocs::with_limit(2000).order_by_score(),
                )
                .expect("search")
        };
        let (a, b) = (top(&ours), top(&union));
        assert_eq!(a.len(), b.len(), "{q}");
        let mut a_docs: Vec<_> = a.iter().map(|h| h.1).collect();
        let mut b_docs: Vec<_> = b.iter().map(|h| h.1).collect();
        a_docs.sort();
        b_docs.sort();
        assert_eq!(a_docs, b_docs, "{q}");
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x.0 - y.0).abs() <= 1e-5 * x.0.abs().max(1.0),
                "{q}: {x:?} vs {y:?}"
            );
        }
    }
}
