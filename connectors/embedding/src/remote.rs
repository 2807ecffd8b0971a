//! [`RemoteEmbedder`]: vectors from an OpenAI-compatible `/embeddings` server
//! (`[embedding] provider = "openai"`) through `freshet_llm`'s [`EmbeddingsClient`], behind the
//! same blocking interface as the local model. Its model id, `openai:<host>[:port]<path>/<model>`
//! (plus the passage prefix), names the vector space in the Milvus collection and the cache
//! keys, so vectors of another provider, server or model never mix with its own. A failure of
//! the server (timeout, 429, 5xx, unreachable, after the client's retries) is an
//! [`Error::Remote`] with `outage` set: about no text, it stalls the pipeline; a request the
//! server refuses (a text too long) may be about one text, and is isolated to it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use freshet_core::chunk::HfTokenCounter;
use freshet_core::embed::l2_normalize;
use freshet_llm::{EmbeddingsClient, EmbeddingsMetrics};

use crate::config::EmbeddingConfig;
use crate::error::{Error, Result};
use crate::language::Languages;

/// The window assumed for a remote model when `[embedding] max_length` is unset (tokens).
pub const DEFAULT_REMOTE_MAX_LENGTH: usize = 512;

/// A remote embedding model. Cheap to clone: clones share the client (its slots) and the
/// runtime it runs on.
#[derive(Clone)]
pub struct RemoteEmbedder {
    client: EmbeddingsClient,
    runtime: Arc<tokio::runtime::Runtime>,
    model_id: String,
    dim: usize,
    languages: Option<Languages>,
    batch_size: usize,
    max_length: usize,
    passage_prefix: String,
    query_prefix: String,
    tokenizer: PathBuf,
}

impl std::fmt::Debug for RemoteEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteEmbedder")
            .field("model_id", &self.model_id)
            .field("endpoint", &self.client.endpoint())
            .field("dim", &self.dim)
            .finish_non_exhaustive()
    }
}

/// The clients of this process by configuration: every embedder of one configuration shares
/// one client (so `max_concurrent` holds for the process) and one runtime, never dropped (a
/// runtime may not be dropped inside another's tasks).
type Shared = Vec<(
    EmbeddingConfig,
    EmbeddingsClient,
    Arc<tokio::runtime::Runtime>,
)>;
static CLIENTS: OnceLock<Mutex<Shared>> = OnceLock::new();

fn shared_client(
    config: &EmbeddingConfig,
    metrics: Option<&EmbeddingsMetrics>,
) -> Result<(EmbeddingsClient, Arc<tokio::runtime::Runtime>)> {
    // Settings that do not reach the server do not split clients.
    let key = EmbeddingConfig {
        threads: None,
        ..config.clone()
    };
    let mut clients = CLIENTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some((_, c, rt)) = clients.iter().find(|(k, _, _)| *k == key) {
        return Ok((c.clone(), rt.clone()));
    }
    let settings = config
        .remote()
        .settings(&|name| std::env::var(name).ok())
        .map_err(|e| Error::Config(format!("{e:#}")))?;
    let mut client =
        EmbeddingsClient::new(settings).map_err(|e| Error::Config(format!("{e:#}")))?;
    if let Some(m) = metrics {
        client = client.with_metrics(m.clone());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("freshet-embed-http")
        .enable_all()
        .build()
        .map_err(|e| Error::Config(format!("starting the embedding client's runtime: {e}")))?;
    let runtime = Arc::new(runtime);
    clients.push((key, client.clone(), runtime.clone()));
    Ok((client, runtime))
}

impl RemoteEmbedder {
    /// The remote model of `config` (`provider = "openai"`): the settings checked, then one
    /// request that must answer (it learns or checks the dimension). `metrics`, given by the
    /// first embedder of a configuration in a process, records its requests.
    pub fn load(config: &EmbeddingConfig, metrics: Option<&EmbeddingsMetrics>) -> Result<Self> {
        config.validate()?;
        let (client, runtime) = shared_client(config, metrics)?;
        let settings = client.settings();
        let passage_prefix = config.passage_prefix.clone().unwrap_or_default();
        let query_prefix = config.query_prefix.clone().unwrap_or_default();
        let mut model_id = match &config.model_id {
            Some(pinned) => format!("openai:{pinned}"),
            None => settings.model_id(),
        };
        if !passage_prefix.is_empty() {
            model_id.push_str(&format!("|passage_prefix:{passage_prefix:?}"));
        }
        let languages = match &config.languages {
            Some(codes) => Some(Languages::new(codes).map_err(Error::Config)?),
            None => {
                tracing::warn!(%model_id,
                    "the remote embedding model's languages are unknown ([embedding] languages \
                     unset): every route runs for every query, whatever its language; set \
                     languages to the codes it covers, or [\"all\"]");
                None
            }
        };
        let mut me = RemoteEmbedder {
            client,
            runtime,
            model_id,
            dim: 0,
            languages,
            batch_size: config.batch_size,
            max_length: config.max_length.unwrap_or(DEFAULT_REMOTE_MAX_LENGTH),
            passage_prefix,
            query_prefix,
            tokenizer: config.tokenizer_path(),
        };
        let probe = me.embed_raw(&["dimension probe"], "").map_err(|e| {
            Error::Config(format!(
                "the embedding server {} does not embed with model {:?}: {e}; check \
                 embedding.base_url and embedding.model, and that the server is running",
                me.client.endpoint(),
                me.client.settings().model
            ))
        })?;
        me.dim = probe[0].len();
        tracing::info!(model_id = %me.model_id, endpoint = %me.client.endpoint(), dim = me.dim,
            "remote embedding model answers");
        Ok(me)
    }

    /// Unit-length vectors of `texts` with `prefix`, in order (blocking; any thread).
    pub(crate) fn embed_raw(&self, texts: &[&str], prefix: &str) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inputs: Vec<String> = texts.iter().map(|t| format!("{prefix}{t}")).collect();
        let client = self.client.clone();
        // Run on the client's runtime and wait here: callable from plain threads and from
        // inside another runtime alike.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            let _ = tx.send(client.embed(&inputs).await);
        });
        let mut vectors = rx
            .recv()
            .map_err(|_| {
                Error::Embed("the embedding client's task ended without an answer".into())
            })?
            .map_err(|e| Error::Remote {
                class: e.class(),
                outage: e.is_outage(),
                message: e.to_string(),
            })?;
        if self.dim != 0 {
            if let Some(v) = vectors.iter().find(|v| v.len() != self.dim) {
                return Err(Error::Remote {
                    class: "bad_response",
                    outage: false,
                    message: format!(
                        "a {}-dimensional vector from a {}-dimensional model",
                        v.len(),
                        self.dim
                    ),
                });
            }
        }
        vectors.iter_mut().for_each(|v| l2_normalize(v));
        Ok(vectors)
    }

    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn languages(&self) -> Option<&Languages> {
        self.languages.as_ref()
    }

    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The model's window in tokens (`[embedding] max_length`, default
    /// [`DEFAULT_REMOTE_MAX_LENGTH`]), as counted by [`RemoteEmbedder::token_counter`].
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    pub fn prefixes(&self) -> (&str, &str) {
        (&self.passage_prefix, &self.query_prefix)
    }

    /// The chunker's token counter: `[embedding] tokenizer` (default: the local model's), the
    /// passage prefix counted as overhead.
    pub fn token_counter(&self) -> Result<HfTokenCounter> {
        let counter = HfTokenCounter::from_file(&self.tokenizer).map_err(|e| {
            Error::Config(format!(
                "embedding.tokenizer {}: {e} (chunk budgets are counted with it; point it at \
                 the remote model's tokenizer.json)",
                self.tokenizer.display()
            ))
        })?;
        Ok(counter.with_passage_prefix(&self.passage_prefix))
    }

    /// The client's endpoint (`<base_url>/embeddings`).
    pub fn endpoint(&self) -> &str {
        self.client.endpoint()
    }
}

#[cfg(test)]
mod tests;
