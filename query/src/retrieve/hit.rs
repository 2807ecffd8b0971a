//! A candidate as the result it becomes: its passage's text and span, its pages, its chunk's
//! fields. Results are made only from candidates, which hold only checked chunks.

use freshet_core::chunk::Chunk;

use super::{Candidate, Hit};
use crate::passage::merge_text;
use crate::visible::Visible;

/// The text of a candidate's passage.
pub(crate) fn passage_text(c: &Candidate) -> String {
    let refs: Vec<&Chunk> = c.passage.iter().map(|v| &**v).collect();
    merge_text(&refs)
}

/// A chunk's pages from its metadata (`page_start`, `page_end`), if it has them.
pub(crate) fn pages_of(metadata: &serde_json::Value) -> Option<(u32, u32)> {
    let page = |k: &str| {
        metadata
            .get(k)
            .and_then(|v| v.as_u64())
            .and_then(|v| u32::try_from(v).ok())
    };
    page("page_start").zip(page("page_end"))
}

/// The pages a passage spans: the hit's (its metadata already parsed), widened by those of the
/// passage's other chunks; `None` when no chunk has pages.
fn passage_pages(
    hit: &Chunk,
    metadata: &serde_json::Value,
    passage: &[Visible],
) -> Option<(u32, u32)> {
    let others = passage
        .iter()
        .filter(|c| c.chunk_id != hit.chunk_id)
        .filter_map(|c| serde_json::from_str::<serde_json::Value>(&c.metadata_json).ok())
        .filter_map(|m| pages_of(&m));
    pages_of(metadata)
        .into_iter()
        .chain(others)
        .reduce(|(a, b), (x, y)| (a.min(x), b.max(y)))
}

/// Result number `i` (0-based) of a candidate: all of it from checked chunks.
pub(crate) fn to_hit(i: usize, c: Candidate) -> Hit {
    let text = passage_text(&c);
    let char_start = c.passage.iter().map(|p| p.char_start).min().unwrap_or(0);
    let char_end = c.passage.iter().map(|p| p.char_end).max().unwrap_or(0);
    let passage_chunk_ids = if c.passage.len() > 1 {
        c.passage.iter().map(|p| p.chunk_id.clone()).collect()
    } else {
        Vec::new()
    };
    let ch = c.chunk.into_inner();
    let metadata = serde_json::from_str(&ch.metadata_json)
        .unwrap_or(serde_json::Value::Object(Default::default()));
    let pages = passage_pages(&ch, &metadata, &c.passage);
    Hit {
        rank: i + 1,
        page_start: pages.map(|p| p.0),
        page_end: pages.map(|p| p.1),
        metadata,
        chunk_id: ch.chunk_id,
        doc_id: ch.doc_id,
        kind: ch.kind.as_str(),
        parent_id: ch.parent_id,
        title: ch.title,
        source: ch.source,
        section: ch.section,
        chunk_index: ch.index,
        char_start,
        char_end,
        text,
        score: c.score,
        scores: c.scores,
        passage_chunk_ids,
        matched_children: c.children,
        highlights: None,
    }
}

/// Where the terms of `query` occur in `text`: character ranges by the BM25 index's analyzers
/// (`freshet_tantivy::highlight_spans`).
pub(crate) fn highlights(query: &str, text: &str) -> Vec<[usize; 2]> {
    freshet_tantivy::highlight_spans(query, text)
        .into_iter()
        .map(|(a, b)| [a, b])
        .collect()
}
