//! [`EmbeddingsConfig`]: the remote provider's settings as `[embedding]` holds them (with
//! `provider = "openai"`), and [`EmbeddingsSettings`], their checked form with the key read.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use freshet_config::Secret;

/// The settings of an OpenAI-compatible `/embeddings` server, named as in `[embedding]`
/// (messages say `embedding.<name>`).
#[derive(Clone, Debug, PartialEq)]
pub struct EmbeddingsConfig {
    /// The server's OpenAI-compatible base, the part before `/embeddings`.
    pub base_url: String,
    /// The `model` of every request.
    pub model: String,
    pub api_key_file: PathBuf,
    pub api_key_env: String,
    pub allow_insecure_http: bool,
    /// The vector dimension the model must return; `None`: learnt from the first answer.
    pub dim: Option<usize>,
    /// Texts per request.
    pub batch_size: usize,
    /// Requests in flight at once from this process.
    pub max_concurrent: usize,
    /// Requests started per minute at most from this process, retries included (0: no
    /// limit).
    pub requests_per_minute: u32,
    pub timeout_ms: u64,
    pub connect_timeout_ms: u64,
    pub deadline_ms: u64,
    pub retries: u32,
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
}

/// [`EmbeddingsConfig`] checked, with its key read. `Debug` never shows the key.
#[derive(Clone, Debug)]
pub struct EmbeddingsSettings {
    /// `base_url` with a trailing `/`, so that `embeddings` joins under it.
    pub base_url: reqwest::Url,
    pub model: String,
    pub api_key: Option<Secret>,
    pub dim: Option<usize>,
    pub batch_size: usize,
    pub max_concurrent: usize,
    /// The least time between two request starts (`None`: no limit).
    pub min_interval: Option<Duration>,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub deadline: Duration,
    pub retries: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

impl EmbeddingsSettings {
    /// Settings for `model` at `base_url` with the defaults of `[embedding]` (tests, tools).
    pub fn for_base(base_url: &str, model: &str) -> Result<EmbeddingsSettings> {
        EmbeddingsConfig {
            base_url: base_url.into(),
            model: model.into(),
            ..EmbeddingsConfig::default()
        }
        .settings(&|_| None)
    }

    /// `openai:<host>[:<port>]<path>/<model>`: the provider, the server and the model, the
    /// vector space's name in the Milvus collection and the cache keys.
    pub fn model_id(&self) -> String {
        let url = &self.base_url;
        let host = url.host_str().unwrap_or("");
        let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
        let path = url.path().trim_end_matches('/');
        format!("openai:{host}{port}{path}/{}", self.model)
    }
}

impl Default for EmbeddingsConfig {
    fn default() -> Self {
        EmbeddingsConfig {
            base_url: String::new(),
            model: String::new(),
            api_key_file: PathBuf::new(),
            api_key_env: String::new(),
            allow_insecure_http: false,
            dim: None,
            batch_size: 64,
            max_concurrent: 4,
            requests_per_minute: 0,
            timeout_ms: 30_000,
            connect_timeout_ms: 5_000,
            deadline_ms: 120_000,
            retries: 5,
            backoff_initial_ms: 500,
            backoff_max_ms: 10_000,
        }
    }
}

impl EmbeddingsConfig {
    /// The settings checked and the key read (`env` looks up environment variables). Every
    /// error names the setting and says what to do.
    pub fn settings(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<EmbeddingsSettings> {
        if self.base_url.trim().is_empty() {
            bail!(
                "embedding.base_url is empty: with provider = \"openai\", set it to the server's \
                 OpenAI-compatible base (e.g. http://127.0.0.1:8080/v1 for TEI, \
                 http://127.0.0.1:11434/v1 for Ollama)"
            );
        }
        let mut url = reqwest::Url::parse(self.base_url.trim()).with_context(|| {
            format!(
                "embedding.base_url {:?}: not a URL; give the server's base, e.g. \
                 http://127.0.0.1:8080/v1",
                self.base_url
            )
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            bail!(
                "embedding.base_url {:?}: not an http(s) URL with a host; give the server's \
                 base, e.g. http://127.0.0.1:8080/v1",
                self.base_url
            );
        }
        if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
            bail!(
                "embedding.base_url {:?}: has a query, a fragment or credentials; give the \
                 base only (the part before /embeddings; a key goes in embedding.api_key_file \
                 or embedding.api_key_env)",
                self.base_url
            );
        }
        if url.path().trim_end_matches('/').ends_with("/embeddings") {
            bail!(
                "embedding.base_url {:?}: give the base without /embeddings (the client adds it)",
                self.base_url
            );
        }
        if !url.path().ends_with('/') {
            let path = format!("{}/", url.path());
            url.set_path(&path);
        }
        if self.model.trim().is_empty() || self.model.trim() != self.model {
            bail!(
                "embedding.model {:?}: name the model the server embeds with (its own name for \
                 it, without surrounding spaces)",
                self.model
            );
        }
        let api_key = freshet_config::resolve_secret(
            "embedding.api_key",
            &Secret::default(),
            &self.api_key_file,
            &self.api_key_env,
            env,
        )
        .map_err(|e| {
            anyhow::anyhow!(
                "{e:#}; set embedding.api_key_file to a readable file holding the key, or \
                 embedding.api_key_env to a variable that holds it (one of the two), or neither \
                 for a server without keys"
            )
        })?;
        if api_key.is_some() {
            freshet_config::url::check_url(
                "embedding.base_url (it is sent the API key)",
                url.as_str(),
                self.allow_insecure_http,
                "embedding.allow_insecure_http",
            )?;
        }
        for (name, v) in [
            ("timeout_ms", self.timeout_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("deadline_ms", self.deadline_ms),
            ("backoff_initial_ms", self.backoff_initial_ms),
            ("backoff_max_ms", self.backoff_max_ms),
            ("batch_size", self.batch_size as u64),
            ("max_concurrent", self.max_concurrent as u64),
        ] {
            if v == 0 {
                bail!("embedding.{name} must be at least 1");
            }
        }
        if self.dim == Some(0) {
            bail!("embedding.dim must be at least 1 (or unset, to learn it from the server)");
        }
        if self.backoff_initial_ms > self.backoff_max_ms {
            bail!(
                "embedding.backoff_initial_ms ({}) exceeds embedding.backoff_max_ms ({})",
                self.backoff_initial_ms,
                self.backoff_max_ms
            );
        }
        if self.connect_timeout_ms > self.timeout_ms || self.timeout_ms > self.deadline_ms {
            bail!(
                "embedding: connect_timeout_ms ({}) <= timeout_ms ({}) <= deadline_ms ({}) must \
                 hold",
                self.connect_timeout_ms,
                self.timeout_ms,
                self.deadline_ms
            );
        }
        Ok(EmbeddingsSettings {
            base_url: url,
            model: self.model.clone(),
            api_key,
            dim: self.dim,
            batch_size: self.batch_size,
            max_concurrent: self.max_concurrent,
            min_interval: (self.requests_per_minute > 0)
                .then(|| Duration::from_secs(60) / self.requests_per_minute),
            timeout: Duration::from_millis(self.timeout_ms),
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            deadline: Duration::from_millis(self.deadline_ms),
            retries: self.retries,
            backoff_initial: Duration::from_millis(self.backoff_initial_ms),
            backoff_max: Duration::from_millis(self.backoff_max_ms),
        })
    }
}
