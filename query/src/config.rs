//! Query node configuration: the `[query]` section of the same TOML file the pipeline reads
//! (`deploy/freshet.toml`), plus the shared `[tantivy]`, `[milvus]` and `[embedding]` sections,
//! so one file and one environment configure both binaries, `[llm]` (the language model,
//! checked at start when `llm.base_url` is set; none by default), `[answer]` and `[transform]`.
//! `FRESHET_<SECTION>_<KEY>` variables override the file (`FRESHET_QUERY_LISTEN=0.0.0.0:8080`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use freshet_config::Sections;
use serde::{Deserialize, Serialize};

use freshet_embedding::EmbeddingConfig;
use freshet_llm::{LlmConfig, LlmSettings};
use freshet_milvus::MilvusConfig;
use freshet_tantivy::TantivyConfig;

use crate::answer::config::AnswerConfig;
use crate::auth::settings::{JwtConfig, KeyConfig, Limits, Secret};
use crate::fusion::FusionMethod;
use crate::language::LanguageRouting;

/// Everything the query node reads ([`sections`]; `freshet-config` drops the other binaries'
/// sections and refuses unknown ones).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub query: QueryConfig,
    pub tantivy: TantivyConfig,
    pub milvus: MilvusConfig,
    pub embedding: EmbeddingConfig,
    pub llm: LlmConfig,
    /// `[answer]`: how `POST /v1/answer` retrieves, packs and refuses by default.
    pub answer: AnswerConfig,
    pub transform: crate::transform::config::TransformConfig,
    /// `[kafka]`: the broker a replica reads the changelog from (brokers, client properties).
    pub kafka: freshet_kafka::KafkaConfig,
    /// `[replication]`: the changelog topic and its compaction settings.
    pub replication: freshet_core::changelog::config::ReplicationConfig,
    /// `[replica]`: serve an index kept from the changelog (`docs/replicas.md`).
    pub replica: crate::replica::ReplicaConfig,
    /// `[llm]` checked, its key read: `None` without `llm.base_url` (set by [`Config::load`]).
    #[serde(skip)]
    pub llm_settings: Option<LlmSettings>,
}

/// Which backend reranks, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RerankBackend {
    /// No reranker: requests asking for rerank get a 400.
    None,
    /// A local ONNX cross-encoder in `rerank_model_dir` (fastembed `TextRerank`).
    Local,
    /// A remote HTTP `/rerank` API at `rerank_url`.
    Remote,
}

/// Request/response shape of a remote rerank API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RerankApi {
    /// Hugging Face text-embeddings-inference: `{"query","texts"}` → `[{"index","score"}]`.
    Tei,
    /// Cohere / Jina: `{"model","query","documents","top_n"}` →
    /// `{"results":[{"index","relevance_score"}]}`.
    Cohere,
}

/// Milvus read consistency of the vector route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Consistency {
    /// Waits until Milvus has applied every write issued before the search (freshest, slower).
    Strong,
    /// Milvus' default: may lag writes by a little (its time tick), no waiting.
    Bounded,
    /// No guarantee at all.
    Eventually,
}

impl Consistency {
    pub fn level(self) -> freshet_milvus::ConsistencyLevel {
        match self {
            Consistency::Strong => freshet_milvus::ConsistencyLevel::Strong,
            Consistency::Bounded => freshet_milvus::ConsistencyLevel::Bounded,
            Consistency::Eventually => freshet_milvus::ConsistencyLevel::Eventually,
        }
    }
}

/// The `[query]` section. Per-request options are clamped to the `max_*` limits here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueryConfig {
    /// `host:port` of the HTTP API.
    pub listen: String,
    /// PEM certificate chain and private key: serve HTTPS (on `listen` and `admin_listen`).
    /// Both or neither.
    pub tls_cert_file: PathBuf,
    pub tls_key_file: PathBuf,
    /// API keys bound to principals (`[[query.keys]]`: name, key / key_file / key_env,
    /// principals, optional limits). See the `auth` module and docs/query-api.md.
    pub keys: Vec<KeyConfig>,
    /// Bare keys (`Authorization: Bearer <key>` or `X-API-Key: <key>`): they hold no
    /// principals, so they see public documents only.
    pub api_keys: Vec<Secret>,
    /// A JWT issuer whose tokens identify callers (`[query.jwt]`).
    pub jwt: JwtConfig,
    /// Without keys or an issuer, search with the principals a request names (a node only an
    /// authenticating proxy can reach); otherwise such a node serves public documents only.
    pub trust_request_principals: bool,
    /// Non-empty: `/metrics` needs one of these keys.
    pub admin_keys: Vec<Secret>,
    /// Non-empty: `/metrics` is served on this `host:port` (beside `/healthz`, `/readyz`)
    /// instead of `listen`.
    pub admin_listen: String,
    /// Default limits of each key, token subject, or (unauthenticated) of all callers together:
    /// requests per second sustained, at once (0: the rate, rounded up), and in flight.
    /// 0 = unlimited. Past them: 429 with `Retry-After`.
    pub rate_per_second: f64,
    pub rate_burst: u32,
    pub max_concurrent: u32,
    /// Largest request body accepted (bytes).
    pub max_body_bytes: usize,
    /// Longest query accepted (characters).
    pub max_query_chars: usize,
    /// Results returned when a request does not say (`k`), and the most it may ask for.
    pub default_k: usize,
    pub max_k: usize,
    /// Candidates per route (BM25 / vector) by default, and the most a request may ask for.
    pub route_top_k: usize,
    pub max_route_top_k: usize,
    /// BM25 parameters of the text route (Anserini's defaults: k1 0.9, b 0.4).
    pub bm25_k1: f32,
    pub bm25_b: f32,
    /// Default fusion: `weighted` (min-max normalised route scores, 0.5 / 0.5), `dbsf`, `tmm`
    /// (`crate::fusion::FusionMethod`) or `rrf`, with
    /// its parameters. Weighted is the default: on SciFact it scored nDCG@10 0.733 against 0.721
    /// for RRF k = 60 (docs/benchmarks.md, "Retrieval quality"), in line with Bruch et al. (2023, "An
    /// Analysis of Fusion Functions for Hybrid Retrieval"), where a convex combination of
    /// normalised scores beat RRF.
    pub fusion: FusionMethod,
    pub rrf_k: f32,
    pub bm25_weight: f32,
    pub vector_weight: f32,
    /// `auto`: a hybrid retrieval runs BM25 alone for a query in a language the embedding model
    /// does not cover (its vectors of such text are noise; `crate::language`). `all`: every
    /// route always runs.
    pub language_routing: LanguageRouting,
    /// Reranking: backend, model/endpoint, how many fused candidates it rescores by default.
    pub rerank_backend: RerankBackend,
    pub rerank_model_dir: PathBuf,
    pub rerank_url: String,
    pub rerank_api: RerankApi,
    /// Sent as `model` to Cohere-style APIs (ignored by TEI).
    pub rerank_model: String,
    /// Sent as `Authorization: Bearer` to the remote API; empty: none. `Debug` redacts it.
    /// With a key, `rerank_url` must be `https://` (or loopback) unless
    /// `rerank_allow_insecure_http`.
    pub rerank_api_key: Secret,
    pub rerank_allow_insecure_http: bool,
    pub rerank_candidates: usize,
    pub max_rerank_candidates: usize,
    pub rerank_timeout_ms: u64,
    /// Rerank every request unless it says `"rerank": false`.
    pub rerank_by_default: bool,
    /// Context expansion defaults: results expanded, neighbours on each side, and the largest
    /// window a request may ask for.
    pub expand_top_m: usize,
    pub expand_window: usize,
    pub max_expand_window: usize,
    /// Context packing: the largest token budget a request may ask for.
    pub max_pack_tokens: usize,
    /// Milvus read consistency of the vector route.
    pub milvus_consistency: Consistency,
    /// HNSW `ef` of the vector route's search (raised to its top-k when that is larger): the
    /// recall/latency trade-off of the approximate search.
    pub vector_search_ef: usize,
    /// IVF `nprobe` of the vector route's search on an IVF_FLAT or IVF_SQ8 collection: the
    /// clusters of each segment searched (at most its `nlist`).
    pub vector_search_nprobe: usize,
    /// How often the node checks for a new tantivy commit (milliseconds): the longest it
    /// serves an older commit when a file notification is missed or off.
    pub reload_interval_ms: u64,
    /// Load each tantivy commit as soon as a file notification on the index's `meta.json` says
    /// it is there (polling every `reload_interval_ms` besides).
    pub reload_notify: bool,
    /// The serving pointer file (docs/reindex.md): the node serves the index generation it
    /// names and follows it, opening a new generation before switching to it. Empty: serve
    /// `[tantivy] path` and `[milvus] collection`.
    pub serving_pointer: PathBuf,
    /// Query embedding models kept loaded (concurrent query embeddings), threads each.
    pub embedder_instances: usize,
    pub embedder_threads: usize,
    /// Query vectors kept for repeated query texts (0 turns the cache off). Same model and
    /// text give the same vector, so a hit changes nothing but the time.
    pub query_cache_entries: usize,
    /// A request taking longer than this gets a 503 `timeout`, and its blocking work stops.
    pub request_timeout_ms: u64,
    /// Retrievals that run at once in the node (a slot stays taken until a timed-out
    /// request's work has stopped), how many more may wait for a slot, and for how long;
    /// past either: 503 `overloaded` with `Retry-After`.
    pub max_running_retrievals: usize,
    pub max_waiting_retrievals: usize,
    pub max_wait_ms: u64,
    /// Hybrid requests answer from BM25 alone, marked `degraded`, when the vector route is
    /// unavailable (Milvus down); `false` answers 503 instead. A request's `allow_partial`
    /// overrides it.
    pub allow_partial: bool,
    /// `Host` names (or `host:port`) the MCP endpoint `/mcp` answers; a request naming another
    /// host gets 403 (DNS-rebinding protection). `["*"]`: any host.
    pub mcp_allowed_hosts: Vec<String>,
    /// Serve the console (`/console`: search playground and status pages, docs/console.md).
    /// The page holds no data: every call it makes carries the user's own key.
    pub console: bool,
    /// Base URL of the pipeline's endpoint (its `[metrics] listen`, e.g.
    /// `http://127.0.0.1:9464`): `GET /v1/status` adds the pipeline's `/v1/status` (lag,
    /// freshness, dead letters, health). Empty: that part is reported as not configured.
    pub pipeline_url: String,
    /// The bearer key of the pipeline's `/v1/status` (inline, or from a file or a variable: one
    /// of the three; none: sent without a key). With a key, `pipeline_url` must be `https://`
    /// or loopback unless `pipeline_allow_insecure_http`.
    pub pipeline_status_key: Secret,
    pub pipeline_status_key_file: PathBuf,
    pub pipeline_status_key_env: String,
    pub pipeline_allow_insecure_http: bool,
    /// How long the node waits for the pipeline's status (milliseconds).
    pub pipeline_timeout_ms: u64,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            listen: "127.0.0.1:8080".into(),
            tls_cert_file: PathBuf::new(),
            tls_key_file: PathBuf::new(),
            keys: Vec::new(),
            api_keys: Vec::new(),
            jwt: JwtConfig::default(),
            trust_request_principals: false,
            admin_keys: Vec::new(),
            admin_listen: String::new(),
            rate_per_second: 0.0,
            rate_burst: 0,
            max_concurrent: 0,
            max_body_bytes: 64 * 1024,
            max_query_chars: 4096,
            default_k: 10,
            max_k: 100,
            route_top_k: 50,
            max_route_top_k: 1000,
            bm25_k1: freshet_tantivy::Bm25Params::default().k1,
            bm25_b: freshet_tantivy::Bm25Params::default().b,
            fusion: FusionMethod::Weighted,
            rrf_k: 60.0,
            bm25_weight: 0.5,
            vector_weight: 0.5,
            language_routing: LanguageRouting::Auto,
            rerank_backend: RerankBackend::None,
            rerank_model_dir: PathBuf::new(),
            rerank_url: String::new(),
            rerank_api: RerankApi::Tei,
            rerank_model: String::new(),
            rerank_api_key: Secret::default(),
            rerank_allow_insecure_http: false,
            rerank_candidates: 30,
            max_rerank_candidates: 100,
            rerank_timeout_ms: 5000,
            rerank_by_default: false,
            expand_top_m: 5,
            expand_window: 1,
            max_expand_window: 2,
            max_pack_tokens: 32_768,
            milvus_consistency: Consistency::Bounded,
            vector_search_ef: freshet_milvus::DEFAULT_SEARCH_EF,
            vector_search_nprobe: freshet_milvus::DEFAULT_SEARCH_NPROBE,
            reload_interval_ms: 20,
            reload_notify: true,
            serving_pointer: PathBuf::new(),
            embedder_instances: 2,
            embedder_threads: 1,
            query_cache_entries: 1024,
            request_timeout_ms: 10_000,
            max_running_retrievals: 16,
            max_waiting_retrievals: 64,
            max_wait_ms: 1000,
            allow_partial: true,
            mcp_allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            console: true,
            pipeline_url: String::new(),
            pipeline_status_key: Secret::default(),
            pipeline_status_key_file: PathBuf::new(),
            pipeline_status_key_env: String::new(),
            pipeline_allow_insecure_http: false,
            pipeline_timeout_ms: 3000,
        }
    }
}

impl Config {
    /// Reads `path` (if any), applies the process environment, validates.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        Self::load_with_env(path, &env)
    }

    pub fn load_with_env(path: Option<&Path>, env: &[(String, String)]) -> Result<Config> {
        let mut config: Config = freshet_config::load(path, env, &sections())?;
        config.query.validate()?;
        config.milvus.validate()?;
        config.answer.validate(&config.query)?;
        let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        config.llm_settings = config.llm.settings(&lookup)?;
        let (llm, timeout) = (
            config.llm_settings.is_some(),
            config.query.request_timeout_ms,
        );
        config.transform.validate(llm, timeout)?;
        crate::openai::assistants::validate(&config)?;
        config.replica.validate(
            &config.replication,
            &config.tantivy.path,
            &config.query.serving_pointer,
        )?;
        Ok(config)
    }
}

/// The sections the query node reads (the pipeline's are accepted in the file and ignored).
pub fn sections() -> Sections {
    Sections::new()
        .with::<QueryConfig>("query")
        .with::<TantivyConfig>("tantivy")
        .with::<MilvusConfig>("milvus")
        .with::<EmbeddingConfig>("embedding")
        .with::<LlmConfig>("llm")
        .with::<AnswerConfig>("answer")
        .with::<crate::transform::config::TransformConfig>("transform")
        .with::<freshet_kafka::KafkaConfig>("kafka")
        .with::<freshet_core::changelog::config::ReplicationConfig>("replication")
        .with::<crate::replica::ReplicaConfig>("replica")
}

impl QueryConfig {
    /// The vector route's search parameters (`vector_search_ef`, `vector_search_nprobe`); the
    /// collection's index type decides which one a search uses.
    pub fn search_tuning(&self) -> freshet_milvus::SearchTuning {
        freshet_milvus::SearchTuning {
            ef: self.vector_search_ef,
            nprobe: self.vector_search_nprobe,
        }
    }

    /// `bm25_k1` and `bm25_b`, checked.
    pub fn bm25_params(&self) -> Result<freshet_tantivy::Bm25Params> {
        freshet_tantivy::Bm25Params {
            k1: self.bm25_k1,
            b: self.bm25_b,
        }
        .validate()
        .map_err(|e| anyhow::anyhow!("query.bm25_k1 / query.bm25_b: {e}"))
    }

    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("max_body_bytes", self.max_body_bytes),
            ("max_query_chars", self.max_query_chars),
            ("default_k", self.default_k),
            ("max_k", self.max_k),
            ("route_top_k", self.route_top_k),
            ("max_route_top_k", self.max_route_top_k),
            ("rerank_candidates", self.rerank_candidates),
            ("max_rerank_candidates", self.max_rerank_candidates),
            ("embedder_instances", self.embedder_instances),
            ("embedder_threads", self.embedder_threads),
            ("max_pack_tokens", self.max_pack_tokens),
            ("vector_search_ef", self.vector_search_ef),
            ("vector_search_nprobe", self.vector_search_nprobe),
            ("max_running_retrievals", self.max_running_retrievals),
        ];
        for (name, v) in positive {
            if v == 0 {
                bail!("query.{name} must be at least 1");
            }
        }
        if self.default_k > self.max_k {
            bail!(
                "query.default_k ({}) exceeds query.max_k ({})",
                self.default_k,
                self.max_k
            );
        }
        if self.route_top_k > self.max_route_top_k {
            bail!("query.route_top_k exceeds query.max_route_top_k");
        }
        if self.max_route_top_k > freshet_milvus::MAX_QUERY_WINDOW {
            bail!(
                "query.max_route_top_k must be at most {} (Milvus' limit)",
                freshet_milvus::MAX_QUERY_WINDOW
            );
        }
        if self.vector_search_ef > freshet_milvus::MAX_SEARCH_EF {
            bail!(
                "query.vector_search_ef must be at most {} (Milvus' limit)",
                freshet_milvus::MAX_SEARCH_EF
            );
        }
        if self.vector_search_nprobe > freshet_milvus::MAX_SEARCH_NPROBE {
            bail!(
                "query.vector_search_nprobe must be at most {} (Milvus' limit)",
                freshet_milvus::MAX_SEARCH_NPROBE
            );
        }
        if self.rerank_candidates > self.max_rerank_candidates {
            bail!("query.rerank_candidates exceeds query.max_rerank_candidates");
        }
        if self.expand_window > self.max_expand_window {
            bail!("query.expand_window exceeds query.max_expand_window");
        }
        self.bm25_params()?;
        if !(self.rrf_k.is_finite() && self.rrf_k >= 0.0) {
            bail!("query.rrf_k must be a finite number ≥ 0");
        }
        for (name, w) in [
            ("bm25_weight", self.bm25_weight),
            ("vector_weight", self.vector_weight),
        ] {
            if !(w.is_finite() && w >= 0.0) {
                bail!("query.{name} must be a finite number ≥ 0");
            }
        }
        match self.rerank_backend {
            RerankBackend::Local if self.rerank_model_dir.as_os_str().is_empty() => {
                bail!("query.rerank_backend = \"local\" needs query.rerank_model_dir")
            }
            RerankBackend::Remote if self.rerank_url.is_empty() => {
                bail!("query.rerank_backend = \"remote\" needs query.rerank_url")
            }
            RerankBackend::Remote if !self.rerank_api_key.is_empty() => {
                freshet_service::transport::check_url(
                    "query.rerank_url (it is sent query.rerank_api_key)",
                    &self.rerank_url,
                    self.rerank_allow_insecure_http,
                    "query.rerank_allow_insecure_http",
                )?;
            }
            _ => {}
        }
        self.validate_pipeline()?;
        self.validate_auth()
    }

    /// `pipeline_url` and its key: a URL with a path-free base, the key sent only where
    /// [`freshet_service::transport::check_url`] allows.
    fn validate_pipeline(&self) -> Result<()> {
        if self.pipeline_timeout_ms == 0 {
            bail!("query.pipeline_timeout_ms must be at least 1");
        }
        let keyed = !self.pipeline_status_key.is_empty()
            || !self.pipeline_status_key_file.as_os_str().is_empty()
            || !self.pipeline_status_key_env.is_empty();
        if self.pipeline_url.is_empty() {
            if keyed {
                bail!("query.pipeline_status_key is set but query.pipeline_url is empty");
            }
            return Ok(());
        }
        let url = reqwest::Url::parse(&self.pipeline_url).map_err(|e| {
            anyhow::anyhow!(
                "query.pipeline_url {:?}: not a URL ({e}); give the pipeline's [metrics] listen \
                 as http://host:port",
                self.pipeline_url
            )
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            bail!(
                "query.pipeline_url {:?}: give an http(s) URL with a host, e.g. \
                 http://127.0.0.1:9464",
                self.pipeline_url
            );
        }
        if url.query().is_some() || url.fragment().is_some() {
            bail!(
                "query.pipeline_url {:?}: give the endpoint's base URL, without a query or \
                 fragment",
                self.pipeline_url
            );
        }
        if keyed {
            freshet_service::transport::check_url(
                "query.pipeline_url (it is sent query.pipeline_status_key)",
                &self.pipeline_url,
                self.pipeline_allow_insecure_http,
                "query.pipeline_allow_insecure_http",
            )?;
        }
        Ok(())
    }

    /// The default limits (`rate_per_second`, `rate_burst`, `max_concurrent`).
    pub fn limits(&self) -> Limits {
        Limits {
            rate_per_second: self.rate_per_second,
            burst: self.rate_burst,
            max_concurrent: self.max_concurrent,
        }
    }

    fn validate_auth(&self) -> Result<()> {
        for (what, keys) in [
            ("api_keys", &self.api_keys),
            ("admin_keys", &self.admin_keys),
        ] {
            if keys.iter().any(|k| k.0.trim().is_empty()) {
                bail!("query.{what} must not contain empty keys");
            }
        }
        self.limits().check("query")?;
        let mut names = std::collections::BTreeSet::new();
        for k in &self.keys {
            if k.name.trim().is_empty() {
                bail!("every [[query.keys]] entry needs a name");
            }
            if !names.insert(k.name.as_str()) {
                bail!("query.keys: the name {:?} appears twice", k.name);
            }
            if k.principals.iter().any(|p| p.trim().is_empty()) {
                bail!("query.keys {:?}: principals must not be empty", k.name);
            }
            Limits::with(self.limits(), k.rate_per_second, k.burst, k.max_concurrent)
                .check(&format!("query.keys {:?}", k.name))?;
        }
        let j = &self.jwt;
        j.validate("query.jwt", self.limits())?;
        if self.tls_cert_file.as_os_str().is_empty() != self.tls_key_file.as_os_str().is_empty() {
            bail!("query.tls_cert_file and query.tls_key_file go together: set both");
        }
        let authenticated = !self.keys.is_empty() || !self.api_keys.is_empty() || j.enabled();
        if self.trust_request_principals && authenticated {
            bail!(
                "query.trust_request_principals is for a node without keys or an issuer (behind \
                 an authenticating proxy); with keys or query.jwt, identities carry the principals"
            );
        }
        if !self.admin_listen.is_empty() && self.admin_listen == self.listen {
            bail!("query.admin_listen must differ from query.listen");
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
