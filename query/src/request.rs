//! The `/v1/retrieve` request: JSON → a validated [`Plan`], with a 400-worthy message for every
//! mistake. Pure; limits come from [`QueryConfig`].

use freshet_core::chunk::ChunkKind;
use freshet_core::filter::ChunkFilter;
use serde::Deserialize;
use serde_json::Value;

use crate::config::QueryConfig;
use crate::fusion::{FusionMethod, FusionParams};
use crate::language::LanguageRouting;
use crate::pack::PackOrder;
use freshet_embedding::language::normalise;

/// Which routes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Hybrid,
    Bm25,
    Vector,
}

impl Mode {
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Hybrid => "hybrid",
            Mode::Bm25 => "bm25",
            Mode::Vector => "vector",
        }
    }
    pub fn uses_bm25(&self) -> bool {
        !matches!(self, Mode::Vector)
    }
    pub fn uses_vector(&self) -> bool {
        !matches!(self, Mode::Bm25)
    }
}

/// The request body as sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrieveRequest {
    pub query: String,
    pub k: Option<usize>,
    pub mode: Option<String>,
    pub filter: Option<Value>,
    pub principals: Option<Vec<String>>,
    pub bm25_top_k: Option<usize>,
    pub vector_top_k: Option<usize>,
    pub fusion: Option<FusionRequest>,
    pub rerank: Option<RerankRequest>,
    pub expand: Option<ExpandRequest>,
    pub parents: Option<bool>,
    pub pack: Option<PackRequest>,
    pub allow_partial: Option<bool>,
    /// The query's language (ISO 639 code), when the caller knows it better than detection.
    pub language: Option<String>,
    pub language_routing: Option<LanguageRouting>,
    /// Query transformation (`crate::transform::request`).
    pub transform: Option<crate::transform::request::TransformRequest>,
    /// The conversation's previous turns, oldest first.
    pub history: Option<Vec<crate::transform::request::HistoryTurn>>,
    /// Mark where the query's terms occur in each result's text (`highlights`).
    pub highlight: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FusionRequest {
    pub method: Option<FusionMethod>,
    pub rrf_k: Option<f32>,
    pub bm25_weight: Option<f32>,
    pub vector_weight: Option<f32>,
}

/// `true`/`false`, or `{"candidates": n}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RerankRequest {
    Flag(bool),
    Options {
        #[serde(default)]
        candidates: Option<usize>,
    },
}

/// `true`/`false`, or the options.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ExpandRequest {
    Flag(bool),
    Options(ExpandOptions),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpandOptions {
    /// Expand the top M results.
    pub top_m: Option<usize>,
    /// Neighbours on each side (±window).
    pub window: Option<usize>,
    /// Expand only results whose vector similarity is at least this (cosine, -1..1).
    pub min_vector_score: Option<f32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackRequest {
    pub budget_tokens: usize,
    pub order: Option<PackOrder>,
}

/// What to do, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub query: String,
    pub k: usize,
    pub mode: Mode,
    pub filter: ChunkFilter,
    pub bm25_top_k: usize,
    pub vector_top_k: usize,
    pub fusion: FusionParams,
    /// Candidates to rerank, when reranking.
    pub rerank: Option<usize>,
    pub expand: Option<ExpandPlan>,
    pub parents: bool,
    pub pack: Option<(usize, PackOrder)>,
    /// Hybrid: answer from BM25 alone (marked degraded) if the vector route is unavailable.
    pub allow_partial: bool,
    /// The language the caller stated (normalised ISO 639 code).
    pub language: Option<String>,
    /// Whether a hybrid retrieval leaves out a route the model does not understand the query
    /// for ([`crate::language`]).
    pub language_routing: LanguageRouting,
    /// Query transformation by the language model, if any.
    pub transform: Option<crate::transform::request::TransformPlan>,
    /// Each result carries the spans of the query's terms in its text.
    pub highlight: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ExpandPlan {
    pub top_m: usize,
    pub window: usize,
    pub min_vector_score: Option<f32>,
}

/// A client mistake (HTTP 400).
#[derive(Debug, Clone, PartialEq)]
pub struct BadRequest(pub String);

macro_rules! bad {
    ($($t:tt)*) => { return Err(BadRequest(format!($($t)*))) };
}

/// Most principals a request may carry, and their longest length.
const MAX_PRINCIPALS: usize = 256;
const MAX_PRINCIPAL_CHARS: usize = 512;
/// Most metadata conditions and `in` values in a filter.
const MAX_FILTER_CONDITIONS: usize = 32;
const MAX_IN_VALUES: usize = 256;

/// Parses a request body.
pub fn parse(body: &[u8]) -> Result<RetrieveRequest, BadRequest> {
    serde_json::from_slice(body).map_err(|e| BadRequest(format!("invalid request body: {e}")))
}

impl RetrieveRequest {
    /// Validates against the server limits; `transform` and `history` are refused here (they
    /// are planned by `plan_with`, `crate::transform::request`).
    pub fn plan(self, cfg: &QueryConfig, reranker_available: bool) -> Result<Plan, BadRequest> {
        if self.transform.is_some() || self.history.is_some() {
            bad!("transform and history are not supported on this endpoint");
        }
        let query = self.query;
        if query.trim().is_empty() {
            bad!("query must not be empty");
        }
        let chars = query.chars().count();
        if chars > cfg.max_query_chars {
            bad!(
                "query has {chars} characters; the limit is {}",
                cfg.max_query_chars
            );
        }
        let k = self.k.unwrap_or(cfg.default_k);
        if k == 0 || k > cfg.max_k {
            bad!("k must be between 1 and {}, got {k}", cfg.max_k);
        }
        let mode = match self.mode.as_deref() {
            None | Some("hybrid") => Mode::Hybrid,
            Some("bm25") => Mode::Bm25,
            Some("vector") => Mode::Vector,
            Some(other) => bad!("unknown mode {other:?}; use \"hybrid\", \"bm25\" or \"vector\""),
        };
        let route = |name: &str, v: Option<usize>| -> Result<usize, BadRequest> {
            let v = v.unwrap_or(cfg.route_top_k);
            if v == 0 || v > cfg.max_route_top_k {
                bad!(
                    "{name} must be between 1 and {}, got {v}",
                    cfg.max_route_top_k
                );
            }
            Ok(v)
        };
        let bm25_top_k = route("bm25_top_k", self.bm25_top_k)?.max(k.min(cfg.max_route_top_k));
        let vector_top_k =
            route("vector_top_k", self.vector_top_k)?.max(k.min(cfg.max_route_top_k));

        let mut filter = match self.filter {
            None | Some(Value::Null) => ChunkFilter::none(),
            Some(v) => parse_filter(&v)?,
        };
        check_principals(self.principals.unwrap_or_default())?;
        // Public documents only until the handler sets the principals of the caller's
        // credential (`auth::Admission::principals`): a plan never searches with principals
        // nobody vouched for.
        filter.principals = Some(Vec::new());

        let fusion = fusion_params(self.fusion, cfg)?;

        let rerank = rerank_candidates(self.rerank, cfg, reranker_available)?;

        let expand = expand_plan(self.expand, cfg)?;
        let parents = self.parents.unwrap_or(false);
        if parents && expand.is_some() {
            bad!("parents and expand cannot be combined: a parent already is the child's context");
        }
        // Only leaves are searched; parents are context returned for their children.
        filter.kinds = Some(vec![ChunkKind::Leaf]);
        let pack = pack_plan(self.pack, cfg)?;
        let language = match self.language.as_deref() {
            None => None,
            Some(code) => Some(normalise(code).ok_or_else(|| {
                BadRequest(format!(
                    "language {code:?} is not an ISO 639-1 or 639-3 code (e.g. \"en\", \"zh\")"
                ))
            })?),
        };
        Ok(Plan {
            query,
            k,
            mode,
            filter,
            bm25_top_k,
            vector_top_k,
            fusion,
            rerank,
            expand,
            parents,
            pack,
            allow_partial: self.allow_partial.unwrap_or(cfg.allow_partial),
            language,
            language_routing: self.language_routing.unwrap_or(cfg.language_routing),
            transform: None,
            highlight: self.highlight.unwrap_or(false),
        })
    }
}

/// The fusion of the request, the node's defaults filling what it leaves out.
fn fusion_params(
    request: Option<FusionRequest>,
    cfg: &QueryConfig,
) -> Result<FusionParams, BadRequest> {
    let f = request.unwrap_or(FusionRequest {
        method: None,
        rrf_k: None,
        bm25_weight: None,
        vector_weight: None,
    });
    let fusion = FusionParams {
        method: f.method.unwrap_or(cfg.fusion),
        rrf_k: f.rrf_k.unwrap_or(cfg.rrf_k),
        bm25_weight: f.bm25_weight.unwrap_or(cfg.bm25_weight),
        vector_weight: f.vector_weight.unwrap_or(cfg.vector_weight),
    };
    if !(fusion.rrf_k.is_finite() && (0.0..=10_000.0).contains(&fusion.rrf_k)) {
        bad!("fusion.rrf_k must be between 0 and 10000");
    }
    for (n, w) in [
        ("bm25_weight", fusion.bm25_weight),
        ("vector_weight", fusion.vector_weight),
    ] {
        if !(w.is_finite() && (0.0..=1000.0).contains(&w)) {
            bad!("fusion.{n} must be between 0 and 1000");
        }
    }
    Ok(fusion)
}

/// How many candidates to rerank, if any.
fn rerank_candidates(
    request: Option<RerankRequest>,
    cfg: &QueryConfig,
    reranker_available: bool,
) -> Result<Option<usize>, BadRequest> {
    let rerank = match request {
        None if cfg.rerank_by_default && reranker_available => Some(cfg.rerank_candidates),
        None | Some(RerankRequest::Flag(false)) => None,
        Some(RerankRequest::Flag(true)) => Some(cfg.rerank_candidates),
        Some(RerankRequest::Options { candidates }) => {
            let c = candidates.unwrap_or(cfg.rerank_candidates);
            if c == 0 || c > cfg.max_rerank_candidates {
                bad!(
                    "rerank.candidates must be between 1 and {}, got {c}",
                    cfg.max_rerank_candidates
                );
            }
            Some(c)
        }
    };
    if rerank.is_some() && !reranker_available {
        bad!("rerank was requested but this server has no reranker configured (query.rerank_backend)");
    }
    Ok(rerank)
}

/// Context expansion, checked against the node's limits.
fn expand_plan(
    request: Option<ExpandRequest>,
    cfg: &QueryConfig,
) -> Result<Option<ExpandPlan>, BadRequest> {
    let expand = match request {
        None | Some(ExpandRequest::Flag(false)) => None,
        Some(ExpandRequest::Flag(true)) => Some(ExpandOptions::default()),
        Some(ExpandRequest::Options(o)) => Some(o),
    };
    let expand = match expand {
        None => None,
        Some(o) => {
            let window = o.window.unwrap_or(cfg.expand_window);
            if window == 0 || window > cfg.max_expand_window {
                bad!(
                    "expand.window must be between 1 and {}, got {window}",
                    cfg.max_expand_window
                );
            }
            let top_m = o.top_m.unwrap_or(cfg.expand_top_m);
            if top_m == 0 || top_m > cfg.max_k {
                bad!(
                    "expand.top_m must be between 1 and {}, got {top_m}",
                    cfg.max_k
                );
            }
            if let Some(t) = o.min_vector_score {
                if !(t.is_finite() && (-1.0..=1.0).contains(&t)) {
                    bad!("expand.min_vector_score must be between -1 and 1");
                }
            }
            Some(ExpandPlan {
                top_m,
                window,
                min_vector_score: o.min_vector_score,
            })
        }
    };
    Ok(expand)
}

/// Packing: the token budget and the order.
fn pack_plan(
    request: Option<PackRequest>,
    cfg: &QueryConfig,
) -> Result<Option<(usize, PackOrder)>, BadRequest> {
    let pack = match request {
        None => None,
        Some(p) => {
            if p.budget_tokens == 0 || p.budget_tokens > cfg.max_pack_tokens {
                bad!(
                    "pack.budget_tokens must be between 1 and {}, got {}",
                    cfg.max_pack_tokens,
                    p.budget_tokens
                );
            }
            Some((
                p.budget_tokens,
                p.order.unwrap_or(PackOrder::RelevanceFirst),
            ))
        }
    };
    Ok(pack)
}

fn check_principals(p: Vec<String>) -> Result<Vec<String>, BadRequest> {
    if p.len() > MAX_PRINCIPALS {
        bad!("at most {MAX_PRINCIPALS} principals, got {}", p.len());
    }
    for x in &p {
        if x.is_empty() || x.chars().count() > MAX_PRINCIPAL_CHARS {
            bad!("principals must be 1 to {MAX_PRINCIPAL_CHARS} characters long");
        }
    }
    Ok(p)
}

/// A metadata filter object: `{"key": scalar}` (equality; also matches an element of an array
/// value), `{"key": {"eq": scalar}}` or `{"key": {"in": [scalars]}}`. Scalars are strings,
/// numbers or booleans. All conditions must hold.
pub fn parse_filter(v: &Value) -> Result<ChunkFilter, BadRequest> {
    let Value::Object(map) = v else {
        bad!("filter must be an object of metadata conditions, e.g. {{\"lang\": \"en\", \"year\": {{\"in\": [2020, 2021]}}}}");
    };
    if map.len() > MAX_FILTER_CONDITIONS {
        bad!(
            "filter has {} conditions; the limit is {MAX_FILTER_CONDITIONS}",
            map.len()
        );
    }
    let mut f = ChunkFilter::none();
    for (key, cond) in map {
        if key.is_empty() {
            bad!("filter keys must not be empty");
        }
        match cond {
            Value::Object(op) => {
                if op.len() != 1 {
                    bad!("filter condition for {key:?} must have exactly one operator (\"eq\" or \"in\")");
                }
                let (name, arg) = op.iter().next().expect("one entry");
                match name.as_str() {
                    "eq" => {
                        f = f.metadata_eq(key, scalar(key, arg)?);
                    }
                    "in" => {
                        let Value::Array(items) = arg else {
                            bad!("filter {key:?}: \"in\" takes an array of values");
                        };
                        if items.len() > MAX_IN_VALUES {
                            bad!("filter {key:?}: at most {MAX_IN_VALUES} values in \"in\"");
                        }
                        let values = items
                            .iter()
                            .map(|i| scalar(key, i))
                            .collect::<Result<Vec<_>, _>>()?;
                        f = f.metadata_in(key, values);
                    }
                    other => {
                        bad!("filter {key:?}: unknown operator {other:?}; use \"eq\" or \"in\"")
                    }
                }
            }
            other => {
                f = f.metadata_eq(key, scalar(key, other)?);
            }
        }
    }
    Ok(f)
}

/// A scalar filter value as JSON text.
fn scalar(key: &str, v: &Value) -> Result<String, BadRequest> {
    match v {
        Value::String(_) | Value::Bool(_) => Ok(v.to_string()),
        Value::Number(n) => {
            // an integer must fit 64 signed bits (the vector index reads it as int64)
            if (n.is_i64() || !n.is_u64()) && n.as_f64().is_some_and(f64::is_finite) {
                Ok(v.to_string())
            } else {
                bad!("filter {key:?}: number {n} is out of range")
            }
        }
        Value::Null => bad!("filter {key:?}: null is not a filter value"),
        Value::Array(_) => {
            bad!("filter {key:?}: use {{\"in\": [...]}} to match any of several values")
        }
        Value::Object(_) => bad!("filter {key:?}: nested objects are not supported"),
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
