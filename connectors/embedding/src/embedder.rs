//! [`FastEmbedder`]: a fastembed `TextEmbedding` over a user-defined ONNX model, with ONNX Runtime
//! loaded dynamically and every failure at load turned into an [`Error`].

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use fastembed::{
    InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel,
};
use freshet_core::chunk::HfTokenCounter;
use freshet_core::embed::{l2_normalize, EmbedError, Embedder};

use crate::compute::Compute;
use crate::config::{EmbeddingConfig, ModelMeta, META_FILE};
use crate::error::{panic_message, Error, Result};
use crate::language::Languages;

/// Oldest ONNX Runtime minor version accepted (1.x): what `ort` 2.0.0-rc.15 with fastembed's
/// `api-24` requires. freshet deploys 1.31.1.
pub const MIN_ORT_MINOR: u32 = 24;

/// Files of an ONNX model directory that fastembed reads.
pub(crate) const ONNX_MODEL_FILES: [&str; 5] = [
    "model.onnx",
    "tokenizer.json",
    "config.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
];

/// ONNX Runtime's session setting that lets its threads spin between pieces of work
/// (`[embedding] spinning = false` sets it to "0", for embedders and rerankers alike).
pub(crate) const ORT_ALLOW_SPINNING: &str = "session.intra_op.allow_spinning";

/// A local sentence-embedding model (fastembed + ONNX Runtime).
///
/// Vectors are mean- or CLS-pooled as `freshet-model.json` says and always L2-normalised.
/// [`Embedder::model_id`] is the upstream model id plus everything that changes vectors (the
/// weights' sha256 prefix, the effective max length, a passage prefix), so caches keyed by it
/// never serve vectors of another model or setting, unless [`EmbeddingConfig::model_id`] pins it.
pub struct FastEmbedder {
    model: TextEmbedding,
    /// Where the model's calls run (`crate::compute`).
    compute: Compute,
    meta: ModelMeta,
    languages: Option<Languages>,
    model_id: String,
    cache_id: String,
    model_dir: PathBuf,
    batch_size: usize,
    batch_tokens: usize,
    cpu_arena: bool,
    max_length: usize,
    passage_prefix: String,
    query_prefix: String,
}

impl std::fmt::Debug for FastEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastEmbedder")
            .field("model_id", &self.model_id)
            .field("model_dir", &self.model_dir)
            .field("dim", &self.meta.dim)
            .field("batch_size", &self.batch_size)
            .field("batch_tokens", &self.batch_tokens)
            .field("max_length", &self.max_length)
            .finish_non_exhaustive()
    }
}

impl FastEmbedder {
    /// Loads the model of `config`.
    ///
    /// Order: the configuration; the ONNX Runtime library path (set, a regular ELF file, at least
    /// version 1.[`MIN_ORT_MINOR`] when its name carries one); the model directory and its files;
    /// only then ONNX Runtime itself (loaded from that path, not from the environment) and the
    /// session. One process can load one runtime library: asking for another path later is an
    /// error. Panics inside ONNX Runtime/fastembed are caught and returned as errors.
    pub fn load(config: &EmbeddingConfig) -> Result<Self> {
        if config.provider != crate::config::Provider::Local {
            return Err(Error::Config(format!(
                "provider = {:?}: this embeds with the local ONNX model only; load the \
                 configured model with EmbeddingModel::load",
                config.provider
            )));
        }
        config.validate()?;
        let ort_path = check_ort_library(config.resolved_ort_dylib_path())?;
        let dir = &config.model_dir;
        let files = read_model_dir(dir, &[META_FILE])?;
        let meta = ModelMeta::read(dir)?;
        let tokenizer_max = tokenizer_max_length(dir, &files.tokenizer_config_file)?;
        let max_length = config
            .max_length
            .map_or(tokenizer_max, |m| m.min(tokenizer_max));
        let passage_prefix = resolve_prefix(
            "passage_prefix",
            &config.passage_prefix,
            &meta.passage_prefix,
            &meta.model_id,
        );
        let query_prefix = resolve_prefix(
            "query_prefix",
            &config.query_prefix,
            &meta.query_prefix,
            &meta.model_id,
        );

        init_ort(&ort_path)?;

        let pooling = if meta.pooling == "cls" {
            Pooling::Cls
        } else {
            Pooling::Mean
        };
        let model =
            UserDefinedEmbeddingModel::new(files.onnx, files.tokenizer).with_pooling(pooling);
        // The CPU provider registered explicitly, to set its arena (ONNX Runtime's own default
        // keeps the arena on).
        let cpu = ort::ep::CPU::default()
            .with_arena_allocator(config.cpu_arena)
            .build();
        let mut options = InitOptionsUserDefined::new()
            .with_max_length(max_length)
            .with_execution_providers(vec![cpu]);
        if let Some(t) = config.threads {
            options = options.with_intra_threads(t);
        }
        if !config.spinning {
            options = options.with_session_config(ORT_ALLOW_SPINNING, "0");
        }
        let load_err = |reason: String| Error::Load {
            dir: dir.clone(),
            reason,
        };
        // Loaded where it will compute, so that ONNX Runtime's threads start there.
        let compute = Compute::new(config.idle_priority)?;
        let model = compute.run(|| {
            load_guarded(dir, || {
                TextEmbedding::try_new_from_user_defined(model, options)
            })
        })?;

        let model_id = config
            .model_id
            .clone()
            .unwrap_or_else(|| derived_model_id(&meta, max_length, &passage_prefix));
        let cache_id = derived_cache_id(&model_id, &meta);
        let languages = match config.languages.as_ref().or(meta.languages.as_ref()) {
            Some(codes) => Some(Languages::new(codes).map_err(Error::Config)?),
            None => {
                tracing::warn!(dir = %dir.display(),
                    "the model declares no languages (freshet-model.json `languages`, or \
                     [embedding] languages): every route runs for every query, whatever its \
                     language");
                None
            }
        };
        let mut me = FastEmbedder {
            languages,
            model,
            compute,
            meta,
            model_id,
            cache_id,
            model_dir: dir.clone(),
            batch_size: config.batch_size,
            batch_tokens: config.batch_tokens,
            cpu_arena: config.cpu_arena,
            max_length,
            passage_prefix,
            query_prefix,
        };
        // The model must produce what freshet-model.json promises.
        let probe = me
            .embed_raw(&["dimension probe"], "")
            .map_err(|e| load_err(format!("test inference failed: {e}")))?;
        if probe[0].len() != me.meta.dim {
            return Err(load_err(format!(
                "the model produces {}-dimensional vectors but {META_FILE} says {}",
                probe[0].len(),
                me.meta.dim
            )));
        }
        tracing::info!(model_id = %me.model_id, cache_id = %me.cache_id, dir = %dir.display(), dim = me.meta.dim,
            max_length, ort = %ort_path.display(), "embedding model loaded");
        Ok(me)
    }

    /// Embeds one search query (with the query prefix); unit length.
    pub fn embed_query(&mut self, text: &str) -> Result<Vec<f32>> {
        let prefix = self.query_prefix.clone();
        let mut out = self.embed_raw(&[text], &prefix)?;
        Ok(out.pop().expect("one text in, one vector out"))
    }

    /// Embeds search queries (with the query prefix); unit length, in input order.
    pub fn embed_queries(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let prefix = self.query_prefix.clone();
        self.embed_raw(texts, &prefix)
    }

    /// Embeds passages (with the passage prefix); unit length, in input order.
    pub fn embed_passage_texts(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let prefix = self.passage_prefix.clone();
        self.embed_raw(texts, &prefix)
    }

    fn embed_raw(&mut self, texts: &[&str], prefix: &str) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inputs: Vec<String> = texts.iter().map(|t| format!("{prefix}{t}")).collect();
        // Texts are padded to the longest of their model call: run them sorted by token count
        // so that similar lengths share a call, cut into calls of at most `batch_size` texts and
        // `batch_tokens` padded tokens (`crate::batching`), and put the vectors back in input
        // order afterwards.
        let lengths = self.token_lengths(&inputs)?;
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| lengths[i]);
        let sorted_lengths: Vec<usize> = order.iter().map(|&i| lengths[i]).collect();
        let plan = crate::batching::plan(&sorted_lengths, self.batch_size, self.batch_tokens);
        let padded: usize = plan
            .iter()
            .map(|r| r.len() * sorted_lengths[r.end - 1])
            .sum();
        let mut vectors = vec![Vec::new(); texts.len()];
        // Without the arena, the free heap is handed back once the models fall idle (`heap`).
        let _call = (!self.cpu_arena).then(|| crate::heap::call(padded));
        for range in plan {
            let ids = &order[range];
            let batch: Vec<&str> = ids.iter().map(|&i| inputs[i].as_str()).collect();
            let n = batch.len();
            let model = &mut self.model;
            let out = self
                .compute
                .run(|| catch_unwind(AssertUnwindSafe(|| model.embed(&batch, Some(n)))))
                .map_err(|p| {
                    Error::Embed(format!("ONNX Runtime panicked: {}", panic_message(&*p)))
                })?
                .map_err(|e| Error::Embed(e.to_string()))?;
            if out.len() != n {
                return Err(Error::Embed(format!(
                    "{n} texts in, {} vectors out",
                    out.len()
                )));
            }
            for (&i, mut v) in ids.iter().zip(out) {
                l2_normalize(&mut v);
                vectors[i] = v;
            }
        }
        Ok(vectors)
    }

    /// Tokens of each input as the model will see it (special tokens included, truncated to
    /// `max_length`): the attention mask's ones, whatever padding the tokenizer applies.
    fn token_lengths(&self, inputs: &[String]) -> Result<Vec<usize>> {
        if self.batch_tokens == 0 {
            // No token bound: byte length orders the texts well enough.
            return Ok(inputs.iter().map(|t| t.len()).collect());
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        let tokenizer = &self.model.tokenizer;
        let encodings = catch_unwind(AssertUnwindSafe(|| tokenizer.encode_batch(refs, true)))
            .map_err(|p| Error::Embed(format!("the tokenizer panicked: {}", panic_message(&*p))))?
            .map_err(|e| Error::Embed(format!("tokenizing: {e}")))?;
        Ok(encodings
            .iter()
            .map(|e| e.get_attention_mask().iter().filter(|&&m| m != 0).count())
            .collect())
    }

    /// `freshet-model.json` of the loaded model.
    /// The languages the model covers, as declared; `None` when undeclared.
    pub fn languages(&self) -> Option<&Languages> {
        self.languages.as_ref()
    }

    pub fn meta(&self) -> &ModelMeta {
        &self.meta
    }

    /// The directory the model was loaded from.
    pub fn model_dir(&self) -> &Path {
        &self.model_dir
    }

    /// Tokens per text after the tokenizer's own limit (texts are truncated to this).
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// The prefixes in effect for passages and queries (configured, else the model's).
    pub fn prefixes(&self) -> (&str, &str) {
        (&self.passage_prefix, &self.query_prefix)
    }

    /// The chunker's token counter for this model: its `tokenizer.json`, with the special
    /// tokens and the passage prefix that every embedded input carries counted as overhead
    /// ([`freshet_core::chunk::TokenCounter::input_overhead`]), so that chunk budgets hold the whole input.
    pub fn token_counter(&self) -> Result<HfTokenCounter> {
        let path = self.model_dir.join("tokenizer.json");
        let counter = HfTokenCounter::from_file(&path).map_err(|e| Error::Load {
            dir: self.model_dir.clone(),
            reason: e.to_string(),
        })?;
        Ok(counter.with_passage_prefix(&self.passage_prefix))
    }

    /// Refuses a chunk budget larger than the model's window (`max_length`): such chunks
    /// would be embedded truncated. `what` names the setting in the message.
    pub fn check_budget(&self, what: &str, max_tokens: usize) -> Result<()> {
        if max_tokens > self.max_length {
            return Err(Error::Config(format!(
                "{what} ({max_tokens}) exceeds the embedding model's window ({} tokens, \
                 embedding.max_length or the tokenizer's limit): chunks that long would be \
                 embedded truncated; lower {what}",
                self.max_length
            )));
        }
        Ok(())
    }

    /// Texts per model call at most.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Padded tokens per model call at most (0: no bound).
    pub fn batch_tokens(&self) -> usize {
        self.batch_tokens
    }

    /// The fastembed model (its `tokenizer` field is the tokenizer in use).
    pub fn inner(&self) -> &TextEmbedding {
        &self.model
    }
}

impl Embedder for FastEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn cache_id(&self) -> &str {
        &self.cache_id
    }

    fn dim(&self) -> usize {
        self.meta.dim
    }

    fn embed_passages(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(self.embed_passage_texts(texts)?)
    }
}

/// The prefix in effect: the configured one, else the one the model was trained with
/// (`freshet-model.json`), else none. A configured prefix that differs from the model's is
/// allowed (users may know better) but logged.
fn resolve_prefix(
    name: &str,
    configured: &Option<String>,
    trained: &Option<String>,
    model: &str,
) -> String {
    match (configured, trained) {
        (Some(c), Some(t)) if c != t => {
            tracing::warn!(model, expected = %t, configured = %c,
                "{name} differs from the one the model was trained with");
            c.clone()
        }
        (Some(c), _) => c.clone(),
        (None, t) => t.clone().unwrap_or_default(),
    }
}

/// `<upstream id>|weights:<12 hex>|max_length:<n>[|passage_prefix:<p>]`: everything that changes
/// vectors beyond float noise. The weights' hash (not model.onnx's) so that re-exporting the same
/// weights with another graph layout keeps the cache; `onnx:<12 hex>` when the weights' hash is
/// not recorded.
fn derived_model_id(meta: &ModelMeta, max_length: usize, passage_prefix: &str) -> String {
    let mut id = meta.model_id.clone();
    let hash = |label: &str, h: &str| format!("|{label}:{}", &h[..h.len().min(12)]);
    if let Some(h) = &meta.source_sha256 {
        id.push_str(&hash("weights", h));
    } else if let Some(h) = &meta.sha256 {
        id.push_str(&hash("onnx", h));
    }
    id.push_str(&format!("|max_length:{max_length}"));
    if !passage_prefix.is_empty() {
        id.push_str(&format!("|passage_prefix:{passage_prefix:?}"));
    }
    id
}

/// The model id, plus `|quantization:<q>` for a quantized export: its vectors belong to the same
/// space (the Milvus collection and the query node accept them) but are not the float export's,
/// so the embedding cache keeps them apart.
fn derived_cache_id(model_id: &str, meta: &ModelMeta) -> String {
    match &meta.quantization {
        Some(q) => format!("{model_id}|quantization:{q}"),
        None => model_id.to_owned(),
    }
}

pub(crate) struct ModelFiles {
    pub(crate) onnx: Vec<u8>,
    pub(crate) tokenizer: TokenizerFiles,
    pub(crate) tokenizer_config_file: Vec<u8>,
}

/// Runs a fastembed constructor, turning its error or a panic inside ONNX Runtime into
/// [`Error::Load`] for `dir`.
pub(crate) fn load_guarded<T, E: std::fmt::Display>(
    dir: &Path,
    f: impl FnOnce() -> std::result::Result<T, E>,
) -> Result<T> {
    let load_err = |reason: String| Error::Load {
        dir: dir.to_path_buf(),
        reason,
    };
    catch_unwind(AssertUnwindSafe(f))
        .map_err(|p| load_err(format!("ONNX Runtime panicked: {}", panic_message(&*p))))?
        .map_err(|e| load_err(e.to_string()))
}

/// Reads the ONNX model files of `dir`; `extra` names further files that must exist.
pub(crate) fn read_model_dir(dir: &Path, extra: &[&str]) -> Result<ModelFiles> {
    let bad = |reason: String| Error::Model {
        dir: dir.to_path_buf(),
        reason,
    };
    if !dir.is_dir() {
        return Err(bad(
            "does not exist or is not a directory; export the model with deploy/export-model.sh \
             (or set model_dir)"
                .into(),
        ));
    }
    let missing: Vec<&str> = ONNX_MODEL_FILES
        .iter()
        .chain(extra)
        .copied()
        .filter(|f| !dir.join(f).is_file())
        .collect();
    if !missing.is_empty() {
        return Err(bad(format!(
            "missing {}; re-run deploy/export-model.sh",
            missing.join(", ")
        )));
    }
    let read = |f: &str| std::fs::read(dir.join(f)).map_err(|e| bad(format!("reading {f}: {e}")));
    let tokenizer_config_file = read("tokenizer_config.json")?;
    Ok(ModelFiles {
        onnx: read("model.onnx")?,
        tokenizer: TokenizerFiles {
            tokenizer_file: read("tokenizer.json")?,
            config_file: read("config.json")?,
            special_tokens_map_file: read("special_tokens_map.json")?,
            tokenizer_config_file: tokenizer_config_file.clone(),
        },
        tokenizer_config_file,
    })
}

/// `model_max_length` of tokenizer_config.json (fastembed truncates to min(it, max_length)).
pub(crate) fn tokenizer_max_length(dir: &Path, tokenizer_config: &[u8]) -> Result<usize> {
    let v: serde_json::Value =
        serde_json::from_slice(tokenizer_config).map_err(|e| Error::Model {
            dir: dir.to_path_buf(),
            reason: format!("tokenizer_config.json is malformed: {e}"),
        })?;
    v["model_max_length"]
        .as_f64()
        .filter(|n| *n >= 2.0)
        .map(|n| n.min(usize::MAX as f64) as usize)
        .ok_or_else(|| Error::Model {
            dir: dir.to_path_buf(),
            reason: "tokenizer_config.json lacks a numeric model_max_length".into(),
        })
}

/// Checks the runtime library path on the file system only (ONNX Runtime is not touched).
pub(crate) fn check_ort_library(path: std::result::Result<PathBuf, String>) -> Result<PathBuf> {
    let path = path.map_err(Error::OrtLibrary)?;
    let bad = |what: String| Error::OrtLibrary(format!("{}: {what}", path.display()));
    let meta = std::fs::metadata(&path).map_err(|e| bad(format!("cannot access it ({e})")))?;
    if !meta.is_file() {
        return Err(bad("is not a regular file".into()));
    }
    let canonical = path
        .canonicalize()
        .map_err(|e| bad(format!("cannot resolve it ({e})")))?;
    for name in [path.file_name(), canonical.file_name()]
        .into_iter()
        .flatten()
    {
        if let Some((major, minor)) = ort_version_from_file_name(&name.to_string_lossy()) {
            if major != 1 || minor < MIN_ORT_MINOR {
                return Err(bad(format!(
                    "ONNX Runtime {major}.{minor} is not supported; need 1.{MIN_ORT_MINOR} or newer \
                     (freshet uses 1.31.1 from the onnxruntime==1.31.1 wheel)"
                )));
            }
        }
    }
    #[cfg(target_os = "linux")]
    {
        use std::io::Read;
        let mut magic = [0u8; 4];
        let ok = std::fs::File::open(&path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok();
        if !ok || magic != *b"\x7fELF" {
            return Err(bad("is not a shared library (no ELF header)".into()));
        }
    }
    Ok(path)
}

/// `libonnxruntime.so.1.31.1` -> (1, 31); `libonnxruntime.1.31.1.dylib` -> (1, 31).
pub(crate) fn ort_version_from_file_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix("libonnxruntime")?;
    let rest = rest
        .strip_prefix(".so.")
        .or_else(|| rest.strip_prefix('.'))?;
    let mut it = rest.split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// The runtime library this process loaded (canonical path).
static ORT_LOADED: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Loads ONNX Runtime from `path` once per process, as an error (not a panic) when it fails.
pub(crate) fn init_ort(path: &Path) -> Result<()> {
    let canonical = path
        .canonicalize()
        .map_err(|e| Error::OrtLibrary(format!("{}: cannot resolve it ({e})", path.display())))?;
    let mut loaded = ORT_LOADED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(prev) = loaded.as_ref() {
        if *prev == canonical {
            return Ok(());
        }
        return Err(Error::OrtLibrary(format!(
            "this process already loaded ONNX Runtime from {}; it cannot also load {}",
            prev.display(),
            path.display()
        )));
    }
    match catch_unwind(|| ort::init_from(&canonical).map(drop)) {
        Ok(Ok(())) => {
            *loaded = Some(canonical);
            Ok(())
        }
        Ok(Err(e)) => Err(Error::OrtLibrary(e.to_string())),
        Err(p) => Err(Error::OrtLibrary(format!(
            "loading {} panicked: {}",
            path.display(),
            panic_message(&*p)
        ))),
    }
}

#[cfg(test)]
mod tests;
