//! Chunking: a cleaned document becomes the chunk records that are embedded and indexed.
//!
//! CONTRACT (shared with connectors/ and pipeline/; keep stable):
//! - [`Chunk`] is the one record both sinks store. Every field but the version stamp
//!   `doc_hash` must round-trip through the tantivy index unchanged, because the pipeline
//!   rebuilds its state from it after a restart ([`ChunkChange`] says what an index stores).
//! - [`chunk_id`] makes identity depend on the document id, the chunk kind, the chunk text and the
//!   occurrence of that text within the document: editing one paragraph changes only the ids of
//!   the chunks whose text changed.
//!
//! Splitting (see the submodules):
//! - [`tokens`]: [`TokenCounter`] and the Hugging Face tokenizer behind it;
//! - [`recursive`]: paragraph → line → sentence → word → character splitting with overlap;
//! - [`markdown`]: heading-aware sections, code fences kept whole;
//! - [`parent_child`]: parents split into children;
//! - [`header`]: the text a leaf is embedded as (title and section path before its text), whose
//!   whole length the leaves' budgets hold;
//! - [`config`]: [`ChunkerConfig`], which splitter each content type gets;
//! - [`change`]: [`ChunkChange`], what differs between two records of one chunk id;
//! - [`chunk_document`] here: a cleaned document to its [`Chunk`] records by [`ChunkerConfig`].

mod blocks;
pub(crate) mod code;
pub mod config;
pub(crate) mod fence;
pub mod markdown;
pub mod parent_child;
pub mod recursive;
mod separators;
pub mod tokens;

pub(crate) use separators::is_cjk;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use crate::document::{ContentType, Document};
pub use config::{ChunkStrategy, ChunkerConfig, ConfigError};
use freshet_core::chars::CharOffsets;
/// The chunk record and what an index stores of it: the contract, in `freshet-core`.
pub use freshet_core::chunk::{change, chunk_id, header, Chunk, ChunkChange, ChunkKind};
pub use tokens::{CharCounter, HfTokenCounter, TokenCounter, TokenizerLoadError};

/// A chunk chosen by a splitter: byte offsets into the text it was cut from, its verified token
/// count, its heading path, and whether it is (part of) a block quotation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Piece {
    pub start: usize,
    pub end: usize,
    pub tokens: usize,
    pub section: Vec<String>,
    /// Cut from a block quotation that chunks on its own (a book's `<blockquote>`); its chunk's
    /// metadata has `"quote": true`.
    pub quote: bool,
}

/// Canonical JSON object of document metadata whose values are JSON texts (a value that is not
/// valid JSON is stored as a JSON string).
pub fn metadata_json(metadata: &BTreeMap<String, String>) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in metadata.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        crate::json::write_json_string(k, &mut out);
        out.push(':');
        match serde_json::from_str::<serde_json::Value>(v) {
            Ok(value) => out.push_str(&crate::json::canonical_json(&value)),
            Err(_) => crate::json::write_json_string(v, &mut out),
        }
    }
    out.push('}');
    out
}

/// Cuts a cleaned document into its chunk records (see [`ChunkerConfig`] for the splitter
/// chosen). Every field of every [`Chunk`] is filled: ids by [`chunk_id`] (the occurrence is the
/// number of earlier chunks of the same kind with the same text), `index` per kind in document
/// order, spans in Unicode scalar values of `doc.text`, title/source/acl inherited, metadata as
/// [`metadata_json`], and the verified token count. Parents come right before their children.
///
/// An out-of-range config is clamped rather than rejected here (use
/// [`ChunkerConfig::validate`]); empty or whitespace-only text gives no chunks.
pub fn chunk_document(
    doc: &Document,
    doc_hash: &str,
    cfg: &ChunkerConfig,
    tokens: &dyn TokenCounter,
) -> Vec<Chunk> {
    chunk_document_paged(doc, doc_hash, cfg, tokens, &[])
}

/// [`chunk_document`] for a paged document: `pages` holds, in order, the character offset at
/// which each page starts in `doc.text` and its number. Every chunk's metadata then also has
/// `page_start` and `page_end`, the pages its span lies on (unless the document's own metadata
/// has those keys).
pub fn chunk_document_paged(
    doc: &Document,
    doc_hash: &str,
    cfg: &ChunkerConfig,
    tokens: &dyn TokenCounter,
    pages: &[(u32, u32)],
) -> Vec<Chunk> {
    chunk_document_within(doc, doc_hash, cfg, tokens, pages, usize::MAX).unwrap_or_default()
}

/// A document that would yield more than `limit` chunks: chunking stopped at the first one over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyChunks {
    pub limit: usize,
}

/// [`chunk_document_paged`] that stops as soon as the document has yielded more than
/// `max_chunks` chunks (parents and leaves): a document over the limit is refused for the work of
/// `max_chunks` chunks, not of all of them, and none of its chunk records is built.
pub fn chunk_document_within(
    doc: &Document,
    doc_hash: &str,
    cfg: &ChunkerConfig,
    tokens: &dyn TokenCounter,
    pages: &[(u32, u32)],
    max_chunks: usize,
) -> Result<Vec<Chunk>, TooManyChunks> {
    let text = doc.text.as_str();
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let (parent_child, markdown) = cfg.resolve(doc.content_type);
    // A book's block quotations (`> ` lines of its parsed Markdown) chunk on their own.
    let quotes = doc.content_type == ContentType::Epub;
    let engine = recursive::Engine::new(text, tokens, markdown).with_max_pieces(max_chunks);
    let too_many = TooManyChunks { limit: max_chunks };
    // Leaves are embedded with their header: each budget holds the whole embedded input. The
    // splitters ask once per section (the code splitter once per chunk): each path is counted
    // once.
    let leaf_budget = |max: usize| {
        let known: RefCell<HashMap<Vec<String>, usize>> = RefCell::new(HashMap::new());
        move |section: &[String]| {
            if let Some(&n) = known.borrow().get(section) {
                return n;
            }
            let n = header::text_budget(max, &doc.title, section, tokens);
            known.borrow_mut().insert(section.to_vec(), n);
            n
        }
    };
    let mut b = Builder {
        doc,
        doc_hash,
        metadata_json: metadata_json(&doc.metadata),
        chars: CharOffsets::new(text),
        occurrences: HashMap::new(),
        next_index: [0, 0],
        out: Vec::new(),
        pages,
    };
    if parent_child {
        let parent_max = cfg.parent_max_tokens.max(1);
        let child_max = cfg.child_max_tokens.clamp(1, parent_max);
        let child_overlap = cfg.child_overlap_tokens.min(child_max / 2);
        let pps = parent_child::split_parent_child_with(
            &engine,
            markdown,
            quotes,
            parent_max,
            &leaf_budget(child_max),
            child_overlap,
        );
        if engine.full() {
            return Err(too_many);
        }
        for pp in pps {
            let Some(pid) = b.push(&pp.parent, ChunkKind::Parent, None) else {
                continue;
            };
            for c in &pp.children {
                b.push(c, ChunkKind::Leaf, Some(pid.clone()));
            }
        }
    } else {
        let max = cfg.max_tokens.max(1);
        let budget = leaf_budget(max);
        let syntax = match doc.content_type {
            ContentType::Code(lang)
                if cfg.strategy_for(doc.content_type) == ChunkStrategy::Syntax =>
            {
                code::split_code(&engine, lang, &budget, cfg.overlap_tokens)
            }
            _ => None,
        };
        let pieces = if let Some(pieces) = syntax {
            pieces
        } else if markdown {
            markdown::split_markdown_range(
                &engine,
                0..text.len(),
                &budget,
                cfg.overlap_tokens,
                quotes,
            )
        } else {
            let max = budget(&[]);
            let overlap = cfg.overlap_tokens.min(max / 2);
            let segments = blocks::segments(text, 0..text.len(), false);
            if segments
                .iter()
                .any(|s| matches!(s, blocks::Segment::Pair(_)))
            {
                // A FAQ in plain text: one question and answer per chunk.
                segments
                    .iter()
                    .flat_map(|s| engine.split(s.range(), max, overlap, None))
                    .collect()
            } else {
                engine.split(0..text.len(), max, overlap, None)
            }
        };
        if engine.full() {
            return Err(too_many);
        }
        for p in &pieces {
            b.push(p, ChunkKind::Leaf, None);
        }
    }
    if b.out.len() > max_chunks {
        return Err(too_many);
    }
    Ok(b.out)
}

struct Builder<'d> {
    doc: &'d Document,
    doc_hash: &'d str,
    metadata_json: String,
    chars: CharOffsets<'d>,
    occurrences: HashMap<(ChunkKind, &'d str), u32>,
    next_index: [u32; 2],
    out: Vec<Chunk>,
    pages: &'d [(u32, u32)],
}

impl<'d> Builder<'d> {
    /// Adds a chunk; returns its id.
    fn push(&mut self, p: &Piece, kind: ChunkKind, parent_id: Option<String>) -> Option<String> {
        let text: &'d str = self.doc.text.get(p.start..p.end)?;
        let occ = self.occurrences.entry((kind, text)).or_insert(0);
        let occurrence = *occ;
        *occ += 1;
        let slot = match kind {
            ChunkKind::Leaf => 0,
            ChunkKind::Parent => 1,
        };
        let index = self.next_index[slot];
        self.next_index[slot] += 1;
        let id = chunk_id(&self.doc.id, kind, text, occurrence);
        let to_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let char_start = to_u32(self.chars.ceil(p.start));
        let char_end = to_u32(self.chars.ceil(p.end));
        let pages = page_span(self.pages, char_start, char_end);
        let metadata_json = if pages.is_none() && !p.quote {
            self.metadata_json.clone()
        } else {
            with_keys(&self.metadata_json, pages, p.quote)
        };
        self.out.push(Chunk {
            chunk_id: id.clone(),
            doc_id: self.doc.id.clone(),
            kind,
            parent_id,
            index,
            char_start,
            char_end,
            section: p.section.clone(),
            text: text.to_owned(),
            token_count: to_u32(p.tokens),
            title: self.doc.title.clone(),
            source: self.doc.source.clone(),
            metadata_json,
            acl: self.doc.acl.clone(),
            doc_hash: self.doc_hash.to_owned(),
        });
        Some(id)
    }
}

/// The first and last page a character span lies on; `None` without pages.
fn page_span(pages: &[(u32, u32)], start: u32, end: u32) -> Option<(u32, u32)> {
    let page_at = |c: u32| {
        let k = pages.partition_point(|&(s, _)| s <= c);
        pages[k.saturating_sub(1)].1
    };
    (!pages.is_empty()).then(|| (page_at(start), page_at(end.saturating_sub(1).max(start))))
}

/// The metadata object with `page_start` and `page_end` added for a paged document, and
/// `quote: true` for a block quotation (the document's own keys win).
fn with_keys(metadata_json: &str, pages: Option<(u32, u32)>, quote: bool) -> String {
    let mut map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(metadata_json).unwrap_or_default();
    if let Some((first, last)) = pages {
        map.entry("page_start").or_insert(first.into());
        map.entry("page_end").or_insert(last.into());
    }
    if quote {
        map.entry("quote").or_insert(true.into());
    }
    crate::json::canonical_json(&serde_json::Value::Object(map))
}

#[cfg(test)]
pub(crate) mod test_words {
    pub(crate) use freshet_core::testing::WORDS;
}

#[cfg(test)]
pub(crate) mod tests;
