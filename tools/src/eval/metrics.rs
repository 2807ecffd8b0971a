//! Retrieval metrics with the trec_eval / pytrec_eval conventions: graded nDCG@k with gain = the
//! qrels grade and a log2(rank + 1) discount, the ideal ranking from the qrels; Recall@k over
//! the documents with a positive grade; MRR@k (reciprocal rank of the first relevant document
//! within k). A query's ranking is a list of document ids, best first, without duplicates.

use std::collections::HashMap;

/// Relevance grades of one query: document id → grade (> 0 is relevant).
pub type Judgements = HashMap<String, i32>;

pub fn ndcg_at(ranking: &[String], qrels: &Judgements, k: usize) -> f64 {
    let dcg: f64 = ranking
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, d)| {
            let g = qrels.get(d).copied().unwrap_or(0).max(0) as f64;
            g / ((i + 2) as f64).log2()
        })
        .sum();
    let mut ideal: Vec<i32> = qrels.values().copied().filter(|g| *g > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, g)| *g as f64 / ((i + 2) as f64).log2())
        .sum();
    if idcg > 0.0 {
        dcg / idcg
    } else {
        0.0
    }
}

pub fn recall_at(ranking: &[String], qrels: &Judgements, k: usize) -> f64 {
    let relevant = qrels.values().filter(|g| **g > 0).count();
    if relevant == 0 {
        return 0.0;
    }
    let found = ranking
        .iter()
        .take(k)
        .filter(|d| qrels.get(*d).is_some_and(|g| *g > 0))
        .count();
    found as f64 / relevant as f64
}

pub fn mrr_at(ranking: &[String], qrels: &Judgements, k: usize) -> f64 {
    ranking
        .iter()
        .take(k)
        .position(|d| qrels.get(d).is_some_and(|g| *g > 0))
        .map(|i| 1.0 / (i + 1) as f64)
        .unwrap_or(0.0)
}

/// Chunk hits (document id per hit, best first) to a document ranking: a document takes the
/// rank of its best chunk.
pub fn doc_ranking<'a>(hit_doc_ids: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    hit_doc_ids
        .into_iter()
        .filter(|d| seen.insert(*d))
        .map(str::to_owned)
        .collect()
}

/// The five reported figures of one query.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Scores {
    #[serde(rename = "ndcg@10")]
    pub ndcg10: f64,
    /// Whether the answer is among the first five (a context of five passages holds it).
    #[serde(rename = "recall@5")]
    pub recall5: f64,
    #[serde(rename = "recall@10")]
    pub recall10: f64,
    #[serde(rename = "recall@100")]
    pub recall100: f64,
    #[serde(rename = "mrr@10")]
    pub mrr10: f64,
}

impl Scores {
    /// The @10 metrics from `top` and Recall@100 from `deep` (two rankings of one query).
    pub fn of(top: &[String], deep: &[String], qrels: &Judgements) -> Scores {
        Scores {
            ndcg10: ndcg_at(top, qrels, 10),
            recall5: recall_at(top, qrels, 5),
            recall10: recall_at(top, qrels, 10),
            recall100: recall_at(deep, qrels, 100),
            mrr10: mrr_at(top, qrels, 10),
        }
    }

    /// The mean over queries (each query weighs the same).
    pub fn mean(all: &[Scores]) -> Scores {
        let n = all.len().max(1) as f64;
        let sum = |f: fn(&Scores) -> f64| all.iter().map(f).sum::<f64>() / n;
        Scores {
            ndcg10: sum(|s| s.ndcg10),
            recall5: sum(|s| s.recall5),
            recall10: sum(|s| s.recall10),
            recall100: sum(|s| s.recall100),
            mrr10: sum(|s| s.mrr10),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, i32)]) -> Judgements {
        pairs.iter().map(|(d, g)| (d.to_string(), *g)).collect()
    }
    fn r(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }
    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    #[test]
    fn ndcg_hand_computed() {
        // Relevant: a (2), b (1). Ranking: x, a, b.
        // DCG = 2/log2(3) + 1/log2(4) = 1.261860 + 0.5; IDCG = 2/1 + 1/log2(3) = 2.630930.
        let qrels = q(&[("a", 2), ("b", 1), ("z", 0)]);
        let dcg = 2.0 / 3f64.log2() + 0.5;
        let idcg = 2.0 + 1.0 / 3f64.log2();
        close(ndcg_at(&r(&["x", "a", "b"]), &qrels, 10), dcg / idcg);
        close(ndcg_at(&r(&["a", "b"]), &qrels, 10), 1.0);
        close(ndcg_at(&r(&["z", "y"]), &qrels, 10), 0.0);
        // Cut-off: only the first position counts at k=1.
        close(ndcg_at(&r(&["b", "a"]), &qrels, 1), 1.0 / 2.0);
        // No relevant document: 0 (trec_eval convention).
        close(ndcg_at(&r(&["a"]), &q(&[("a", 0)]), 10), 0.0);
    }

    #[test]
    fn recall_and_mrr_hand_computed() {
        let qrels = q(&[("a", 1), ("b", 1), ("c", 1), ("n", 0)]);
        let ranking = r(&["n", "x", "b", "y", "a"]);
        close(recall_at(&ranking, &qrels, 10), 2.0 / 3.0);
        close(recall_at(&ranking, &qrels, 3), 1.0 / 3.0);
        close(mrr_at(&ranking, &qrels, 10), 1.0 / 3.0);
        close(mrr_at(&ranking, &qrels, 2), 0.0);
        close(recall_at(&[], &qrels, 10), 0.0);
    }

    #[test]
    fn documents_take_their_best_chunk_rank() {
        assert_eq!(
            doc_ranking(["d1", "d2", "d1", "d3", "d2"]),
            r(&["d1", "d2", "d3"])
        );
        let m = Scores::mean(&[
            Scores {
                ndcg10: 1.0,
                recall5: 1.0,
                recall10: 1.0,
                recall100: 1.0,
                mrr10: 1.0,
            },
            Scores::default(),
        ]);
        close(m.ndcg10, 0.5);
        close(m.mrr10, 0.5);
    }
}
