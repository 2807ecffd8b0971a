//! The one error type of this crate.

use std::path::PathBuf;

/// Everything that can go wrong while writing or reading a chunk index.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An error reported by tantivy itself.
    #[error("tantivy: {0}")]
    Tantivy(#[from] tantivy::TantivyError),

    /// The index directory could not be opened.
    #[error("cannot open index directory: {0}")]
    OpenDirectory(#[from] tantivy::directory::error::OpenDirectoryError),

    /// A filesystem operation on a file next to the index failed.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// There is no chunk index at the path (a reader never creates one).
    #[error("no chunk index at {0}")]
    NotFound(PathBuf),

    /// The directory holds an index this crate did not create, or one created with a different
    /// field layout than [`crate::SCHEMA_VERSION`] describes.
    #[error("{path} is not a freshet chunk index: {reason}")]
    NotAChunkIndex { path: PathBuf, reason: String },

    /// The index was written with another schema version; rebuild it (or run the matching
    /// freshet version).
    #[error(
        "chunk index at {path} has schema version {found}, this build expects {expected}; \
         rebuild the index from the source topics"
    )]
    SchemaVersionMismatch {
        path: PathBuf,
        found: u32,
        expected: u32,
    },

    /// A commit payload could not be encoded or decoded.
    #[error("commit payload: {0}")]
    Payload(String),

    /// A stored document could not be turned back into a [`freshet_core::chunk::Chunk`].
    #[error("corrupt stored chunk{}: {reason}", chunk_id.as_deref().map(|id| format!(" {id}")).unwrap_or_default())]
    Corrupt {
        chunk_id: Option<String>,
        reason: String,
    },

    /// A [`crate::ChunkFilter`] that cannot be turned into a query.
    #[error("invalid filter: {0}")]
    InvalidFilter(String),

    /// A commit names another index id than the index holds (an index's id never changes).
    #[error("chunk index at {path} has index id {held}; a commit for index {given} was refused")]
    IndexIdMismatch {
        path: PathBuf,
        held: String,
        given: String,
    },

    /// A reader could not load a commit together with its payload (commits kept landing).
    #[error("reload: {0}")]
    Reload(String),

    /// The Japanese dictionary (`[tantivy] ja_dictionary`) is missing or cannot be loaded or
    /// built.
    #[error(
        "Japanese dictionary {path}: {reason}; build it with `deploy/install.sh` (or \
         `freshet-tools ja-dict --out {path}`), or set `[tantivy] ja_dictionary = \"\"` to \
         index Japanese as character bigrams"
    )]
    JaDictionary { path: PathBuf, reason: String },

    /// The index analyses Japanese otherwise than this process would (an index written with the
    /// IPADIC dictionary, read or written by a process without it, or the other way round):
    /// its terms would not match.
    #[error(
        "chunk index at {path} analyses Japanese with {index}, this process with {process} \
         (`[tantivy] ja_dictionary`); configure the same Japanese analysis as the process that \
         built the index, or rebuild the index"
    )]
    JapaneseAnalysisMismatch {
        path: PathBuf,
        index: String,
        process: String,
    },

    /// A bad argument, e.g. a writer heap below tantivy's minimum.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// Result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;
