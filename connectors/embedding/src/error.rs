//! The crate's error type.

use std::path::PathBuf;

use freshet_core::embed::EmbedError;

/// Errors of the embedding connector. Every variant says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The ONNX Runtime shared library is not configured, missing, too old or not loadable.
    #[error("ONNX Runtime library: {0}")]
    OrtLibrary(String),
    /// The model directory or one of its files is missing or malformed.
    #[error("model directory {dir}: {reason}")]
    Model { dir: PathBuf, reason: String },
    /// ONNX Runtime / fastembed refused the model (or panicked while loading it).
    #[error("loading the model from {dir} failed: {reason}")]
    Load { dir: PathBuf, reason: String },
    /// Running the model failed.
    #[error("embedding failed: {0}")]
    Embed(String),
    /// The vector cache failed (open, read, write, or a corrupt entry); a reason starting with
    /// [`CACHE_IN_USE`] is a cache another open holds ([`Error::is_cache_in_use`]).
    #[error("vector cache {path}: {reason}")]
    Cache { path: PathBuf, reason: String },
    /// The remote embedding server gave no vectors: `outage` when it is away or overwhelmed
    /// (timeout, 429, 5xx, unreachable, after the client's retries), else it refused or
    /// garbled the request. `class` as `freshet_llm::LlmError::class`.
    #[error("embedding server: {message}")]
    Remote {
        class: &'static str,
        outage: bool,
        message: String,
    },
    /// An invalid configuration value.
    #[error("embedding config: {0}")]
    Config(String),
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<Error> for EmbedError {
    /// A cache failure or an outage of the embedding server is about no text
    /// ([`EmbedError::environment`]); the rest may be.
    fn from(e: Error) -> Self {
        match e {
            Error::Cache { .. } | Error::Remote { outage: true, .. } => {
                EmbedError::environment(e.to_string())
            }
            e => EmbedError::new(e.to_string()),
        }
    }
}

/// Text of a panic payload (for panics caught at the ONNX Runtime boundary).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// How the reason of an [`Error::Cache`] for a cache file locked by another open begins.
pub const CACHE_IN_USE: &str = "in use";

impl Error {
    /// Whether this is [`crate::DiskCache::open`] finding the file held by another open cache
    /// (a running pipeline).
    pub fn is_cache_in_use(&self) -> bool {
        matches!(self, Error::Cache { reason, .. } if reason.starts_with(CACHE_IN_USE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedding operator isolates texts only for errors that may be about them: a cache
    /// that cannot be written must stop or stall the pipeline, not dead-letter every text.
    #[test]
    fn a_cache_failure_is_about_no_text() {
        let cache: EmbedError = Error::Cache {
            path: "/full/cache.log".into(),
            reason: "append failed: No space left on device (os error 28)".into(),
        }
        .into();
        assert!(!cache.may_be_about_texts);
        assert!(cache.message.contains("No space left"), "{cache}");
        let model: EmbedError = Error::Embed("input too long".into()).into();
        assert!(model.may_be_about_texts);
    }
}
