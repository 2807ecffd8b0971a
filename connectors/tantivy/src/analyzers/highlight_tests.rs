//! Highlight spans by the index's analyzers, English and CJK.

use super::*;

/// The marked parts of `text`, by characters.
fn marked(query: &str, text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    highlight_spans(query, text)
        .into_iter()
        .map(|(a, b)| chars[a..b].iter().collect())
        .collect()
}

#[test]
fn english_terms_are_marked_by_their_stems_not_stop_words() {
    assert_eq!(
        marked(
            "the indexes of streaming",
            "Indexing a stream: the index streams changes."
        ),
        ["Indexing", "stream", "index", "streams"]
    );
    assert!(highlight_spans("the of", "the end of it").is_empty());
    assert!(highlight_spans("", "anything").is_empty());
}

#[test]
fn spans_are_characters_not_bytes() {
    // "é" is two bytes: a byte span would be off by one after it.
    let text = "café résumé index";
    assert_eq!(highlight_spans("index", text), [(12, 17)]);
    assert_eq!(marked("résumé", text), ["résumé"]);
}

#[test]
fn chinese_words_are_marked_without_spaces() {
    let text = "流式索引把文档变更增量地写入向量数据库。";
    let got = marked("向量数据库", text);
    assert_eq!(
        got,
        ["向量数据库"],
        "{:?}",
        highlight_spans("向量数据库", text)
    );
    // Word by word, not character by character: 量 alone in another word is not marked.
    assert_eq!(marked("索引", "索引与数量"), ["索引"]);
}

#[test]
fn traditional_text_is_marked_for_a_simplified_query() {
    assert_eq!(marked("数据库", "這是一個數據庫。"), ["數據庫"]);
}

#[test]
fn mixed_queries_mark_both_scripts() {
    assert_eq!(marked("BERT 模型", "BERT 是一个语言模型"), ["BERT", "模型"]);
}

#[test]
fn korean_and_japanese_are_marked() {
    assert_eq!(marked("검색", "벡터 검색 엔진"), ["검색"]);
    let got = marked("東京", "東京タワーに行きました");
    assert_eq!(got, ["東京"]);
}

#[test]
fn overlapping_spans_are_merged() {
    assert_eq!(merge(vec![(4, 6), (0, 2), (1, 3), (3, 4)]), [(0, 6)]);
    assert_eq!(merge(vec![(0, 1), (2, 3)]), [(0, 1), (2, 3)]);
}
