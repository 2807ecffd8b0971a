//! The analyzers of the chunk index, one per language family, and the rules that pick them.
//!
//! - [`freshet_en_analyzer`] (`freshet_en`): every chunk, over `body`.
//! - [`freshet_zh_analyzer`] (`freshet_zh`, [`zh`]): jieba over text with Han and no kana.
//! - [`freshet_ja_analyzer`] (`freshet_ja`, [`ja`]): lindera with the IPADIC dictionary (or
//!   character bigrams where the dictionary is switched off) over text with kana.
//! - [`freshet_ko_analyzer`] (`freshet_ko`, [`ko`]): overlapping Hangul bigrams over text with
//!   Hangul.
//! - [`highlight_spans`] (`highlight.rs`): where a query's terms occur in a text, by these
//!   analyzers.
//!
//! Which text goes where is [`CjkScripts`], the project's one script classifier.

mod bigram;
mod highlight;
mod ja;
mod ko;
mod zh;

use freshet_core::script::{is_ideographic, is_kana};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
    Token, TokenFilter, TokenStream, Tokenizer,
};

pub use freshet_core::script::CjkScripts;
pub use highlight::highlight_spans;
pub use ja::{
    analyze_ja, build_ja_dictionary, configure_japanese, default_ja_dictionary,
    freshet_ja_analyzer, japanese_analysis, JapaneseAnalysis, JA_ANALYZER_NAME,
};
pub use ko::{analyze_ko, freshet_ko_analyzer, KO_ANALYZER_NAME};
pub use zh::{analyze_zh, freshet_zh_analyzer, preload_zh_dictionary, ZH_ANALYZER_NAME};

/// Name under which [`freshet_en_analyzer`] is registered in every index.
pub const ANALYZER_NAME: &str = "freshet_en";

/// Tokens of this many bytes or more are dropped by both analyzers (long CJK runs, base64, ...).
pub const MAX_TOKEN_BYTES: usize = 40;

/// English analyzer: simple tokenizer, lowercase, drop tokens over [`MAX_TOKEN_BYTES`], English
/// stop words (Lucene's list), English (Porter2 / Snowball) stemmer.
pub fn freshet_en_analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(LowerCaser)
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(StopWordFilter::new(Language::English).expect("tantivy has English stop words"))
        .filter(Stemmer::new(Language::English))
        .build()
}

/// Analyses `text` with [`freshet_en_analyzer`] and returns the distinct terms in order of first
/// occurrence. Never fails: any input yields a (possibly empty) list.
pub fn analyze(text: &str) -> Vec<String> {
    distinct_terms(freshet_en_analyzer(), text)
}

/// Whether `text` contains a CJK ideograph (Han) or Japanese kana, i.e. whether it is analysed
/// with [`freshet_zh_analyzer`] or [`freshet_ja_analyzer`] (which of them: [`CjkScripts`]).
pub fn contains_cjk(text: &str) -> bool {
    text.chars().any(is_cjk)
}

/// Han, ideographic marks and kana: the characters the Chinese and Japanese analyzers read (and
/// the Japanese bigram fallback pairs).
pub(crate) fn is_cjk(c: char) -> bool {
    is_ideographic(c) || is_kana(c)
}

pub(crate) fn distinct_terms(mut analyzer: TextAnalyzer, text: &str) -> Vec<String> {
    let mut stream = analyzer.token_stream(text);
    let mut out: Vec<String> = Vec::new();
    while stream.advance() {
        let t = &stream.token().text;
        if !t.is_empty() && !out.iter().any(|o| o == t) {
            out.push(t.clone());
        }
    }
    out
}

/// Drops tokens that contain no alphanumeric character (jieba emits spaces and punctuation as
/// tokens of their own).
#[derive(Clone, Copy)]
pub(crate) struct KeepWordsFilter;

impl TokenFilter for KeepWordsFilter {
    type Tokenizer<T: Tokenizer> = KeepWordsTokenizer<T>;

    fn transform<T: Tokenizer>(self, tokenizer: T) -> KeepWordsTokenizer<T> {
        KeepWordsTokenizer(tokenizer)
    }
}

#[derive(Clone)]
pub(crate) struct KeepWordsTokenizer<T>(T);

impl<T: Tokenizer> Tokenizer for KeepWordsTokenizer<T> {
    type TokenStream<'a> = KeepWordsStream<T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        KeepWordsStream(self.0.token_stream(text))
    }
}

pub(crate) struct KeepWordsStream<S>(S);

impl<S: TokenStream> TokenStream for KeepWordsStream<S> {
    fn advance(&mut self) -> bool {
        while self.0.advance() {
            if self.0.token().text.chars().any(char::is_alphanumeric) {
                return true;
            }
        }
        false
    }

    fn token(&self) -> &Token {
        self.0.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.0.token_mut()
    }
}
