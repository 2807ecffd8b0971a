//! The crate's error type.

use std::path::PathBuf;

use freshet_operators::embed::EmbedError;

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
    /// The vector cache failed (open, read, write, or a corrupt entry).
    #[error("vector cache {path}: {reason}")]
    Cache { path: PathBuf, reason: String },
    /// An invalid configuration value.
    #[error("embedding config: {0}")]
    Config(String),
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<Error> for EmbedError {
    fn from(e: Error) -> Self {
        EmbedError(e.to_string())
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
