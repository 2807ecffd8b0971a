//! Fusion of the rankings of several queries (the question and its multi-query rewrites): each
//! query's own ranking (its routes already fused by the request's method) enters Reciprocal
//! Rank Fusion, `Σ 1 / (rrf_k + rank)` over the queries that found the chunk. A result keeps
//! the per-route ranks and scores of the query that ranked it best (the earliest query on a
//! tie, the question first), so that `scores.bm25` and `scores.vector` are ranks and scores one
//! real search gave; `scores.fused` is the fusion across queries. Pure; the order is
//! deterministic (score, then best rank, then chunk id).

use std::collections::HashMap;

use crate::fusion::{Fused, StageScore};

/// Fuses `lists` (one per query, each best first by `fused.rank`) into one ranking.
pub fn fuse_queries(lists: &[Vec<Fused>], rrf_k: f32) -> Vec<Fused> {
    struct Acc {
        score: f32,
        best_rank: usize,
        best: Fused,
    }
    let mut acc: HashMap<&str, Acc> = HashMap::new();
    for list in lists {
        let mut seen = std::collections::HashSet::new();
        for (i, f) in list.iter().enumerate() {
            if !seen.insert(f.chunk_id.as_str()) {
                continue;
            }
            let rank = i + 1;
            let add = 1.0 / (rrf_k + rank as f32);
            match acc.get_mut(f.chunk_id.as_str()) {
                Some(a) => {
                    a.score += add;
                    if rank < a.best_rank {
                        a.best_rank = rank;
                        a.best = f.clone();
                    }
                }
                None => {
                    acc.insert(
                        &f.chunk_id,
                        Acc {
                            score: add,
                            best_rank: rank,
                            best: f.clone(),
                        },
                    );
                }
            }
        }
    }
    let mut out: Vec<(usize, Fused)> = acc
        .into_values()
        .map(|a| {
            let mut f = a.best;
            f.fused = StageScore {
                rank: 0,
                score: a.score,
            };
            (a.best_rank, f)
        })
        .collect();
    out.sort_by(|(ra, a), (rb, b)| {
        b.fused
            .score
            .total_cmp(&a.fused.score)
            .then_with(|| ra.cmp(rb))
            .then_with(|| a.chunk_id.cmp(&b.chunk_id))
    });
    out.into_iter()
        .enumerate()
        .map(|(i, (_, mut f))| {
            f.fused.rank = i + 1;
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query's ranking: ids best first, each with a BM25 score telling which query it is.
    fn ranking(query: f32, ids: &[&str]) -> Vec<Fused> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| Fused {
                chunk_id: id.to_string(),
                bm25: Some(StageScore {
                    rank: i + 1,
                    score: query,
                }),
                vector: None,
                fused: StageScore {
                    rank: i + 1,
                    score: 1.0,
                },
            })
            .collect()
    }

    #[test]
    fn rrf_over_three_queries_matches_hand_computed_scores() {
        let lists = [
            ranking(0.0, &["a", "b", "c"]),
            ranking(1.0, &["c", "a"]),
            ranking(2.0, &["d", "c"]),
        ];
        let f = fuse_queries(&lists, 60.0);
        let ids: Vec<&str> = f.iter().map(|x| x.chunk_id.as_str()).collect();
        // c: 1/63 + 1/61 + 1/62; a: 1/61 + 1/62; d: 1/61; b: 1/62.
        assert_eq!(ids, ["c", "a", "d", "b"]);
        let want_c = 1.0 / 63.0 + 1.0 / 61.0 + 1.0 / 62.0;
        assert!((f[0].fused.score - want_c).abs() < 1e-7);
        assert_eq!(
            f.iter().map(|x| x.fused.rank).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        // Route scores come from the query that ranked the chunk best: c from query 1 (rank 1).
        assert_eq!(f[0].bm25.unwrap().score, 1.0);
        assert_eq!(f[0].bm25.unwrap().rank, 1);
        // a is rank 1 in query 0 and 2 in query 1: query 0's.
        assert_eq!(f[1].bm25.unwrap().score, 0.0);
    }

    #[test]
    fn ties_keep_the_earlier_query_and_the_order_is_deterministic() {
        let lists = [ranking(0.0, &["x", "y"]), ranking(1.0, &["y", "x"])];
        let f = fuse_queries(&lists, 60.0);
        // Equal scores: best rank equal (1), so the chunk id decides.
        assert_eq!(f[0].chunk_id, "x");
        assert_eq!(f[1].chunk_id, "y");
        // x is rank 1 in query 0: query 0's scores; y rank 1 in query 1.
        assert_eq!(f[0].bm25.unwrap().score, 0.0);
        assert_eq!(f[1].bm25.unwrap().score, 1.0);
        assert_eq!(f, fuse_queries(&lists, 60.0));
    }

    #[test]
    fn one_list_keeps_its_order_and_empty_lists_fuse_to_nothing() {
        let f = fuse_queries(&[ranking(0.0, &["b", "a", "c", "a"])], 60.0);
        let ids: Vec<&str> = f.iter().map(|x| x.chunk_id.as_str()).collect();
        assert_eq!(ids, ["b", "a", "c"]);
        assert!(fuse_queries(&[Vec::new(), Vec::new()], 60.0).is_empty());
        assert!(fuse_queries(&[], 60.0).is_empty());
    }
}
