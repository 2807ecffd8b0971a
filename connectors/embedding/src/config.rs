//! [`EmbeddingConfig`] (what the pipeline configures) and [`ModelMeta`] (`freshet-model.json`,
//! what the exporter wrote next to the model).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Directory name of the default model under `$FRESHET_HOME/models/`: the int8 variant of
/// all-MiniLM-L6-v2. It embeds with about half the CPU of the float export (measured 135 s against
/// 253 s for the SciFact corpus, 4.2 against 9.6 ms for a 20-token query on one core), in the same
/// vector space. SciFact nDCG@10 through the pipeline and node: vector 0.659 against 0.661,
/// hybrid-weighted 0.729 against 0.733 (docs/benchmarks.md, "Retrieval quality").
pub const DEFAULT_MODEL_DIR_NAME: &str = "all-MiniLM-L6-v2-int8";

/// Default `[embedding] batch_tokens`: padded tokens per local model call.
/// Small calls are faster on CPU as well as smaller: with all-MiniLM-L6-v2 int8 on 2 cores a
/// SciFact ingest took 121.1 s at 512 against 191.6 s at 4,096 (docs/benchmarks.md, "Pipeline
/// memory").
pub const DEFAULT_BATCH_TOKENS: usize = 512;

/// Where vectors come from: `local` (an ONNX model run in process) or `openai` (an
/// OpenAI-compatible `/embeddings` server: TEI, vLLM, Ollama, LiteLLM, hosted APIs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    #[default]
    Local,
    Openai,
}

/// Settings of the embedding model. Every field has a default, so `{}` (or an absent TOML table)
/// is a valid configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddingConfig {
    /// `local` (the default) or `openai` ([`Provider`]).
    pub provider: Provider,
    /// Directory written by `deploy/export-model.sh`.
    /// Default: `$FRESHET_HOME/models/all-MiniLM-L6-v2-int8` ([`DEFAULT_MODEL_DIR_NAME`]).
    pub model_dir: PathBuf,
    /// Model id: names the vector space in the Milvus collection and in cache keys (a quantized
    /// export adds its quantization to the cache keys only). Default: derived from
    /// `freshet-model.json` and the settings that change vectors. Set it explicitly only to pin
    /// it across re-exports of the same model.
    pub model_id: Option<String>,
    /// Path of `libonnxruntime.so.1.31.x`. Default: the `ORT_DYLIB_PATH` environment variable.
    pub ort_dylib_path: Option<PathBuf>,
    /// Texts per model call at most. Default 64.
    pub batch_size: usize,
    /// Local model: padded tokens per model call at most (texts × the longest text's tokens),
    /// so that a call's working memory stays bounded whatever the lengths (`crate::batching`);
    /// a text longer than this alone is still embedded, alone. 0: no bound. Default
    /// [`DEFAULT_BATCH_TOKENS`].
    pub batch_tokens: usize,
    /// Local model: ONNX Runtime's CPU memory arena. On, the arena keeps the largest call's
    /// working memory for the life of the process (measured ~0.8 GB per model after a call of
    /// 64 × 256 tokens; 481 MB for the whole pipeline at `batch_tokens` 512, where it is no
    /// faster than without); off (the default), each call's memory is freed after it, and once no model
    /// call has run for half a second the C allocator's free memory is handed back to the system.
    pub cpu_arena: bool,
    /// Tokens per text, special tokens included (longer texts are truncated; capped by the
    /// tokenizer's `model_max_length`). Default: that `model_max_length` (256 for
    /// all-MiniLM-L6-v2, 512 for multilingual-e5-small).
    pub max_length: Option<usize>,
    /// Prepended to passages before embedding (`"passage: "` for e5 models). Default: the
    /// `passage_prefix` in the model's `freshet-model.json`, else none.
    pub passage_prefix: Option<String>,
    /// Prepended to queries before embedding (`"query: "` for e5 models). Default: the
    /// `query_prefix` in the model's `freshet-model.json`, else none.
    pub query_prefix: Option<String>,
    /// ONNX Runtime intra-op threads. Default: all cores (the pipeline's shared among its
    /// `[pipeline] model_copies`).
    pub threads: Option<usize>,
    /// Local model with more than one thread: whether ONNX Runtime's threads spin waiting for
    /// the next piece of work instead of sleeping (`session.intra_op.allow_spinning`, on in
    /// ONNX Runtime). Off (the default), a waiting thread gives its core to the index writes,
    /// the query node and the services on the same machine: with one model copy on two cores
    /// updates were visible 10-15 ms sooner at p50 and the node embedded queries faster during
    /// an ingest, for a bulk ingest 1-7% slower (docs/benchmarks.md, "Freshness budget" and
    /// "Query load during ingest"). The query node's local reranker follows the same setting.
    pub spinning: bool,
    /// The languages the model's vectors mean something for (ISO 639-1 or 639-3 codes), for
    /// a model whose `freshet-model.json` does not declare them or declares them wrongly.
    /// Default: the `languages` of `freshet-model.json`. The query node leaves the vector
    /// route out of a query in a language outside them; the pipeline warns when much of the
    /// corpus is (`crate::language`).
    pub languages: Option<Vec<String>>,
    /// `provider = "openai"`: the server's OpenAI-compatible base (the part before
    /// `/embeddings`).
    pub base_url: String,
    /// `provider = "openai"`: the `model` of every request (the server's name for it).
    pub model: String,
    /// `provider = "openai"`: the API key (sent as `Authorization: Bearer`), read from this
    /// file or this environment variable, one of them or neither.
    pub api_key_file: PathBuf,
    pub api_key_env: String,
    /// `provider = "openai"`: with a key, `base_url` must be `https://` (or on this machine)
    /// unless this is set.
    pub allow_insecure_http: bool,
    /// `provider = "openai"`: the dimension the model's vectors must have. Default: learnt
    /// from the server's answer at start.
    pub dim: Option<usize>,
    /// `provider = "openai"`: requests in flight at once from this process.
    pub max_concurrent: usize,
    /// `provider = "openai"`: requests started per minute at most from this process, retries
    /// included (0: no limit).
    pub requests_per_minute: u32,
    /// `provider = "openai"`: one attempt's limit, connecting and the whole answer (ms).
    pub timeout_ms: u64,
    /// `provider = "openai"`: connecting to the server (ms).
    pub connect_timeout_ms: u64,
    /// `provider = "openai"`: the longest one request may take, retries and waits included (ms).
    pub deadline_ms: u64,
    /// `provider = "openai"`: retries of a request answered 429 or 5xx, timed out or not
    /// connected, after the first attempt.
    pub retries: u32,
    /// `provider = "openai"`: back-off before retry n, `backoff_initial_ms · 2^(n-1)` at most
    /// `backoff_max_ms`, with jitter; a `Retry-After` replaces it.
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// `provider = "openai"`: the `tokenizer.json` chunk budgets are counted with (the remote
    /// model's own for exact budgets). Default: the one in `model_dir`.
    pub tokenizer: Option<PathBuf>,
    /// The pipeline's embedding cache past this size (bytes) at start is compacted to the texts
    /// the index holds; 0: never by size.
    pub cache_max_bytes: u64,
    /// Local model: compute on a thread of its own at the lowest CPU priority (`SCHED_IDLE`),
    /// ONNX Runtime's threads too, preempted by whatever else wakes on its core
    /// (`crate::compute`). Set by the pipeline from `[pipeline] embedding_priority`; not a
    /// setting of `[embedding]` (a query node's model never runs at idle priority).
    #[serde(skip)]
    pub idle_priority: bool,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        let remote = freshet_llm::EmbeddingsConfig::default();
        EmbeddingConfig {
            provider: Provider::Local,
            model_dir: freshet_config::freshet_home()
                .join("models")
                .join(DEFAULT_MODEL_DIR_NAME),
            model_id: None,
            ort_dylib_path: None,
            batch_size: 64,
            batch_tokens: DEFAULT_BATCH_TOKENS,
            cpu_arena: false,
            max_length: None,
            passage_prefix: None,
            query_prefix: None,
            threads: None,
            spinning: false,
            languages: None,
            base_url: String::new(),
            model: String::new(),
            api_key_file: PathBuf::new(),
            api_key_env: String::new(),
            allow_insecure_http: false,
            dim: None,
            max_concurrent: remote.max_concurrent,
            requests_per_minute: remote.requests_per_minute,
            timeout_ms: remote.timeout_ms,
            connect_timeout_ms: remote.connect_timeout_ms,
            deadline_ms: remote.deadline_ms,
            retries: remote.retries,
            backoff_initial_ms: remote.backoff_initial_ms,
            backoff_max_ms: remote.backoff_max_ms,
            tokenizer: None,
            cache_max_bytes: 0,
            idle_priority: false,
        }
    }
}

impl EmbeddingConfig {
    /// A default configuration for the model in `model_dir`.
    pub fn for_model_dir(model_dir: impl Into<PathBuf>) -> Self {
        EmbeddingConfig {
            model_dir: model_dir.into(),
            ..Default::default()
        }
    }

    /// Checks the values that have no natural meaning when zero, and the language codes.
    pub fn validate(&self) -> Result<()> {
        if let Some(l) = &self.languages {
            crate::language::Languages::new(l)
                .map_err(|e| Error::Config(format!("embedding.languages: {e}")))?;
        }
        if self.batch_size == 0 {
            return Err(Error::Config("batch_size must be at least 1".into()));
        }
        if self.max_length.is_some_and(|m| m < 2) {
            return Err(Error::Config(
                "max_length must be at least 2 (room for [CLS] and [SEP])".into(),
            ));
        }
        if self.threads == Some(0) {
            return Err(Error::Config(
                "threads must be at least 1 (leave it unset for all cores)".into(),
            ));
        }
        if self.provider == Provider::Local {
            let remote_only = EmbeddingConfig {
                base_url: String::new(),
                model: String::new(),
                api_key_file: PathBuf::new(),
                api_key_env: String::new(),
                allow_insecure_http: false,
                dim: None,
                tokenizer: None,
                ..self.clone()
            };
            let d = EmbeddingConfig::default();
            let timing = self.requests_per_minute != d.requests_per_minute
                || (
                    self.max_concurrent,
                    self.timeout_ms,
                    self.connect_timeout_ms,
                    self.deadline_ms,
                    self.retries,
                    self.backoff_initial_ms,
                    self.backoff_max_ms,
                ) != (
                    d.max_concurrent,
                    d.timeout_ms,
                    d.connect_timeout_ms,
                    d.deadline_ms,
                    d.retries,
                    d.backoff_initial_ms,
                    d.backoff_max_ms,
                );
            if remote_only != *self || timing {
                return Err(Error::Config(
                    "embedding: base_url, model, api_key_file, api_key_env, allow_insecure_http,                      dim, tokenizer and the timeouts, retries and max_concurrent are settings of                      a remote model; set provider = \"openai\" to use one, or remove them to                      embed with the local model"
                        .into(),
                ));
            }
        } else {
            self.remote()
                .settings(&|name| std::env::var(name).ok())
                .map_err(|e| Error::Config(format!("{e:#}")))?;
        }
        Ok(())
    }

    /// The remote model's settings (`provider = "openai"`), as the client takes them.
    pub fn remote(&self) -> freshet_llm::EmbeddingsConfig {
        freshet_llm::EmbeddingsConfig {
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            api_key_file: self.api_key_file.clone(),
            api_key_env: self.api_key_env.clone(),
            allow_insecure_http: self.allow_insecure_http,
            dim: self.dim,
            batch_size: self.batch_size,
            max_concurrent: self.max_concurrent,
            requests_per_minute: self.requests_per_minute,
            timeout_ms: self.timeout_ms,
            connect_timeout_ms: self.connect_timeout_ms,
            deadline_ms: self.deadline_ms,
            retries: self.retries,
            backoff_initial_ms: self.backoff_initial_ms,
            backoff_max_ms: self.backoff_max_ms,
        }
    }

    /// The `tokenizer.json` that counts chunk tokens and packs context: the local model's,
    /// or for a remote model `tokenizer` (default: the one in `model_dir`).
    pub fn tokenizer_path(&self) -> PathBuf {
        match (&self.provider, &self.tokenizer) {
            (Provider::Openai, Some(t)) => t.clone(),
            _ => self.model_dir.join("tokenizer.json"),
        }
    }

    /// The runtime library: see [`find_ort_library`].
    pub fn resolved_ort_dylib_path(&self) -> std::result::Result<PathBuf, String> {
        find_ort_library(self.ort_dylib_path.as_deref())
    }
}

/// The ONNX Runtime library: `explicit` (`ort_dylib_path`), else `$ORT_DYLIB_PATH`, else the one
/// `deploy/install.sh` puts in the local install's Python venv
/// (`$FRESHET_HOME/venv/lib/python3.*/site-packages/onnxruntime/capi/libonnxruntime.so.*`, the
/// newest). `Err` says where it looked. Shared by the embedder and the reranker.
pub fn find_ort_library(explicit: Option<&Path>) -> std::result::Result<PathBuf, String> {
    let env = std::env::var_os("ORT_DYLIB_PATH");
    find_ort_library_in(explicit, env.as_deref(), &freshet_config::freshet_home())
}

/// [`find_ort_library`] with the variable's value and the install's home given.
fn find_ort_library_in(
    explicit: Option<&Path>,
    env: Option<&std::ffi::OsStr>,
    home: &Path,
) -> std::result::Result<PathBuf, String> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = env.filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let lib = home.join("venv").join("lib");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join("site-packages/onnxruntime/capi"))
        .flat_map(|capi| std::fs::read_dir(capi).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libonnxruntime.so."))
        })
        .collect();
    found.sort_by_key(|p| {
        p.file_name()
            .and_then(|n| crate::embedder::ort_version_from_file_name(&n.to_string_lossy()))
    });
    found.pop().ok_or_else(|| {
        format!(
            "no ONNX Runtime library: [embedding] ort_dylib_path and ORT_DYLIB_PATH are unset, and \
             there is none under {}/python3.*/site-packages/onnxruntime/capi/ (deploy/install.sh \
             puts onnxruntime==1.31.1 there; or set ORT_DYLIB_PATH to a \
             libonnxruntime.so.1.31.1)",
            lib.display()
        )
    })
}

/// `freshet-model.json`: what the exporter (`model-export/`) records about an exported model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelMeta {
    /// Upstream model id, e.g. `sentence-transformers/all-MiniLM-L6-v2`.
    pub model_id: String,
    /// Vector dimension.
    pub dim: usize,
    /// `"mean"` or `"cls"`.
    pub pooling: String,
    /// Whether vectors are meant to be L2-normalised (freshet always normalises).
    #[serde(default = "yes")]
    pub normalize: bool,
    /// sha256 (hex) of model.onnx.
    #[serde(default)]
    pub sha256: Option<String>,
    /// sha256 (hex) of the weights the model was exported from.
    #[serde(default)]
    pub source_sha256: Option<String>,
    /// Where the weights came from.
    #[serde(default)]
    pub source: Option<String>,
    /// The prefixes the model was trained with (used unless the configuration sets others).
    #[serde(default)]
    pub passage_prefix: Option<String>,
    #[serde(default)]
    pub query_prefix: Option<String>,
    /// `"int8"` for a quantized export (`deploy/export-model.sh --model all-MiniLM-L6-v2-int8`): the same
    /// vector space as the float export of the same weights, computed approximately.
    #[serde(default)]
    pub quantization: Option<String>,
    /// The languages the model was trained for (ISO 639 codes): `["en"]` for all-MiniLM-L6-v2,
    /// XLM-R's hundred for multilingual-e5-small. Absent: unknown, and every route runs for
    /// every query (with a warning at start).
    #[serde(default)]
    pub languages: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

/// Name of the metadata file in a model directory.
pub(crate) const META_FILE: &str = "freshet-model.json";

impl ModelMeta {
    /// Reads and checks `<dir>/freshet-model.json`.
    pub fn read(dir: &Path) -> Result<ModelMeta> {
        let path = dir.join(META_FILE);
        let bad = |reason: String| Error::Model {
            dir: dir.to_path_buf(),
            reason,
        };
        let bytes =
            std::fs::read(&path).map_err(|e| bad(format!("cannot read {META_FILE}: {e}")))?;
        let meta: ModelMeta = serde_json::from_slice(&bytes)
            .map_err(|e| bad(format!("{META_FILE} is malformed: {e}")))?;
        if meta.dim == 0 {
            return Err(bad(format!("{META_FILE}: dim must be positive")));
        }
        if meta.model_id.is_empty() {
            return Err(bad(format!("{META_FILE}: model_id is empty")));
        }
        if meta
            .quantization
            .as_deref()
            .is_some_and(|q| q.trim().is_empty())
        {
            return Err(bad(format!("{META_FILE}: quantization is empty")));
        }
        if let Some(l) = &meta.languages {
            crate::language::Languages::new(l)
                .map_err(|e| bad(format!("{META_FILE}: languages: {e}")))?;
        }
        if !matches!(meta.pooling.as_str(), "mean" | "cls") {
            return Err(bad(format!(
                "{META_FILE}: pooling {:?} is not supported (mean or cls)",
                meta.pooling
            )));
        }
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_missing_fields() {
        let c: EmbeddingConfig = serde_json::from_str(r#"{"batch_size": 8}"#).unwrap();
        assert_eq!(c.batch_size, 8);
        assert_eq!(c.max_length, None);
        assert_eq!(c.passage_prefix, None);
        assert!(c.model_dir.ends_with("models/all-MiniLM-L6-v2-int8"));
        assert_eq!(
            c,
            EmbeddingConfig {
                batch_size: 8,
                ..Default::default()
            }
        );
        assert!(serde_json::from_str::<EmbeddingConfig>(r#"{"batchsize": 8}"#).is_err());
        assert!(EmbeddingConfig {
            batch_size: 0,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(EmbeddingConfig::default().validate().is_ok());
    }

    #[test]
    fn the_runtime_library_is_found_in_the_local_install() {
        let home = tempfile::tempdir().unwrap();
        let e = find_ort_library_in(None, None, home.path()).unwrap_err();
        assert!(
            e.contains("ORT_DYLIB_PATH") && e.contains(&home.path().display().to_string()),
            "{e}"
        );
        let capi = home
            .path()
            .join("venv/lib/python3.11/site-packages/onnxruntime/capi");
        std::fs::create_dir_all(&capi).unwrap();
        for v in ["1.9.0", "1.31.1", "1.20.0"] {
            std::fs::write(capi.join(format!("libonnxruntime.so.{v}")), b"").unwrap();
        }
        std::fs::write(capi.join("other.so"), b"").unwrap();
        assert_eq!(
            find_ort_library_in(None, None, home.path()),
            Ok(capi.join("libonnxruntime.so.1.31.1")),
            "the newest"
        );
        let env = std::ffi::OsStr::new("/env/libonnxruntime.so.1.31.1");
        assert_eq!(
            find_ort_library_in(None, Some(env), home.path()),
            Ok(PathBuf::from(env))
        );
        let explicit = Path::new("/explicit/lib.so");
        assert_eq!(
            find_ort_library_in(Some(explicit), Some(env), home.path()),
            Ok(explicit.to_path_buf())
        );
    }

    #[test]
    fn meta_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            ModelMeta::read(dir.path()),
            Err(Error::Model { .. })
        ));
        std::fs::write(
            dir.path().join(META_FILE),
            r#"{"model_id": "m", "dim": 4, "pooling": "max"}"#,
        )
        .unwrap();
        let e = ModelMeta::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("pooling"), "{e}");
        std::fs::write(
            dir.path().join(META_FILE),
            r#"{"model_id": "m", "dim": 4, "pooling": "mean", "extra": 1}"#,
        )
        .unwrap();
        let m = ModelMeta::read(dir.path()).unwrap();
        assert_eq!((m.dim, m.normalize), (4, true));
        assert_eq!((m.quantization, m.languages), (None, None));
        std::fs::write(
            dir.path().join(META_FILE),
            r#"{"model_id": "m", "dim": 4, "pooling": "mean", "languages": ["en", "english"]}"#,
        )
        .unwrap();
        let e = ModelMeta::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("\"english\" is not an ISO 639"), "{e}");
        let bad = EmbeddingConfig {
            languages: Some(vec!["zz".into()]),
            ..Default::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("embedding.languages"));
        std::fs::write(
            dir.path().join(META_FILE),
            r#"{"model_id": "m", "dim": 4, "pooling": "mean", "quantization": "int8"}"#,
        )
        .unwrap();
        let m = ModelMeta::read(dir.path()).unwrap();
        assert_eq!(m.quantization.as_deref(), Some("int8"));
        std::fs::write(
            dir.path().join(META_FILE),
            r#"{"model_id": "m", "dim": 4, "pooling": "mean", "quantization": " "}"#,
        )
        .unwrap();
        let e = ModelMeta::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("quantization is empty"), "{e}");
    }
}
