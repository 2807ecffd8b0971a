//! Startup: load the models, open the indexes in the background, serve HTTP until a signal.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use freshet_core::chunk::HfTokenCounter;
use freshet_service::listen::{self, Shutdown};

use crate::auth::Auth;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::models::QueryModels;
use crate::node::Node;
use crate::rerank::Reranker;
use crate::retrieve::Engine;
use crate::serving::{Opener, Serving};

/// The node: its engine (see [`engine`]) and its authentication, with the JWKS URL being
/// fetched when one is configured. Call inside a tokio runtime.
pub fn node(config: Config) -> Result<Arc<Node>> {
    let engine = engine(config)?;
    let q = &engine.config.query;
    let auth = Auth::new(q, engine.metrics.clone(), &|v| std::env::var(v).ok())?;
    auth.log_startup();
    if let Some(llm) = &engine.config.llm_settings {
        tracing::info!(
            base_url = %llm.base_url,
            model = %llm.model,
            key = llm.api_key.is_some(),
            "language model configured ([llm])"
        );
    }
    auth.start()?;
    let status = crate::status::StatusSources::new(q, &|v| std::env::var(v).ok())?;
    match &status.pipeline {
        Some(_) => tracing::info!(url = %q.pipeline_url, "pipeline status ([query] pipeline_url)"),
        None => tracing::info!("no [query] pipeline_url: /v1/status reports the node alone"),
    }
    status.ages.spawn_sampler(engine.indexes.clone());
    Ok(Arc::new(Node {
        engine,
        auth,
        status,
    }))
}

/// Loads what the node needs (fails fast on a missing model or a bad reranker setting) and
/// starts the background index tasks. Call inside a tokio runtime.
pub fn engine(mut config: Config) -> Result<Arc<Engine>> {
    // Load the Chinese dictionary now rather than on the first Chinese query.
    std::thread::spawn(freshet_tantivy::preload_zh_dictionary);
    // The Japanese one must load (or be switched off) before the index opens.
    config.tantivy.configure_japanese()?;
    let metrics = Metrics::new();
    // The query model of each generation served: the pointer's, else [embedding].
    let models = Arc::new(QueryModels::new(
        config.embedding.clone(),
        config.query.clone(),
        metrics.clone(),
    ));
    let counter = HfTokenCounter::from_file(config.embedding.tokenizer_path())
        .context("loading the model tokenizer (for context packing)")?;
    let reranker = Reranker::from_config(&config.query, &config.embedding)?;
    // A replica serves the index it keeps from the changelog, once that index is current.
    let replica = if config.replica.enabled {
        let r = crate::replica::start(
            &config.kafka,
            &config.replication,
            &config.replica,
            metrics.replica.clone(),
        )
        .context("starting the replica ([replica])")?;
        config.tantivy.path = config.replica.path.clone();
        Some(r)
    } else {
        None
    };
    let opener = Opener {
        reload_interval: Duration::from_millis(config.query.reload_interval_ms.max(1)),
        reload_notify: config.query.reload_notify,
        bm25: config.query.bm25_params()?,
        milvus: config.milvus.clone(),
        models,
        runtime: tokio::runtime::Handle::current(),
    };
    let indexes = Serving::start(
        &config.query.serving_pointer,
        config.tantivy.path.clone(),
        opener,
        metrics.clone(),
    )?;
    let limiter = crate::overload::Limiter::new(
        config.query.max_running_retrievals,
        config.query.max_waiting_retrievals,
        Duration::from_millis(config.query.max_wait_ms),
        metrics.clone(),
    );
    let llm = match &config.llm_settings {
        Some(s) => Some(
            freshet_llm::LlmClient::new(s.clone())
                .context("building the language model client ([llm])")?
                .with_metrics(metrics.llm.clone()),
        ),
        None => None,
    };
    let transformer = crate::transform::Transformer::new(config.transform.clone(), metrics.clone());
    Ok(Arc::new(Engine {
        llm,
        transformer,
        limiter,
        replica,
        config,
        indexes,
        reranker,
        counter: Arc::new(counter),
        metrics,
    }))
}

/// Serves the API on `query.listen` (and `/metrics` on `query.admin_listen` when set), over TLS
/// when `query.tls_cert_file` is set, until SIGINT/SIGTERM.
pub async fn serve(node: Arc<Node>) -> Result<()> {
    let q = &node.engine.config.query;
    let tls =
        freshet_service::transport::server_config("query", &q.tls_cert_file, &q.tls_key_file)?;
    let listener = listen::bind(&q.listen, "query.listen").await?;
    tracing::info!(addr = %q.listen, tls = tls.is_some(), "query node listening");
    let admin = match q.admin_listen.as_str() {
        "" => None,
        admin_addr => {
            let l = listen::bind(admin_addr, "query.admin_listen").await?;
            tracing::info!(addr = %admin_addr, "admin routes (/metrics) listening");
            Some(l)
        }
    };
    if !node.auth.admin_guarded() {
        tracing::info!("/metrics needs no key (query.admin_keys is empty)");
    }
    let replica = node.engine.replica.clone();
    let stop = Shutdown::on_signal();
    let api = listen::serve(
        listener,
        crate::http::router(node.clone()),
        tls.clone(),
        stop.wait(),
    );
    let admin = async {
        match admin {
            Some(l) => listen::serve(l, crate::http::admin_router(node), tls, stop.wait()).await,
            None => Ok(()),
        }
    };
    let api = async { api.await.context("HTTP server failed") };
    let admin = async { admin.await.context("admin HTTP server failed") };
    let replica_failed = async {
        match &replica {
            Some(r) => r.failed().await,
            None => std::future::pending().await,
        }
    };
    let served = tokio::select! {
        r = async { tokio::try_join!(api, admin).map(|_| ()) } => r,
        why = replica_failed => Err(anyhow::anyhow!("the replica stopped: {why}")),
    };
    if let Some(r) = replica {
        tokio::task::spawn_blocking(move || r.stop()).await.ok();
    }
    served
}
