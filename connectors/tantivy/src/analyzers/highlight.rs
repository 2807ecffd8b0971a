//! Where a query's terms occur in a text, by the analyzers the BM25 query is built with: the
//! text is analysed as the index analyses it, and each token whose term is one of the query's
//! terms (for the same analyzer) marks its span. So a stemmed English word matches its other
//! forms (`indexing` in the text for `indexes` in the query), and Chinese, Japanese and Korean
//! text, which has no spaces between words, is marked by its words (jieba, lindera, bigrams),
//! with traditional and simplified characters alike.
//!
//! Spans are in characters (Unicode scalar values), sorted, merged where they overlap or touch.

use freshet_core::chars::CharOffsets;
use std::collections::HashSet;

use tantivy::tokenizer::{TextAnalyzer, TokenStream};

use super::{
    analyze, analyze_ja, analyze_ko, analyze_zh, freshet_en_analyzer, freshet_ja_analyzer,
    freshet_ko_analyzer, freshet_zh_analyzer, CjkScripts,
};

/// The character ranges `[start, end)` of `text` where a term of `query` occurs, as the BM25
/// query of `query` would match them: the English analyzer always, the Chinese, Japanese and
/// Korean ones when the query has their script (the same rule as the query's). Empty when the
/// query has no term (stop words, punctuation).
pub fn highlight_spans(query: &str, text: &str) -> Vec<(usize, usize)> {
    let scripts = CjkScripts::of([query]);
    let mut spans = Vec::new();
    let chars = CharOffsets::new(text);
    mark(
        &mut spans,
        analyze(query),
        freshet_en_analyzer(),
        text,
        &chars,
    );
    if scripts.chinese() {
        // The Chinese analyzer reads the text folded to simplified characters, one character
        // for one: its offsets are in the folded text, whose characters line up with the text's.
        let folded = fast2s::convert(text);
        let folded_chars = CharOffsets::new(&folded);
        if folded_chars.len() == chars.len() {
            let terms = analyze_zh(query);
            mark(
                &mut spans,
                terms,
                freshet_zh_analyzer(),
                text,
                &folded_chars,
            );
        }
    }
    if scripts.han || scripts.kana {
        mark(
            &mut spans,
            analyze_ja(query),
            freshet_ja_analyzer(),
            text,
            &chars,
        );
    }
    if scripts.korean() {
        mark(
            &mut spans,
            analyze_ko(query),
            freshet_ko_analyzer(),
            text,
            &chars,
        );
    }
    merge(spans)
}

/// Adds the spans of the tokens of `text` (by `analyzer`, its byte offsets read through
/// `chars`) whose term is in `terms`.
fn mark(
    spans: &mut Vec<(usize, usize)>,
    terms: Vec<String>,
    mut analyzer: TextAnalyzer,
    text: &str,
    chars: &CharOffsets<'_>,
) {
    if terms.is_empty() {
        return;
    }
    let terms: HashSet<String> = terms.into_iter().collect();
    let mut stream = analyzer.token_stream(text);
    while stream.advance() {
        let t = stream.token();
        if terms.contains(&t.text) {
            let (a, b) = (chars.floor(t.offset_from), chars.floor(t.offset_to));
            if a < b {
                spans.push((a, b));
            }
        }
    }
}

/// Sorted, overlapping and touching spans made one.
fn merge(mut spans: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    spans.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

#[cfg(test)]
#[path = "highlight_tests.rs"]
mod tests;
