//! The one error type of this crate.

/// Everything that can go wrong talking to Milvus.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reported by the Milvus SDK: transport, server status, SDK-side validation, timeouts.
    #[error("milvus: {0}")]
    Milvus(Box<milvus::v2::error::Error>),

    /// The collection exists with another vector dimension than configured.
    #[error(
        "milvus collection {collection:?} has vector dimension {existing}, but the configured \
         dimension is {configured}; use another collection name or drop it and re-index"
    )]
    DimensionMismatch {
        collection: String,
        existing: usize,
        configured: usize,
    },

    /// The collection exists and was filled by another embedding model than configured.
    #[error(
        "milvus collection {collection:?} holds vectors of model {existing:?}, but the configured \
         model is {configured:?}; use another collection name or drop it and re-index"
    )]
    ModelMismatch {
        collection: String,
        existing: String,
        configured: String,
    },

    /// The collection was created by an older freshet with an older field layout.
    #[error(
        "milvus collection {collection:?} has field layout {existing}, this build writes layout \
         {current}: drop the collection and start the pipeline, which creates it again and \
         re-inserts every vector from the tantivy index and the embedding cache (see README, \
         Delivery and recovery)"
    )]
    LayoutOutdated {
        collection: String,
        existing: u32,
        current: u32,
    },

    /// The collection exists but does not have the layout this crate creates.
    #[error("milvus collection {collection:?} is not a freshet chunk collection: {reason}")]
    NotFreshetCollection { collection: String, reason: String },

    /// Input that Milvus would reject (wrong vector length, over-long id, ...), caught before
    /// anything is sent.
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// A filter that cannot be expressed.
    #[error("invalid filter: {0}")]
    InvalidFilter(String),

    /// No answer within the configured timeout (`[milvus] timeout`), retries included: the
    /// server or the network is down or overloaded.
    #[error("milvus did not answer within {0:?}")]
    Timeout(std::time::Duration),

    /// The server answered in a way that breaks an invariant (e.g. paginated ids do not add up
    /// to `count(*)`).
    #[error("inconsistent milvus answer: {0}")]
    Inconsistent(String),
}

impl From<milvus::v2::error::Error> for Error {
    fn from(e: milvus::v2::error::Error) -> Self {
        Error::Milvus(Box::new(e))
    }
}

/// Result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;
