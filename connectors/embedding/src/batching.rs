//! Model batches bounded by padded tokens as well as by texts.
//!
//! A transformer pads every text of a model call to the longest one, and ONNX Runtime's working
//! memory for the call grows with texts × padded length (the attention scores with texts ×
//! length²). A count alone therefore bounds neither memory nor the wasted work: 64 texts of 256
//! tokens take sixteen times the memory of 64 texts of 16. [`plan`] cuts a sequence of token
//! lengths, already sorted by length, into consecutive batches whose padded size (texts × the
//! longest) stays within a token budget and whose count stays within a text limit. A text
//! longer than the budget on its own still gets a batch of its own: nothing is left out.

use std::ops::Range;

/// Cuts `lengths` (token counts, in the order they will be embedded) into consecutive ranges:
/// each at most `max_texts` texts (at least 1) and, unless it holds a single text,
/// `len × max(lengths in it) <= max_tokens`. The ranges cover `0..lengths.len()` in order.
/// `max_tokens = 0` turns the token bound off. Sorting the lengths first (ascending) keeps the
/// padding and the number of batches low; the plan is valid in any order.
pub fn plan(lengths: &[usize], max_texts: usize, max_tokens: usize) -> Vec<Range<usize>> {
    let max_texts = max_texts.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    let mut longest = 0;
    for (i, &len) in lengths.iter().enumerate() {
        let count = i - start;
        let grown = longest.max(len);
        let fits = count < max_texts && (max_tokens == 0 || (count + 1) * grown <= max_tokens);
        if count > 0 && !fits {
            out.push(start..i);
            start = i;
            longest = len;
        } else {
            longest = grown;
        }
    }
    if start < lengths.len() {
        out.push(start..lengths.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Padded tokens of a batch: texts × the longest.
    fn padded(lengths: &[usize], r: &Range<usize>) -> usize {
        r.len() * lengths[r.clone()].iter().copied().max().unwrap_or(0)
    }

    fn covers_in_order(ranges: &[Range<usize>], n: usize) {
        let mut next = 0;
        for r in ranges {
            assert_eq!(r.start, next, "ranges are consecutive: {ranges:?}");
            assert!(!r.is_empty(), "no empty batch: {ranges:?}");
            next = r.end;
        }
        assert_eq!(next, n, "every text is in a batch: {ranges:?}");
    }

    #[test]
    fn no_batch_goes_over_the_token_budget() {
        let lengths: Vec<usize> = (0..200).map(|i| 5 + (i * 37) % 250).collect();
        let mut sorted = lengths.clone();
        sorted.sort_unstable();
        for (texts, budget) in [(64, 1024), (64, 4096), (8, 4096), (1000, 300), (3, 0)] {
            for l in [&lengths, &sorted] {
                let plan = plan(l, texts, budget);
                covers_in_order(&plan, l.len());
                for r in &plan {
                    assert!(r.len() <= texts, "{r:?} over {texts} texts");
                    if budget > 0 && r.len() > 1 {
                        assert!(padded(l, r) <= budget, "{r:?} pads to {}", padded(l, r));
                    }
                }
            }
        }
    }

    #[test]
    fn sorted_short_texts_fill_batches_up_to_the_budget() {
        // 100 texts of 10 tokens, budget 256: 25 per batch (250 padded tokens), the rest last.
        let plan = plan(&[10; 100], 64, 256);
        assert_eq!(plan, vec![0..25, 25..50, 50..75, 75..100]);
        // The text limit binds first when the texts are short enough.
        let plan = super::plan(&[2; 10], 4, 1000);
        assert_eq!(plan, vec![0..4, 4..8, 8..10]);
    }

    #[test]
    fn a_long_text_closes_the_batch_it_would_pad() {
        // Three short texts, then one of 200: 4 × 200 > 300, so the long one starts a batch.
        assert_eq!(plan(&[10, 10, 10, 200], 64, 300), vec![0..3, 3..4]);
    }

    #[test]
    fn a_text_over_the_budget_is_still_embedded_alone() {
        let plan = plan(&[5, 5, 512, 5], 64, 100);
        assert_eq!(plan, vec![0..2, 2..3, 3..4]);
        assert_eq!(super::plan(&[512], 64, 100), vec![0..1]);
    }

    #[test]
    fn no_texts_no_batches_and_zero_turns_the_budget_off() {
        assert!(plan(&[], 64, 100).is_empty());
        assert_eq!(plan(&[256; 5], 64, 0), vec![0..5]);
        assert_eq!(
            plan(&[256; 5], 0, 0),
            (0..5).map(|i| i..i + 1).collect::<Vec<_>>()
        );
    }
}
