//! Token counting as the embedding model sees it: the [`TokenCounter`] the chunker budgets
//! with and the query node packs with; with the `tokenizer` feature, the model's own tokenizer
//! behind it (`HfTokenCounter`, `hf.rs`).

#[cfg(feature = "tokenizer")]
mod hf;

#[cfg(feature = "tokenizer")]
pub use hf::{HfTokenCounter, TokenizerLoadError};

/// Counts tokens as the embedding model sees them (no special tokens).
pub trait TokenCounter {
    /// Number of tokens of `text`, without special tokens (`[CLS]`, `</s>`, …).
    fn count(&self, text: &str) -> usize;

    /// Optional: the byte spans (`start..end` in `text`) of the tokens of `text`, in order.
    /// When given, the chunker plans with one call per document and counts sub-ranges from the
    /// spans; every chunk is still verified with [`TokenCounter::count`]. The default is `None`.
    fn token_spans(&self, _text: &str) -> Option<Vec<(usize, usize)>> {
        None
    }

    /// Tokens the model adds to every embedded input besides its text: special tokens
    /// (`[CLS]`/`[SEP]`, `<s>`/`</s>`) and the passage prefix. The chunker reserves them.
    /// The default is 0.
    fn input_overhead(&self) -> usize {
        0
    }
}

/// Counts Unicode scalar values: a stand-in for tests and tools that have no tokenizer.
#[derive(Clone, Copy, Debug, Default)]
pub struct CharCounter;

impl TokenCounter for CharCounter {
    fn count(&self, text: &str) -> usize {
        text.chars().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn char_counter() {
        assert_eq!(CharCounter.count("héllo 中"), 7);
        assert!(CharCounter.token_spans("x").is_none());
    }
}
