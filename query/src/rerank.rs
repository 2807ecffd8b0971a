//! Rerank backends: a local ONNX cross-encoder (`freshet_embedding::FastReranker`) or a remote
//! `/rerank` HTTP API in the shape of Hugging Face text-embeddings-inference (TEI) or
//! Cohere/Jina. Both return one score per passage, in passage order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use freshet_embedding::{FastReranker, RerankerConfig};
use serde::Deserialize;

use crate::config::{QueryConfig, RerankApi, RerankBackend};
use crate::overload::Job;
use crate::retrieve::RetrieveError;

/// Passages a local model scores between two checks of the request's cancellation.
pub const RERANK_BATCH: usize = 4;

/// A configured reranker.
#[derive(Clone)]
pub enum Reranker {
    Local(Arc<Mutex<FastReranker>>),
    Remote(RemoteReranker),
}

impl Reranker {
    /// The reranker of the configuration, or `None` when `rerank_backend = "none"`. A local one
    /// runs on `embedding`'s ONNX Runtime library and spins as its `spinning` says.
    pub fn from_config(
        cfg: &QueryConfig,
        embedding: &freshet_embedding::EmbeddingConfig,
    ) -> Result<Option<Reranker>> {
        match cfg.rerank_backend {
            RerankBackend::None => Ok(None),
            RerankBackend::Local => {
                let mut rc = RerankerConfig::for_model_dir(&cfg.rerank_model_dir);
                rc.ort_dylib_path = embedding.ort_dylib_path.clone();
                rc.threads = Some(cfg.embedder_threads);
                rc.spinning = embedding.spinning;
                let model = FastReranker::load(&rc).context("loading the local reranker")?;
                Ok(Some(Reranker::Local(Arc::new(Mutex::new(model)))))
            }
            RerankBackend::Remote => Ok(Some(Reranker::Remote(RemoteReranker::new(
                &cfg.rerank_url,
                cfg.rerank_api,
                &cfg.rerank_model,
                &cfg.rerank_api_key.0,
                Duration::from_millis(cfg.rerank_timeout_ms),
            )?))),
        }
    }

    /// Short name for responses and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Reranker::Local(_) => "local",
            Reranker::Remote(_) => "remote",
        }
    }

    /// One score per passage (higher is more relevant). A local model scores on the blocking
    /// pool under `job`, [`RERANK_BATCH`] passages at a time, and stops between batches once
    /// the job is cancelled.
    pub async fn score(
        &self,
        query: &str,
        passages: Vec<String>,
        job: &Job,
    ) -> Result<Vec<f32>, RetrieveError> {
        if passages.is_empty() {
            return Ok(Vec::new());
        }
        let failed = |e: anyhow::Error| {
            RetrieveError::Unavailable(format!("reranker ({}): {e:#}", self.name()))
        };
        match self {
            Reranker::Local(model) => {
                let model = model.clone();
                let query = query.to_owned();
                let name = self.name();
                job.blocking("rerank", move |job| {
                    let mut m = model.lock().map_err(|_| {
                        RetrieveError::Unavailable(format!(
                            "reranker ({name}): failed earlier (poisoned lock)"
                        ))
                    })?;
                    let mut out = Vec::with_capacity(passages.len());
                    for batch in passages.chunks(RERANK_BATCH) {
                        job.check("rerank")?;
                        let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
                        let scores = m.score(&query, &refs).map_err(|e| {
                            RetrieveError::Unavailable(format!("reranker ({name}): {e:#}"))
                        })?;
                        out.extend(scores);
                    }
                    Ok(out)
                })
                .await
            }
            Reranker::Remote(r) => r.score(query, &passages).await.map_err(failed),
        }
    }
}

/// A remote rerank endpoint.
#[derive(Clone)]
pub struct RemoteReranker {
    client: reqwest::Client,
    url: String,
    api: RerankApi,
    model: String,
    api_key: String,
}

#[derive(Deserialize)]
struct TeiItem {
    index: usize,
    score: f32,
}

#[derive(Deserialize)]
struct CohereItem {
    index: usize,
    relevance_score: f32,
}

#[derive(Deserialize)]
struct CohereResponse {
    results: Vec<CohereItem>,
}

impl RemoteReranker {
    pub fn new(
        url: &str,
        api: RerankApi,
        model: &str,
        api_key: &str,
        timeout: Duration,
    ) -> Result<Self> {
        let parsed = reqwest::Url::parse(url).with_context(|| format!("rerank_url {url:?}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            bail!("rerank_url {url:?} must be http(s)");
        }
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .context("building the HTTP client")?;
        Ok(RemoteReranker {
            client,
            url: url.to_owned(),
            api,
            model: model.to_owned(),
            api_key: api_key.to_owned(),
        })
    }

    pub async fn score(&self, query: &str, passages: &[String]) -> Result<Vec<f32>> {
        let body = match self.api {
            RerankApi::Tei => serde_json::json!({ "query": query, "texts": passages }),
            RerankApi::Cohere => {
                let mut b = serde_json::json!({
                    "query": query,
                    "documents": passages,
                    "top_n": passages.len(),
                    "return_documents": false,
                });
                if !self.model.is_empty() {
                    b["model"] = serde_json::Value::String(self.model.clone());
                }
                b
            }
        };
        let mut req = self.client.post(&self.url).json(&body);
        if !self.api_key.is_empty() {
            req = req.bearer_auth(&self.api_key);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("rerank request to {}", self.url))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .with_context(|| format!("reading the rerank response of {}", self.url))?;
        if !status.is_success() {
            bail!(
                "rerank API {} answered {status}: {}",
                self.url,
                text.chars().take(300).collect::<String>()
            );
        }
        let pairs: Vec<(usize, f32)> = match self.api {
            RerankApi::Tei => serde_json::from_str::<Vec<TeiItem>>(&text)
                .map(|v| v.into_iter().map(|i| (i.index, i.score)).collect()),
            RerankApi::Cohere => serde_json::from_str::<CohereResponse>(&text).map(|r| {
                r.results
                    .into_iter()
                    .map(|i| (i.index, i.relevance_score))
                    .collect()
            }),
        }
        .with_context(|| {
            format!(
                "rerank API {} returned an unexpected body: {}",
                self.url,
                text.chars().take(300).collect::<String>()
            )
        })?;
        scores_in_order(passages.len(), &pairs)
    }
}

/// `(index, score)` pairs into one score per passage; every passage must be scored once.
pub fn scores_in_order(n: usize, pairs: &[(usize, f32)]) -> Result<Vec<f32>> {
    let mut out: Vec<Option<f32>> = vec![None; n];
    for &(i, s) in pairs {
        let slot = out
            .get_mut(i)
            .ok_or_else(|| anyhow!("rerank API returned index {i} for {n} passages"))?;
        if !s.is_finite() {
            bail!("rerank API returned a non-finite score for passage {i}");
        }
        *slot = Some(s);
    }
    out.into_iter()
        .enumerate()
        .map(|(i, s)| s.ok_or_else(|| anyhow!("rerank API returned no score for passage {i}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_put_back_in_passage_order() {
        assert_eq!(
            scores_in_order(3, &[(2, 0.5), (0, 0.9), (1, -1.0)]).unwrap(),
            [0.9, -1.0, 0.5]
        );
        assert!(scores_in_order(2, &[(0, 1.0)]).is_err());
        assert!(scores_in_order(1, &[(3, 1.0)]).is_err());
        assert!(scores_in_order(1, &[(0, f32::NAN)]).is_err());
    }

    #[test]
    fn remote_urls_are_checked() {
        let t = Duration::from_secs(1);
        assert!(RemoteReranker::new("not a url", RerankApi::Tei, "", "", t).is_err());
        assert!(RemoteReranker::new("ftp://x/rerank", RerankApi::Tei, "", "", t).is_err());
        assert!(
            RemoteReranker::new("http://127.0.0.1:1/rerank", RerankApi::Tei, "", "", t).is_ok()
        );
    }
}
