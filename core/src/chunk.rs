//! The chunk record: what both indexes store of one piece of a document, and its identity.
//!
//! CONTRACT (shared with operators/, connectors/, pipeline/ and query/; keep stable):
//! - [`Chunk`] is the one record both sinks store. Every field but the version stamp
//!   `doc_hash` must round-trip through the tantivy index unchanged, because the pipeline
//!   rebuilds its state from it after a restart ([`ChunkChange`] says what an index stores).
//! - [`chunk_id`] makes identity depend on the document id, the chunk kind, the chunk text and the
//!   occurrence of that text within the document: editing one paragraph changes only the ids of
//!   the chunks whose text changed.
//!
//! - [`change`]: [`ChunkChange`], what differs between two records of one chunk id;
//! - [`header`]: the text a leaf is embedded as (title and section path before its text);
//! - [`tokens`]: [`TokenCounter`], and with the `tokenizer` feature the embedding model's own
//!   tokenizer behind it.
//!
//! The splitters that make chunks live in `freshet-operators` (`chunk`).

pub mod change;
pub mod header;
pub mod tokens;

use serde::{Deserialize, Serialize};

pub use change::ChunkChange;
pub use tokens::{CharCounter, TokenCounter};
#[cfg(feature = "tokenizer")]
pub use tokens::{HfTokenCounter, TokenizerLoadError};

/// What a chunk is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ChunkKind {
    /// Embedded and searched (plain chunking, or the child of a parent-child split).
    Leaf,
    /// A parent in parent-child chunking: stored for retrieval, not embedded.
    Parent,
}

impl ChunkKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            ChunkKind::Leaf => "leaf",
            ChunkKind::Parent => "parent",
        }
    }
    pub fn parse(s: &str) -> Option<ChunkKind> {
        match s {
            "leaf" => Some(ChunkKind::Leaf),
            "parent" => Some(ChunkKind::Parent),
            _ => None,
        }
    }
}

/// One chunk record, as stored in both indexes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Chunk {
    /// 32 hex chars, see [`chunk_id`].
    pub chunk_id: String,
    pub doc_id: String,
    pub kind: ChunkKind,
    /// For a leaf produced by parent-child chunking: the parent's chunk id.
    pub parent_id: Option<String>,
    /// Position of this chunk among the document's chunks of the same kind (0-based).
    pub index: u32,
    /// Character span (Unicode scalar offsets) in the cleaned document text, end exclusive.
    pub char_start: u32,
    pub char_end: u32,
    /// Heading path (outermost first) of the section this chunk lies in; empty if none.
    pub section: Vec<String>,
    pub text: String,
    /// Tokens of `text` counted with the embedding model's tokenizer (no special tokens).
    pub token_count: u32,
    // Inherited from the document:
    pub title: String,
    pub source: String,
    /// Canonical JSON object of the document metadata.
    pub metadata_json: String,
    pub acl: Vec<String>,
    /// blake3 content hash (hex) of the document version this chunk came from. It stamps the
    /// dataflow's records, so that every chunk of a new version differs from the old version's
    /// record under the same id; neither index stores it (empty in a chunk read back from an
    /// index), so a chunk whose stamp alone moved is not written again.
    pub doc_hash: String,
}

/// Stable chunk identity: hex of the first 16 bytes of
/// blake3(doc_id 0x00 kind 0x00 text 0x00 occurrence_le_u32).
pub fn chunk_id(doc_id: &str, kind: ChunkKind, text: &str, occurrence: u32) -> String {
    let mut h = blake3::Hasher::new();
    h.update(doc_id.as_bytes());
    h.update(&[0]);
    h.update(kind.as_str().as_bytes());
    h.update(&[0]);
    h.update(text.as_bytes());
    h.update(&[0]);
    h.update(&occurrence.to_le_bytes());
    let out = h.finalize();
    let mut s = String::with_capacity(32);
    for b in &out.as_bytes()[..16] {
        s.push_str(&format!("{b:02x}"));
    }
    s
}
