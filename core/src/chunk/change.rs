//! What differs between two records of one chunk id, part by part, so that each index writes
//! only what it stores.

use serde::{Deserialize, Serialize};

use super::Chunk;

/// Which parts of a chunk record differ between two records under one chunk id (the text
/// never does: it is part of the id). The version stamp [`Chunk::doc_hash`] is no part: a
/// record whose stamp alone moved is already in the indexes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ChunkChange {
    /// What the chunk is embedded as: text, title, section path (the vector changes).
    pub embedded: bool,
    /// What both indexes filter and answer on: document id, kind, source, metadata, ACL.
    pub attributes: bool,
    /// Where the chunk sits in its document: position, character span, token count, parent.
    pub placement: bool,
}

impl ChunkChange {
    /// A record the indexes do not hold yet: everything to write.
    pub const NEW: ChunkChange = ChunkChange {
        embedded: true,
        attributes: true,
        placement: true,
    };

    /// What differs from `old` to `new` (the same chunk id).
    pub fn between(old: &Chunk, new: &Chunk) -> ChunkChange {
        // Exhaustive on purpose: a new field must be placed in one of the parts.
        let Chunk {
            chunk_id,
            doc_id,
            kind,
            parent_id,
            index,
            char_start,
            char_end,
            section,
            text,
            token_count,
            title,
            source,
            metadata_json,
            acl,
            doc_hash: _,
        } = old;
        ChunkChange {
            embedded: *text != new.text || *title != new.title || *section != new.section,
            attributes: *chunk_id != new.chunk_id
                || *doc_id != new.doc_id
                || *kind != new.kind
                || *source != new.source
                || *metadata_json != new.metadata_json
                || *acl != new.acl,
            placement: *parent_id != new.parent_id
                || *index != new.index
                || *char_start != new.char_start
                || *char_end != new.char_end
                || *token_count != new.token_count,
        }
    }

    /// Whether anything an index stores differs.
    pub fn any(&self) -> bool {
        self.embedded || self.attributes || self.placement
    }

    /// Either's changes (two steps from one stored record).
    pub fn union(self, other: ChunkChange) -> ChunkChange {
        ChunkChange {
            embedded: self.embedded || other.embedded,
            attributes: self.attributes || other.attributes,
            placement: self.placement || other.placement,
        }
    }
}
