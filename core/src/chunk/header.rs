//! The text a leaf chunk is embedded as: its document title and section path give the chunk
//! context that its own words may lack ("contextual chunk headers").
//!
//! The chunker budgets this whole input, not only the chunk text: a leaf's
//! `header + text` plus what the model adds to every input ([`TokenCounter::input_overhead`]:
//! special tokens, a passage prefix) fits in `max_tokens`, so no chunk is embedded truncated.

use super::tokens::TokenCounter;
use super::Chunk;

/// The header put before a chunk's text: `title\n` (if any), then `a > b\n` for the section
/// path (if any).
pub fn embed_header(title: &str, section: &[String]) -> String {
    let mut s = String::with_capacity(title.len() + 16 * section.len() + 2);
    if !title.is_empty() {
        s.push_str(title);
        s.push('\n');
    }
    if !section.is_empty() {
        s.push_str(&section.join(" > "));
        s.push('\n');
    }
    s
}

/// The text a leaf chunk is embedded as: [`embed_header`] then the chunk text.
pub fn embed_input(chunk: &Chunk) -> String {
    let mut s = embed_header(&chunk.title, &chunk.section);
    s.push_str(&chunk.text);
    s
}

/// Tokens a chunk text may have under `max_tokens` once its header and the model's own
/// additions are reserved. The text keeps at least a quarter of `max_tokens` (and one token):
/// a header longer than three quarters of the window is the one case where the embedded
/// input can still exceed it (the model then truncates the input's end).
pub fn text_budget(
    max_tokens: usize,
    title: &str,
    section: &[String],
    tokens: &dyn TokenCounter,
) -> usize {
    let header = embed_header(title, section);
    let reserved = tokens.input_overhead() + tokens.count(&header);
    max_tokens
        .saturating_sub(reserved)
        .max(max_tokens / 4)
        .max(1)
}
