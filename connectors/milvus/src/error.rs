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
         model is {configured:?} (vectors of two models never mix); configure [embedding] as \
         when the collection was written (provider, base_url and model for a remote model, \
         model_dir for a local one), or use another collection name, or drop it and re-index"
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

    /// The collection exists with another vector index type than configured.
    #[error(
        "milvus collection {collection:?} has a {existing} vector index, but [milvus] index_type \
         is {configured:?}: set index_type to the collection's, or drop the collection and start \
         the pipeline, which creates it with the configured index and re-inserts every vector \
         from the tantivy index and the embedding cache (see README, Delivery and recovery), or \
         use another collection name"
    )]
    IndexMismatch {
        collection: String,
        existing: String,
        configured: String,
    },

    /// A `[milvus]` setting outside what Milvus accepts.
    #[error("invalid [milvus] setting: {0}")]
    Config(String),

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

impl Error {
    /// Whether the request was refused for its content (a value over a field's limit, a
    /// malformed value), which no retry can change: for a request of one row, that row's fault.
    /// This crate's own checks ([`Error::InvalidInput`]), the SDK's local validation, and a
    /// server status of invalid parameter: code 1100 (Milvus 2.3.2 and later), or the legacy
    /// `IllegalArgument` (5; milvus-lite 3.2.2 sends 6). Everything else (transport, timeouts,
    /// rate limits, quotas, a collection not loaded) is not about the input.
    pub fn refuses_input(&self) -> bool {
        match self {
            Error::InvalidInput(_) => true,
            Error::Milvus(e) => sdk_refuses_input(e),
            _ => false,
        }
    }
}

fn sdk_refuses_input(e: &milvus::v2::error::Error) -> bool {
    use milvus::v2::error::Error as Sdk;
    match e {
        Sdk::Server(s) => {
            s.code() == PARAMETER_INVALID || ILLEGAL_ARGUMENT_LEGACY.contains(&s.legacy_code())
        }
        Sdk::Validation(_) => true,
        Sdk::RetryExhausted { source, .. } => sdk_refuses_input(source),
        _ => false,
    }
}

/// Milvus' `ErrParameterInvalid`.
const PARAMETER_INVALID: i32 = 1100;
/// The legacy `ErrorCode::IllegalArgument`, and the value milvus-lite sends for it.
const ILLEGAL_ARGUMENT_LEGACY: [i32; 2] = [5, 6];

impl From<milvus::v2::error::Error> for Error {
    fn from(e: milvus::v2::error::Error) -> Self {
        Error::Milvus(Box::new(e))
    }
}

/// Result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;
