//! Fusing the BM25 and vector rankings into one: Reciprocal Rank Fusion and weighted score
//! fusion with per-route min-max normalisation. Pure; results are deduplicated by chunk id and
//! ordered deterministically (score, then best route rank, then chunk id).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// How the two routes are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FusionMethod {
    /// `Σ 1 / (k + rank)` over the routes that returned the chunk (rank is 1-based).
    Rrf,
    /// `w_bm25 · norm(bm25) + w_vector · norm(vector)`, each route min-max normalised over its
    /// own result list (a single result, or all-equal scores, normalise to 1).
    Weighted,
}

/// A chunk's rank (1-based) and score in one stage.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StageScore {
    pub rank: usize,
    pub score: f32,
}

/// One fused candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct Fused {
    pub chunk_id: String,
    pub bm25: Option<StageScore>,
    pub vector: Option<StageScore>,
    pub fused: StageScore,
}

/// Parameters of [`fuse`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FusionParams {
    pub method: FusionMethod,
    pub rrf_k: f32,
    pub bm25_weight: f32,
    pub vector_weight: f32,
}

/// Ranks of a route's list (ordered best first): the first occurrence of an id wins.
fn ranked(list: &[(String, f32)]) -> HashMap<&str, StageScore> {
    let mut out = HashMap::with_capacity(list.len());
    for (i, (id, score)) in list.iter().enumerate() {
        out.entry(id.as_str()).or_insert(StageScore {
            rank: i + 1,
            score: *score,
        });
    }
    out
}

/// Min-max normalisation of one route's score.
fn normalise(score: f32, min: f32, max: f32) -> f32 {
    if max > min {
        (score - min) / (max - min)
    } else {
        1.0
    }
}

fn min_max(list: &[(String, f32)]) -> (f32, f32) {
    list.iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), (_, s)| {
            (lo.min(*s), hi.max(*s))
        })
}

/// Fuses two ranked lists (each best first, `(chunk id, route score)`).
pub fn fuse(bm25: &[(String, f32)], vector: &[(String, f32)], p: FusionParams) -> Vec<Fused> {
    let rb = ranked(bm25);
    let rv = ranked(vector);
    let (bmin, bmax) = min_max(bm25);
    let (vmin, vmax) = min_max(vector);
    let mut ids: Vec<&str> = Vec::with_capacity(rb.len() + rv.len());
    for (id, _) in bm25.iter().chain(vector) {
        ids.push(id);
    }
    ids.sort_unstable();
    ids.dedup();
    let mut out: Vec<Fused> = ids
        .into_iter()
        .map(|id| {
            let b = rb.get(id).copied();
            let v = rv.get(id).copied();
            let score = match p.method {
                FusionMethod::Rrf => [b, v]
                    .iter()
                    .flatten()
                    .map(|s| 1.0 / (p.rrf_k + s.rank as f32))
                    .sum(),
                FusionMethod::Weighted => {
                    b.map(|s| p.bm25_weight * normalise(s.score, bmin, bmax))
                        .unwrap_or(0.0)
                        + v.map(|s| p.vector_weight * normalise(s.score, vmin, vmax))
                            .unwrap_or(0.0)
                }
            };
            Fused {
                chunk_id: id.to_owned(),
                bm25: b,
                vector: v,
                fused: StageScore { rank: 0, score },
            }
        })
        .collect();
    let best_rank = |f: &Fused| {
        f.bm25
            .map(|s| s.rank)
            .into_iter()
            .chain(f.vector.map(|s| s.rank))
            .min()
            .unwrap_or(usize::MAX)
    };
    out.sort_by(|a, b| {
        b.fused
            .score
            .total_cmp(&a.fused.score)
            .then_with(|| best_rank(a).cmp(&best_rank(b)))
            .then_with(|| a.chunk_id.cmp(&b.chunk_id))
    });
    for (i, f) in out.iter_mut().enumerate() {
        f.fused.rank = i + 1;
    }
    out
}

/// One route's list as the final ranking (modes `bm25` and `vector`).
pub fn single_route(list: &[(String, f32)], is_bm25: bool) -> Vec<Fused> {
    let mut seen = std::collections::HashSet::new();
    list.iter()
        .filter(|(id, _)| seen.insert(id.clone()))
        .enumerate()
        .map(|(i, (id, score))| {
            let s = StageScore {
                rank: i + 1,
                score: *score,
            };
            Fused {
                chunk_id: id.clone(),
                bm25: is_bm25.then_some(s),
                vector: (!is_bm25).then_some(s),
                fused: s,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[(&str, f32)]) -> Vec<(String, f32)> {
        items.iter().map(|(i, s)| (i.to_string(), *s)).collect()
    }

    fn rrf(k: f32) -> FusionParams {
        FusionParams {
            method: FusionMethod::Rrf,
            rrf_k: k,
            bm25_weight: 0.5,
            vector_weight: 0.5,
        }
    }

    #[test]
    fn rrf_matches_hand_computed_scores() {
        let b = list(&[("a", 12.0), ("b", 9.0), ("c", 1.0)]);
        let v = list(&[("c", 0.9), ("a", 0.8), ("d", 0.1)]);
        let f = fuse(&b, &v, rrf(60.0));
        let ids: Vec<&str> = f.iter().map(|x| x.chunk_id.as_str()).collect();
        // a: 1/61 + 1/62; c: 1/63 + 1/61; b: 1/62; d: 1/63.
        assert_eq!(ids, ["a", "c", "b", "d"]);
        assert!((f[0].fused.score - (1.0 / 61.0 + 1.0 / 62.0)).abs() < 1e-7);
        assert!((f[1].fused.score - (1.0 / 63.0 + 1.0 / 61.0)).abs() < 1e-7);
        assert_eq!(
            f[0].bm25,
            Some(StageScore {
                rank: 1,
                score: 12.0
            })
        );
        assert_eq!(
            f[0].vector,
            Some(StageScore {
                rank: 2,
                score: 0.8
            })
        );
        assert_eq!(f[2].vector, None);
        assert_eq!(
            f.iter().map(|x| x.fused.rank).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
    }

    #[test]
    fn rrf_k_changes_the_balance() {
        // Route-1 winner only in bm25 vs a chunk ranked 2nd in both routes.
        let b = list(&[("x", 5.0), ("y", 4.0)]);
        let v = list(&[("z", 0.9), ("y", 0.8)]);
        // k=0: x = 1, y = 1/2 + 1/2 = 1, z = 1 → tie broken by best rank (x, z rank 1) then id.
        let f = fuse(&b, &v, rrf(0.0));
        assert_eq!(f[0].chunk_id, "x");
        assert_eq!(f[1].chunk_id, "z");
        assert_eq!(f[2].chunk_id, "y");
        // k=60: y = 2/62 beats x = 1/61.
        let f = fuse(&b, &v, rrf(60.0));
        assert_eq!(f[0].chunk_id, "y");
    }

    #[test]
    fn weighted_normalises_each_route() {
        let b = list(&[("a", 30.0), ("b", 20.0), ("c", 10.0)]);
        let v = list(&[("c", 0.9), ("b", 0.5)]);
        let p = FusionParams {
            method: FusionMethod::Weighted,
            rrf_k: 60.0,
            bm25_weight: 0.3,
            vector_weight: 0.7,
        };
        let f = fuse(&b, &v, p);
        let score = |id: &str| f.iter().find(|x| x.chunk_id == id).unwrap().fused.score;
        assert!((score("a") - 0.3).abs() < 1e-6);
        assert!((score("b") - (0.3 * 0.5 + 0.0)).abs() < 1e-6);
        assert!((score("c") - 0.7).abs() < 1e-6);
        assert_eq!(f[0].chunk_id, "c");
        // One-element route normalises to 1.
        let f = fuse(&list(&[("a", 3.0)]), &[], p);
        assert!((f[0].fused.score - 0.3).abs() < 1e-6);
    }

    #[test]
    fn duplicates_and_empty_lists() {
        assert!(fuse(&[], &[], rrf(60.0)).is_empty());
        let b = list(&[("a", 2.0), ("a", 1.0)]);
        let f = fuse(&b, &b, rrf(60.0));
        assert_eq!(f.len(), 1);
        assert!((f[0].fused.score - 2.0 / 61.0).abs() < 1e-7);
        let s = single_route(&list(&[("a", 2.0), ("b", 1.0), ("a", 0.5)]), false);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[1].fused,
            StageScore {
                rank: 2,
                score: 1.0
            }
        );
        assert!(s[1].bm25.is_none());
    }
}
