//! Token counting: the [`TokenCounter`] contract and the embedding model's tokenizer live in
//! `freshet-core` (`chunk::tokens`); the chunker's tests add a fast counter here.

pub use freshet_core::chunk::tokens::*;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    pub(crate) use freshet_core::testing::test_counter;

    /// A fast BERT-like counter for tests that run many documents in debug builds: a token is
    /// a run of alphanumeric characters, one punctuation/symbol character, or one CJK
    /// character. Gives spans, and records how much text it was asked to tokenize.
    #[derive(Default)]
    pub(crate) struct FastCounter {
        pub calls: std::cell::Cell<usize>,
        pub bytes: std::cell::Cell<usize>,
    }

    impl FastCounter {
        fn tokens(&self, text: &str) -> Vec<(usize, usize)> {
            self.calls.set(self.calls.get() + 1);
            self.bytes.set(self.bytes.get() + text.len());
            let mut out = Vec::new();
            let mut run: Option<usize> = None;
            for (i, c) in text.char_indices() {
                let word = c.is_alphanumeric() && !crate::chunk::separators::is_cjk(c);
                if word {
                    if run.is_none() {
                        run = Some(i);
                    }
                    continue;
                }
                if let Some(r) = run.take() {
                    out.push((r, i));
                }
                if !c.is_whitespace() {
                    out.push((i, i + c.len_utf8()));
                }
            }
            if let Some(r) = run {
                out.push((r, text.len()));
            }
            out
        }
    }

    impl TokenCounter for FastCounter {
        fn count(&self, text: &str) -> usize {
            self.tokens(text).len()
        }
        fn token_spans(&self, text: &str) -> Option<Vec<(usize, usize)>> {
            Some(self.tokens(text))
        }
    }

    #[test]
    fn fast_counter() {
        let f = FastCounter::default();
        assert_eq!(f.count("the cat, 中文 sat."), 7);
        assert_eq!(f.calls.get(), 1);
    }
}
