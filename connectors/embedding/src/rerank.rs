//! A local cross-encoder ([`FastReranker`]): scores (query, passage) pairs with a user-supplied
//! ONNX model through fastembed's `TextRerank`, on the same ONNX Runtime library as the embedder.
//!
//! The model directory holds `model.onnx` (inputs `input_ids`, `attention_mask` and, if the
//! model declares it, `token_type_ids`; output `logits` of shape `[batch, 1]`) and the Hugging
//! Face tokenizer files (`tokenizer.json`, `config.json`, `special_tokens_map.json`,
//! `tokenizer_config.json`). An ms-marco-MiniLM-L-6-v2 or bge-reranker ONNX export has exactly
//! this layout; `tests/fixtures/make_standin_reranker.py` writes a tiny generated one for tests.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use fastembed::{RerankInitOptionsUserDefined, TextRerank, UserDefinedRerankingModel};
use serde::{Deserialize, Serialize};

use crate::config::find_ort_library;
use crate::embedder::{
    check_ort_library, init_ort, load_guarded, read_model_dir, tokenizer_max_length,
    ORT_ALLOW_SPINNING,
};
use crate::error::{panic_message, Error, Result};

/// Settings of a local reranker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RerankerConfig {
    /// Directory with `model.onnx` and the tokenizer files.
    pub model_dir: PathBuf,
    /// Path of `libonnxruntime.so.1.31.x`; default: the `ORT_DYLIB_PATH` environment variable.
    pub ort_dylib_path: Option<PathBuf>,
    /// Tokens per (query, passage) pair; capped by the tokenizer's `model_max_length`.
    pub max_length: usize,
    /// Pairs per model call.
    pub batch_size: usize,
    /// ONNX Runtime intra-op threads (default: all cores).
    pub threads: Option<usize>,
    /// Whether ONNX Runtime's threads spin between pieces of work instead of sleeping, as
    /// [`crate::EmbeddingConfig::spinning`] (off by default: an idle reranker gives its cores
    /// back).
    pub spinning: bool,
}

impl RerankerConfig {
    pub fn for_model_dir(model_dir: impl Into<PathBuf>) -> Self {
        RerankerConfig {
            model_dir: model_dir.into(),
            ort_dylib_path: None,
            max_length: 512,
            batch_size: 32,
            threads: None,
            spinning: false,
        }
    }
}

/// A cross-encoder loaded from a model directory.
pub struct FastReranker {
    model: TextRerank,
    model_dir: PathBuf,
    batch_size: usize,
}

impl std::fmt::Debug for FastReranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastReranker")
            .field("model_dir", &self.model_dir)
            .finish_non_exhaustive()
    }
}

impl FastReranker {
    /// Loads the model; checks the runtime library and the files first and never panics.
    pub fn load(config: &RerankerConfig) -> Result<Self> {
        if config.batch_size == 0 || config.max_length == 0 {
            return Err(Error::Config(
                "reranker batch_size and max_length must be at least 1".into(),
            ));
        }
        let ort_path = check_ort_library(find_ort_library(config.ort_dylib_path.as_deref()))?;
        let dir = &config.model_dir;
        let files = read_model_dir(dir, &[])?;
        let max_length = config
            .max_length
            .min(tokenizer_max_length(dir, &files.tokenizer_config_file)?);
        init_ort(&ort_path)?;
        let mut options = RerankInitOptionsUserDefined::new().with_max_length(max_length);
        if let Some(t) = config.threads {
            options = options.with_intra_threads(t);
        }
        if !config.spinning {
            options = options.with_session_config(ORT_ALLOW_SPINNING, "0");
        }
        let model = load_guarded(dir, || {
            TextRerank::try_new_from_user_defined(
                UserDefinedRerankingModel::new(files.onnx, files.tokenizer),
                options,
            )
        })?;
        let mut me = FastReranker {
            model,
            model_dir: dir.clone(),
            batch_size: config.batch_size,
        };
        me.score("probe", &["probe passage"])
            .map_err(|e| Error::Load {
                dir: dir.clone(),
                reason: format!("test inference failed: {e}"),
            })?;
        tracing::info!(dir = %dir.display(), max_length, "reranker loaded");
        Ok(me)
    }

    /// The relevance score of each passage for `query`, in the order of `passages` (higher is
    /// more relevant; raw logits, not probabilities).
    pub fn score(&mut self, query: &str, passages: &[&str]) -> Result<Vec<f32>> {
        if passages.is_empty() {
            return Ok(Vec::new());
        }
        let batch = self.batch_size;
        let ranked = catch_unwind(AssertUnwindSafe(|| {
            self.model.rerank(query, passages, false, Some(batch))
        }))
        .map_err(|p| Error::Embed(format!("reranker panicked: {}", panic_message(&*p))))?
        .map_err(|e| Error::Embed(format!("rerank failed: {e}")))?;
        let mut scores = vec![f32::NAN; passages.len()];
        for r in ranked {
            if let Some(slot) = scores.get_mut(r.index) {
                *slot = r.score;
            }
        }
        if let Some(i) = scores.iter().position(|s| !s.is_finite()) {
            return Err(Error::Embed(format!(
                "reranker returned no finite score for passage {i}"
            )));
        }
        Ok(scores)
    }

    /// The model directory.
    pub fn model_dir(&self) -> &Path {
        &self.model_dir
    }
}
