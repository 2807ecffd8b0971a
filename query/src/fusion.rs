//! Fusing the BM25 and vector rankings into one: Reciprocal Rank Fusion, and weighted score
//! fusion with each route's scores normalised over its own list: by min-max, by their
//! distribution (DBSF: mean ± 3 standard deviations, as Qdrant ships it), or from the route's
//! theoretical minimum to the list's maximum (TMM, Bruch et al. 2023). Pure; results are
//! deduplicated by chunk id and ordered deterministically (score, then best route rank, then
//! chunk id).

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
    /// Distribution-based score fusion: as `weighted`, with each route normalised by
    /// `(s - (μ - 3σ)) / 6σ` over its own list, clipped to [0, 1]: a list's mean lands in the
    /// middle, and only a hit far above the rest reaches 1.
    Dbsf,
    /// Theoretical min-max: as `weighted`, with each route normalised from its theoretical
    /// minimum (BM25 0, cosine -1) to its list's maximum. A route whose scores hardly differ
    /// (an English model's cosines for a Chinese query) becomes a near-constant that leaves
    /// the other route's order alone, where min-max would stretch it over [0, 1].
    Tmm,
}

/// The least score a route can give: BM25 0, cosine similarity -1 ([`FusionMethod::Tmm`]).
const BM25_MIN: f32 = 0.0;
const COSINE_MIN: f32 = -1.0;

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

/// DBSF's bounds of one route's list: mean ∓ 3 standard deviations (population).
fn three_sigma(list: &[(String, f32)]) -> (f32, f32) {
    if list.is_empty() {
        return (0.0, 0.0);
    }
    let n = list.len() as f64;
    let mean = list.iter().map(|(_, s)| f64::from(*s)).sum::<f64>() / n;
    let var = list
        .iter()
        .map(|(_, s)| (f64::from(*s) - mean).powi(2))
        .sum::<f64>()
        / n;
    let sd = var.sqrt();
    ((mean - 3.0 * sd) as f32, (mean + 3.0 * sd) as f32)
}

/// The bounds a route whose least possible score is `floor` is normalised by under `method`
/// (unused for RRF).
fn bounds(list: &[(String, f32)], method: FusionMethod, floor: f32) -> (f32, f32) {
    match method {
        FusionMethod::Dbsf => three_sigma(list),
        FusionMethod::Tmm => (floor, min_max(list).1),
        FusionMethod::Rrf | FusionMethod::Weighted => min_max(list),
    }
}

/// Fuses two ranked lists (each best first, `(chunk id, route score)`).
pub fn fuse(bm25: &[(String, f32)], vector: &[(String, f32)], p: FusionParams) -> Vec<Fused> {
    let rb = ranked(bm25);
    let rv = ranked(vector);
    let (bmin, bmax) = bounds(bm25, p.method, BM25_MIN);
    let (vmin, vmax) = bounds(vector, p.method, COSINE_MIN);
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
                FusionMethod::Weighted | FusionMethod::Dbsf | FusionMethod::Tmm => {
                    b.map(|s| p.bm25_weight * normalise(s.score, bmin, bmax).clamp(0.0, 1.0))
                        .unwrap_or(0.0)
                        + v.map(|s| {
                            p.vector_weight * normalise(s.score, vmin, vmax).clamp(0.0, 1.0)
                        })
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
    fn dbsf_normalises_by_three_sigma_and_clips() {
        let p = FusionParams {
            method: FusionMethod::Dbsf,
            rrf_k: 60.0,
            bm25_weight: 0.5,
            vector_weight: 0.5,
        };
        // BM25 scores 2, 4, 6: mean 4, σ = sqrt(8/3); bounds 4 ∓ 3σ.
        let b = list(&[("a", 6.0), ("b", 4.0), ("c", 2.0)]);
        let sd = (8.0f32 / 3.0).sqrt();
        let f = fuse(&b, &[], p);
        let score =
            |f: &[Fused], id: &str| f.iter().find(|x| x.chunk_id == id).unwrap().fused.score;
        assert!(
            (score(&f, "b") - 0.25).abs() < 1e-6,
            "the mean maps to the middle"
        );
        let want_a = 0.5 * (6.0 - (4.0 - 3.0 * sd)) / (6.0 * sd);
        assert!((score(&f, "a") - want_a).abs() < 1e-6);
        assert!(fuse(&b, &[], p)
            .iter()
            .all(|x| (0.0..=0.5).contains(&x.fused.score)));
    }

    #[test]
    fn tmm_lets_a_flat_route_leave_the_other_order_alone() {
        let p = |method| FusionParams {
            method,
            rrf_k: 60.0,
            bm25_weight: 0.5,
            vector_weight: 0.5,
        };
        let b = list(&[("a", 6.0), ("b", 5.9), ("c", 2.0)]);
        // Noise: cosines that hardly differ, not in BM25's order.
        let v = list(&[("b", 0.120), ("c", 0.119), ("a", 0.118)]);
        let ids = |f: Vec<Fused>| f.into_iter().map(|x| x.chunk_id).collect::<Vec<_>>();
        assert_eq!(ids(fuse(&b, &v, p(FusionMethod::Tmm))), ["a", "b", "c"]);
        // Min-max stretches the noise over [0, 1], and it decides the top.
        assert_eq!(ids(fuse(&b, &v, p(FusionMethod::Weighted)))[0], "b");
        // Hand-computed: a = 0.5·6/6 + 0.5·(0.118+1)/(0.120+1).
        let f = fuse(&b, &v, p(FusionMethod::Tmm));
        let want = 0.5 + 0.5 * (1.118 / 1.12);
        assert!(
            (f[0].fused.score - want).abs() < 1e-6,
            "{}",
            f[0].fused.score
        );
        // A route that does tell hits apart still moves the order.
        let v = list(&[("c", 0.9), ("b", -0.5), ("a", -0.9)]);
        assert_eq!(ids(fuse(&b, &v, p(FusionMethod::Tmm)))[0], "c");
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
