//! [`EmbeddingModel`]: the model `[embedding] provider` names, local ([`FastEmbedder`]) or
//! remote ([`RemoteEmbedder`]), behind one interface for the pipeline and the query node.

use freshet_core::chunk::HfTokenCounter;
use freshet_core::embed::{EmbedError, Embedder};
use freshet_llm::EmbeddingsMetrics;

use crate::config::{EmbeddingConfig, Provider};
use crate::embedder::FastEmbedder;
use crate::error::{Error, Result};
use crate::language::Languages;
use crate::remote::RemoteEmbedder;

/// The configured embedding model.
#[derive(Debug)]
pub enum EmbeddingModel {
    Local(Box<FastEmbedder>),
    Remote(RemoteEmbedder),
}

impl EmbeddingModel {
    /// Loads the model `config.provider` names (a remote model must answer one request).
    pub fn load(config: &EmbeddingConfig) -> Result<Self> {
        EmbeddingModel::load_with_metrics(config, None)
    }

    /// [`EmbeddingModel::load`], a remote model's requests recorded in `metrics`.
    pub fn load_with_metrics(
        config: &EmbeddingConfig,
        metrics: Option<&EmbeddingsMetrics>,
    ) -> Result<Self> {
        Ok(match config.provider {
            Provider::Local => EmbeddingModel::Local(Box::new(FastEmbedder::load(config)?)),
            Provider::Openai => EmbeddingModel::Remote(RemoteEmbedder::load(config, metrics)?),
        })
    }

    /// Another handle on the same model, where that is cheap (a remote model); `None` for a
    /// local one (load another).
    pub fn share(&self) -> Option<EmbeddingModel> {
        match self {
            EmbeddingModel::Local(_) => None,
            EmbeddingModel::Remote(r) => Some(EmbeddingModel::Remote(r.clone())),
        }
    }

    pub fn provider(&self) -> Provider {
        match self {
            EmbeddingModel::Local(_) => Provider::Local,
            EmbeddingModel::Remote(_) => Provider::Openai,
        }
    }

    /// The languages the model covers, as declared; `None` when undeclared.
    pub fn languages(&self) -> Option<&Languages> {
        match self {
            EmbeddingModel::Local(m) => m.languages(),
            EmbeddingModel::Remote(m) => m.languages(),
        }
    }

    /// Embeds one search query (with the query prefix); unit length.
    pub fn embed_query(&mut self, text: &str) -> Result<Vec<f32>> {
        let mut out = self.embed_queries(&[text])?;
        out.pop()
            .ok_or_else(|| Error::Embed("one text in, no vector out".into()))
    }

    /// Embeds search queries (with the query prefix); unit length, in input order.
    pub fn embed_queries(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        match self {
            EmbeddingModel::Local(m) => m.embed_queries(texts),
            EmbeddingModel::Remote(m) => {
                let prefix = m.prefixes().1.to_owned();
                m.embed_raw(texts, &prefix)
            }
        }
    }

    /// Embeds passages (with the passage prefix); unit length, in input order.
    pub fn embed_passage_texts(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        match self {
            EmbeddingModel::Local(m) => m.embed_passage_texts(texts),
            EmbeddingModel::Remote(m) => {
                let prefix = m.prefixes().0.to_owned();
                m.embed_raw(texts, &prefix)
            }
        }
    }

    /// The chunker's token counter (see [`FastEmbedder::token_counter`],
    /// [`RemoteEmbedder::token_counter`]).
    pub fn token_counter(&self) -> Result<HfTokenCounter> {
        match self {
            EmbeddingModel::Local(m) => m.token_counter(),
            EmbeddingModel::Remote(m) => m.token_counter(),
        }
    }

    /// Tokens per text the model reads.
    pub fn max_length(&self) -> usize {
        match self {
            EmbeddingModel::Local(m) => m.max_length(),
            EmbeddingModel::Remote(m) => m.max_length(),
        }
    }

    /// Refuses a chunk budget larger than the model's window (see
    /// [`FastEmbedder::check_budget`]).
    pub fn check_budget(&self, what: &str, max_tokens: usize) -> Result<()> {
        let window = self.max_length();
        if max_tokens > window {
            return Err(Error::Config(format!(
                "{what} ({max_tokens}) exceeds the embedding model's window ({window} tokens, \
                 embedding.max_length or the tokenizer's limit): chunks that long would be \
                 embedded truncated or refused; lower {what}"
            )));
        }
        Ok(())
    }

    /// Texts per model call.
    pub fn batch_size(&self) -> usize {
        match self {
            EmbeddingModel::Local(m) => m.batch_size(),
            EmbeddingModel::Remote(m) => m.batch_size(),
        }
    }

    /// The prefixes in effect for passages and queries.
    pub fn prefixes(&self) -> (&str, &str) {
        match self {
            EmbeddingModel::Local(m) => m.prefixes(),
            EmbeddingModel::Remote(m) => m.prefixes(),
        }
    }

    /// The local model, if it is one.
    pub fn local(&self) -> Option<&FastEmbedder> {
        match self {
            EmbeddingModel::Local(m) => Some(m),
            EmbeddingModel::Remote(_) => None,
        }
    }
}

impl Embedder for EmbeddingModel {
    fn model_id(&self) -> &str {
        match self {
            EmbeddingModel::Local(m) => m.model_id(),
            EmbeddingModel::Remote(m) => m.model_id(),
        }
    }

    fn cache_id(&self) -> &str {
        match self {
            EmbeddingModel::Local(m) => m.cache_id(),
            EmbeddingModel::Remote(m) => m.model_id(),
        }
    }

    fn dim(&self) -> usize {
        match self {
            EmbeddingModel::Local(m) => m.dim(),
            EmbeddingModel::Remote(m) => m.dim(),
        }
    }

    fn embed_passages(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(self.embed_passage_texts(texts)?)
    }
}
