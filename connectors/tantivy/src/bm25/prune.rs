//! MaxScore top-k for [`super::Bm25Query`]: the same top k as scoring every posting, without
//! scoring the documents that cannot reach it.
//!
//! tantivy's top-k collector feeds documents in doc id order and takes one only if its score is
//! strictly above the current k-th best (ties go to the lower doc id); it hands that threshold
//! back after each document. A term's score never exceeds `idf · (k1 + 1)` (its
//! [`Scorer1::upper_bound`]), so with the terms sorted by that bound, the longest prefix whose
//! bounds sum to at most the threshold are *non-essential*: a document that contains none of the
//! other (*essential*) terms cannot score above the threshold. Candidates are therefore drawn
//! from the essential terms' postings only; the non-essential ones are only sought to the
//! candidates, and not at all once the candidate's essential score plus the bounds left
//! cannot pass the threshold (Turtle and Flood's MaxScore). A candidate that is not skipped is
//! scored exactly as the exhaustive scorer scores it ([`super::union::sum_at`]), and a skipped
//! one has a score at most the threshold, which the collector would have refused: the top k,
//! their scores and their tie order are those of the exhaustive scorer.
//!
//! Why MaxScore over per-term bounds and not block-max WAND: tantivy's block-max data (one
//! `(field length, tf)` pair per block of 128 postings) is the pair that maximises tantivy's
//! own BM25 at `k1 = 1.2`, `b = 0.75`; at other parameters the maximising pair can be another
//! one, so those block maxima are not bounds for this scorer, and tantivy keeps the block
//! cursor that would read them crate-private. Per-term bounds need nothing from the index.
//! MaxScore gains most where queries mix rare and common terms, which natural-language
//! questions do: the common terms become non-essential as soon as the top k fills.
//!
//! Filters and deletes: a candidate is checked against the filter (non-scoring MUST clauses,
//! sought in doc id order) and the segment's deletes before it is scored; the collector checks
//! deletes again.

use tantivy::fastfield::AliveBitSet;
use tantivy::query::Scorer;
use tantivy::{DocId, DocSet, Score, TERMINATED};

use super::union::sum_at;
use super::Scorer1;

/// Relative slack added to every bound, so that float rounding in a sum of `f32` scores can
/// never make a document score above the sum of its terms' bounds. Bounds and their sums are
/// kept in `f64`.
const BOUND_SLACK: f64 = 1e-4;

fn bound_of(score: Score) -> f64 {
    f64::from(score) * (1.0 + BOUND_SLACK)
}

/// Calls `callback(doc, score)` for every document, in doc id order, that passes `filter` and
/// is not deleted and whose score is above the threshold (`threshold` at first, then whatever
/// `callback` returned last); documents that cannot pass it are skipped unscored.
pub(super) fn max_score(
    mut terms: Vec<Scorer1>,
    mut filter: Option<Box<dyn Scorer>>,
    alive: Option<&AliveBitSet>,
    mut threshold: Score,
    callback: &mut dyn FnMut(DocId, Score) -> Score,
) {
    if terms.is_empty() {
        return;
    }
    // Term indices by ascending bound, and the running sums of those bounds.
    let bounds: Vec<f64> = terms
        .iter()
        .map(|t| bound_of(t.upper_bound()) * hooks::bound_scale())
        .collect();
    let mut order: Vec<usize> = (0..terms.len()).collect();
    order.sort_by(|&a, &b| bounds[a].total_cmp(&bounds[b]));
    let prefix: Vec<f64> = order
        .iter()
        .scan(0.0, |sum, &i| {
            *sum += bounds[i];
            Some(*sum)
        })
        .collect();
    let pruning = Pruning {
        order: &order,
        bounds: &bounds,
        prefix: &prefix,
    };
    // order[..first_essential] are the non-essential terms.
    let mut first_essential = pruning.first_essential(threshold);
    // The last document handed to the collector or skipped: never go back before it.
    let mut next: DocId = 0;
    loop {
        let essential = &order[first_essential..];
        if essential.is_empty() {
            return; // no document can pass the threshold
        }
        let mut doc = TERMINATED;
        for &i in essential {
            if terms[i].doc() < next {
                terms[i].seek(next);
            }
            doc = doc.min(terms[i].doc());
        }
        if doc == TERMINATED {
            return;
        }
        // The filter: jump the essential terms to its next match.
        if let Some(f) = filter.as_mut() {
            let fd = if f.doc() < doc { f.seek(doc) } else { f.doc() };
            if fd == TERMINATED {
                return;
            }
            if fd != doc {
                next = fd;
                continue;
            }
        }
        let alive_doc = alive.is_none_or(|a| a.is_alive(doc));
        if alive_doc && pruning.passes(&mut terms, first_essential, doc, threshold) {
            hooks::scored();
            let score = sum_at(&mut terms, doc);
            if score > threshold {
                threshold = callback(doc, score);
                first_essential = pruning.first_essential(threshold);
            }
        }
        if doc == TERMINATED - 1 {
            return;
        }
        next = doc + 1;
    }
}

/// The terms' bounds, sorted.
struct Pruning<'a> {
    /// Term indices by ascending bound.
    order: &'a [usize],
    /// Per term (query order), its bound with slack.
    bounds: &'a [f64],
    /// `prefix[j]`: the sum of the bounds of `order[..=j]`.
    prefix: &'a [f64],
}

impl Pruning<'_> {
    /// How many of the lowest-bound terms cannot, even all together, pass `threshold`.
    fn first_essential(&self, threshold: Score) -> usize {
        let t = f64::from(threshold);
        self.prefix.iter().take_while(|&&p| p <= t).count()
    }

    /// Whether `doc` (on which some essential term is positioned) can score above `threshold`:
    /// its essential terms' scores plus the bounds of the non-essential ones, each bound
    /// replaced by the real score, highest bound first, until the sum cannot pass. The
    /// non-essential terms are left on or after `doc`, all of them when this returns true.
    fn passes(
        &self,
        terms: &mut [Scorer1],
        first_essential: usize,
        doc: DocId,
        threshold: Score,
    ) -> bool {
        let t = f64::from(threshold);
        let mut best: f64 = 0.0;
        for &i in &self.order[first_essential..] {
            if terms[i].doc() == doc {
                best += bound_of(terms[i].score());
            }
        }
        // The non-essential terms, highest bound first: bound out, real score in.
        let mut rest = if first_essential == 0 {
            0.0
        } else {
            self.prefix[first_essential - 1]
        };
        for &i in self.order[..first_essential].iter().rev() {
            if best + rest <= t {
                return false;
            }
            rest = (rest - self.bounds[i]).max(0.0);
            if terms[i].doc() < doc {
                terms[i].seek(doc);
            }
            if terms[i].doc() == doc {
                best += bound_of(terms[i].score());
            }
        }
        best > t
    }
}

/// What the tests change and count: a scale on the term bounds (to check that wrong bounds are
/// caught) and the number of documents scored.
#[cfg(not(test))]
mod hooks {
    pub(super) fn bound_scale() -> f64 {
        1.0
    }
    pub(super) fn scored() {}
}

#[cfg(test)]
pub(super) mod hooks {
    use std::cell::Cell;

    thread_local! {
        pub(crate) static BOUND_SCALE: Cell<f64> = const { Cell::new(1.0) };
        pub(crate) static SCORED: Cell<u64> = const { Cell::new(0) };
    }

    pub(super) fn bound_scale() -> f64 {
        BOUND_SCALE.with(Cell::get)
    }
    pub(super) fn scored() {
        SCORED.with(|c| c.set(c.get() + 1));
    }
}
