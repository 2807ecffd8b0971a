//! The embedding operator: turns chunk texts into L2-normalised vectors, asking the model only for
//! texts that no cache has seen.
//!
//! CONTRACT: [`Embedder`] is implemented by `freshet-embedding` (fastembed) and by test doubles;
//! [`VectorCache`] by `freshet-embedding`'s persistent cache. Cache keys are [`cache_key`].

/// Error from a model or a cache, as text, and whether it may be about the texts asked for.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct EmbedError {
    pub message: String,
    /// `false` for a failure of the machinery around the model (a cache that cannot be read
    /// or written): never isolated to a text, it stops or stalls the pipeline.
    pub may_be_about_texts: bool,
}

impl EmbedError {
    /// A failure of the model, possibly caused by one of the texts.
    pub fn new(message: impl Into<String>) -> Self {
        EmbedError {
            message: message.into(),
            may_be_about_texts: true,
        }
    }

    /// A failure that no text causes (the cache's disk is full, a lock is poisoned).
    pub fn environment(message: impl Into<String>) -> Self {
        EmbedError {
            message: message.into(),
            may_be_about_texts: false,
        }
    }
}

/// A text embedding model.
pub trait Embedder {
    /// Identifies the vector space: the model, its weights and the settings that change vectors.
    /// A collection's vectors and the queries searched against it must share it.
    fn model_id(&self) -> &str;
    /// Identifies the exact vectors this model computes; part of every cache key. A quantized
    /// export of the same weights shares [`Embedder::model_id`] but not this. Default: the model id.
    fn cache_id(&self) -> &str {
        self.model_id()
    }
    /// Vector dimension.
    fn dim(&self) -> usize;
    /// Embeds passages (documents' chunks). Returned vectors need not be normalised.
    fn embed_passages(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// What the embedding operator (`freshet-operators`' `dataflow::embed_deltas`) asks of the model side:
/// vectors for a batch of texts (through the cache), and whether the model works at all.
pub trait BatchEmbed {
    /// One vector per text, in order.
    fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Whether the model embeds a known, ordinary text now (bypassing any cache). Tells a text
    /// the model cannot embed apart from a model that embeds nothing.
    fn model_works(&mut self) -> bool;
}

/// A persistent store of vectors by [`cache_key`].
pub trait VectorCache {
    fn get_many(&self, keys: &[[u8; 32]]) -> Result<Vec<Option<Vec<f32>>>, EmbedError>;
    fn put_many(&mut self, entries: &[([u8; 32], Vec<f32>)]) -> Result<(), EmbedError>;
}

/// blake3(model id 0x00 text).
pub fn cache_key(model_id: &str, text: &str) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(model_id.as_bytes());
    h.update(&[0]);
    h.update(text.as_bytes());
    *h.finalize().as_bytes()
}

/// Scales `v` to unit L2 norm (a zero vector stays zero).
pub fn l2_normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

/// The text a leaf chunk is embedded as (defined beside the chunker, which budgets it).
pub use crate::chunk::header::embed_input;
