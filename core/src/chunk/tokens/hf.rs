//! The embedding model's own tokenizer (a Hugging Face `tokenizer.json`) as a [`TokenCounter`].

use std::path::Path;

use tokenizers::Tokenizer;

use super::TokenCounter;

/// Why a tokenizer could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("cannot load tokenizer from {source_name}: {reason}")]
pub struct TokenizerLoadError {
    /// The file path, or a description of where the tokenizer came from.
    pub source_name: String,
    pub reason: String,
}

/// A [`TokenCounter`] backed by a Hugging Face `tokenizers` tokenizer (a `tokenizer.json`).
/// Truncation and padding are switched off, so counts are exact for any length.
pub struct HfTokenCounter {
    tokenizer: Tokenizer,
    /// [`TokenCounter::input_overhead`]: special tokens, then the passage prefix's tokens.
    overhead: usize,
}

impl std::fmt::Debug for HfTokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfTokenCounter").finish_non_exhaustive()
    }
}

impl HfTokenCounter {
    /// Wraps a tokenizer, switching off its truncation and padding.
    pub fn new(mut tokenizer: Tokenizer) -> Result<Self, TokenizerLoadError> {
        tokenizer
            .with_truncation(None)
            .map_err(|e| TokenizerLoadError {
                source_name: "tokenizer".into(),
                reason: format!("cannot switch off truncation: {e}"),
            })?;
        tokenizer.with_padding(None);
        let mut counter = HfTokenCounter {
            tokenizer,
            overhead: 0,
        };
        counter.overhead = counter.special_tokens();
        Ok(counter)
    }

    /// Special tokens the tokenizer's post-processor adds to one input (2 for BERT's
    /// `[CLS] … [SEP]` and XLM-R's `<s> … </s>`).
    fn special_tokens(&self) -> usize {
        let with = self.tokenizer.encode_fast("a", true).map(|e| e.len());
        let without = self.tokenizer.encode_fast("a", false).map(|e| e.len());
        match (with, without) {
            (Ok(w), Ok(wo)) => w.saturating_sub(wo),
            _ => 0,
        }
    }

    /// Counts `prefix` (the model's passage prefix, e.g. e5's `passage: `) as part of every
    /// embedded input's overhead.
    pub fn with_passage_prefix(mut self, prefix: &str) -> Self {
        self.overhead = self.special_tokens() + self.count(prefix);
        self
    }

    /// Loads a `tokenizer.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokenizerLoadError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| TokenizerLoadError {
            source_name: name.clone(),
            reason: e.to_string(),
        })?;
        Self::from_json(&bytes, &name)
    }

    /// Loads a tokenizer from the bytes of a `tokenizer.json`.
    pub fn from_bytes(json: &[u8]) -> Result<Self, TokenizerLoadError> {
        Self::from_json(json, "bytes")
    }

    fn from_json(json: &[u8], name: &str) -> Result<Self, TokenizerLoadError> {
        let tok = Tokenizer::from_bytes(json).map_err(|e| TokenizerLoadError {
            source_name: name.to_owned(),
            reason: format!("not a valid tokenizer.json: {e}"),
        })?;
        Self::new(tok).map_err(|e| TokenizerLoadError {
            source_name: name.to_owned(),
            reason: e.reason,
        })
    }

    /// A BERT-style WordPiece tokenizer (BERT normalizer: lower-casing, accent stripping, CJK
    /// characters split out; BERT pre-tokenizer) over `vocab`, which should hold `[UNK]`.
    /// Meant for tests and tools; production loads the model's `tokenizer.json`.
    pub fn bert_wordpiece<'v>(
        vocab: impl IntoIterator<Item = &'v str>,
    ) -> Result<Self, TokenizerLoadError> {
        let mut map = serde_json::Map::new();
        for (i, tok) in vocab.into_iter().enumerate() {
            map.entry(tok.to_owned())
                .or_insert_with(|| serde_json::Value::from(i as u64));
        }
        let json = serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [],
            "normalizer": {
                "type": "BertNormalizer",
                "clean_text": true,
                "handle_chinese_chars": true,
                "strip_accents": null,
                "lowercase": true
            },
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": null,
            "decoder": null,
            "model": {
                "type": "WordPiece",
                "unk_token": "[UNK]",
                "continuing_subword_prefix": "##",
                "max_input_chars_per_word": 100,
                "vocab": map
            }
        });
        Self::from_json(json.to_string().as_bytes(), "bert_wordpiece vocabulary")
    }

    /// The wrapped tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
}

impl TokenCounter for HfTokenCounter {
    fn count(&self, text: &str) -> usize {
        if text.is_empty() {
            return 0;
        }
        match self.tokenizer.encode_fast(text, false) {
            Ok(enc) => enc.len(),
            // Never seen with a valid tokenizer; bytes are an upper bound for every common model.
            Err(_) => text.len(),
        }
    }

    fn token_spans(&self, text: &str) -> Option<Vec<(usize, usize)>> {
        if text.is_empty() {
            return Some(Vec::new());
        }
        self.tokenizer
            .encode(text, false)
            .ok()
            .map(|enc| enc.get_offsets().to_vec())
    }

    fn input_overhead(&self) -> usize {
        self.overhead
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::test_counter;

    #[test]
    fn counts_without_special_tokens() {
        let t = test_counter();
        assert_eq!(t.count(""), 0);
        assert_eq!(t.count("the"), 1);
        assert_eq!(t.count("The the THE"), 3);
        assert_eq!(t.count("the, the."), 4);
        // unknown word: greedy longest match over letters
        assert_eq!(t.count("qz"), 2);
        assert_eq!(t.count("   \n\t "), 0);
    }

    #[test]
    fn cjk_characters_are_single_tokens() {
        let t = test_counter();
        assert_eq!(t.count("中文"), 2);
        // unknown CJK characters are one [UNK] each, not one per run
        assert_eq!(t.count("漢字漢字"), 4);
        assert_eq!(t.count("这是一个测试。"), 7);
    }

    #[test]
    fn spans_match_count() {
        let t = test_counter();
        for s in ["the quick brown fox", "中文 and qz!", "", "   "] {
            let spans = t.token_spans(s).unwrap();
            assert_eq!(spans.len(), t.count(s), "{s:?}");
            for (a, b) in spans {
                assert!(a <= b && b <= s.len());
            }
        }
    }

    #[test]
    fn no_truncation() {
        let t = test_counter();
        let long = "the ".repeat(5000);
        assert_eq!(t.count(&long), 5000);
        // a tokenizer.json that asks for truncation is still counted in full
        let mut json: serde_json::Value =
            serde_json::from_str(&t.tokenizer().to_string(false).unwrap()).unwrap();
        json["truncation"] = serde_json::json!({
            "direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0
        });
        let t2 = HfTokenCounter::from_bytes(json.to_string().as_bytes()).unwrap();
        assert_eq!(t2.count(&long), 5000);
    }

    #[test]
    fn from_file_errors_are_clear() {
        let e = HfTokenCounter::from_file("/nonexistent/dir/tokenizer.json").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("/nonexistent/dir/tokenizer.json"), "{msg}");
        let e = HfTokenCounter::from_bytes(b"{\"not\":\"a tokenizer\"}").unwrap_err();
        assert!(e.to_string().contains("not a valid tokenizer.json"), "{e}");
    }

    #[test]
    fn from_file_roundtrip() {
        let t = test_counter();
        let dir = std::env::temp_dir().join(format!("freshet-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, t.tokenizer().to_string(false).unwrap()).unwrap();
        let t2 = HfTokenCounter::from_file(&path).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(t2.count("the quick 中文"), t.count("the quick 中文"));
    }

    /// The overhead is what the tokenizer's post-processor adds (BERT: `[CLS]` and `[SEP]`),
    /// plus the passage prefix's tokens; without a post-processor it is 0.
    #[test]
    fn input_overhead_counts_special_tokens_and_the_passage_prefix() {
        let plain = test_counter();
        assert_eq!(plain.input_overhead(), 0);
        let mut json: serde_json::Value =
            serde_json::from_str(&plain.tokenizer().to_string(false).unwrap()).unwrap();
        json["post_processor"] = serde_json::json!({
            "type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]
        });
        let bert = HfTokenCounter::from_bytes(json.to_string().as_bytes()).unwrap();
        assert_eq!(bert.input_overhead(), 2);
        assert_eq!(bert.count("the cat"), plain.count("the cat"));
        let prefixed = bert.with_passage_prefix("passage: ");
        assert_eq!(prefixed.input_overhead(), 2 + plain.count("passage:"));
    }
}
