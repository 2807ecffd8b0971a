//! What a tool answers: the query node's JSON answer (`/v1/retrieve`, `/v1/answer`, the
//! document route), read into the fields an agent needs, as structured content plus a short
//! text rendering of the same. One shaping for both transports: the in-process engine's answer
//! is serialised to the JSON the HTTP API sends, so the two cannot drift apart.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Characters of a passage's text in the text rendering (the structured content has all).
pub const RENDER_TEXT_CHARS: usize = 1200;

/// One search result.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct SearchHit {
    pub rank: usize,
    pub doc_id: String,
    pub chunk_id: String,
    pub title: String,
    /// Where the document came from (a path or URL).
    pub source: String,
    #[serde(default)]
    pub section: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_start: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_end: Option<u32>,
    pub score: f32,
    pub text: String,
}

/// `search`'s structured content.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct SearchResult {
    pub results: Vec<SearchHit>,
    /// Routes the results were made without (e.g. the vector route while Milvus is down).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<Value>,
    /// The index commit the results come from.
    #[serde(default)]
    pub index: Value,
}

/// A passage an answer cites.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Cited {
    /// Its `[n]` in the answer.
    pub number: usize,
    pub doc_id: String,
    pub chunk_id: String,
    pub title: String,
    pub source: String,
    #[serde(default)]
    pub section: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_start: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_end: Option<u32>,
    pub text: String,
    /// Read from the node's answer; not part of the tool's result.
    #[serde(default, skip_serializing)]
    pub cited: bool,
}

/// `answer`'s structured content.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AnswerResult {
    /// The answer, with `[n]` markers naming its citations.
    pub answer: String,
    /// Whether the model (or the node, with no passages) declined to answer.
    pub refused: bool,
    /// The passages the answer cites, by number.
    pub citations: Vec<Cited>,
    /// Markers naming a passage the prompt did not have.
    pub invalid_citations: usize,
    pub model: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<Value>,
}

#[derive(Deserialize)]
struct NodeAnswer {
    answer: String,
    refused: bool,
    passages: Vec<Cited>,
    #[serde(default)]
    invalid_citations: Vec<Value>,
    #[serde(default)]
    model: String,
    #[serde(default)]
    degraded: Vec<Value>,
}

/// One chunk of a fetched document.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct FetchedChunk {
    pub chunk_id: String,
    pub index: u32,
    #[serde(default)]
    pub section: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_start: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_end: Option<u32>,
    pub text: String,
}

/// `fetch`'s structured content.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct FetchResult {
    pub doc_id: String,
    pub title: String,
    pub source: String,
    #[serde(default)]
    pub metadata: Value,
    /// In document order.
    pub chunks: Vec<FetchedChunk>,
    /// The document's chunks in all.
    pub total_chunks: usize,
    /// The `from` that reads the next chunks, when there are more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_from: Option<u32>,
}

fn read<T: for<'de> Deserialize<'de>>(what: &str, v: Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| format!("the query node's {what} answer: {e}"))
}

/// A `/v1/retrieve` answer as `search`'s result.
pub fn search(v: Value) -> Result<SearchResult, String> {
    read("retrieve", v)
}

/// A `/v1/answer` answer as `answer`'s result: the cited passages only.
pub fn answer(v: Value) -> Result<AnswerResult, String> {
    let a: NodeAnswer = read("answer", v)?;
    Ok(AnswerResult {
        answer: a.answer,
        refused: a.refused,
        citations: a.passages.into_iter().filter(|p| p.cited).collect(),
        invalid_citations: a.invalid_citations.len(),
        model: a.model,
        degraded: a.degraded,
    })
}

/// A document route answer as `fetch`'s result.
pub fn fetch(v: Value) -> Result<FetchResult, String> {
    read("document", v)
}

fn clip(text: &str) -> String {
    match text.char_indices().nth(RENDER_TEXT_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

fn pages(start: Option<u32>, end: Option<u32>) -> String {
    match (start, end) {
        (Some(a), Some(b)) if a == b => format!(", p. {a}"),
        (Some(a), Some(b)) => format!(", pp. {a}–{b}"),
        _ => String::new(),
    }
}

/// `search`'s text: each result's title, source, pages, score, ids and text.
pub fn render_search(r: &SearchResult) -> String {
    if r.results.is_empty() {
        return "No results.".into();
    }
    let mut out = String::new();
    for h in &r.results {
        out.push_str(&format!(
            "{}. {} ({}{}) score {:.3}\n   doc_id: {}  chunk_id: {}\n   {}\n\n",
            h.rank,
            h.title,
            h.source,
            pages(h.page_start, h.page_end),
            h.score,
            h.doc_id,
            h.chunk_id,
            clip(&h.text).replace('\n', "\n   "),
        ));
    }
    out.trim_end().to_owned()
}

/// `answer`'s text: the answer, then its sources by number.
pub fn render_answer(a: &AnswerResult) -> String {
    let mut out = a.answer.trim().to_owned();
    if !a.citations.is_empty() {
        out.push_str("\n\nSources:");
        for c in &a.citations {
            out.push_str(&format!(
                "\n[{}] {} ({}{}) doc_id: {} chunk_id: {}",
                c.number,
                c.title,
                c.source,
                pages(c.page_start, c.page_end),
                c.doc_id,
                c.chunk_id
            ));
        }
    }
    out
}

/// `fetch`'s text: the document's title and source, then its chunks in order.
pub fn render_fetch(f: &FetchResult) -> String {
    let mut out = format!(
        "{} ({}) doc_id: {}: chunks {} of {}\n",
        f.title,
        f.source,
        f.doc_id,
        match (f.chunks.first(), f.chunks.last()) {
            (Some(a), Some(b)) => format!("{}–{}", a.index, b.index),
            _ => "none".into(),
        },
        f.total_chunks
    );
    for c in &f.chunks {
        out.push_str(&format!(
            "\n[{}{}] chunk_id: {}\n{}\n",
            c.index,
            pages(c.page_start, c.page_end),
            c.chunk_id,
            c.text
        ));
    }
    if let Some(n) = f.next_from {
        out.push_str(&format!("\n(more: fetch again with from = {n})"));
    }
    out.trim_end().to_owned()
}
