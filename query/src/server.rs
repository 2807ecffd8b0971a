//! Startup: load the models, open the indexes in the background, serve HTTP until a signal.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use freshet_core::chunk::HfTokenCounter;

use crate::config::Config;
use crate::indexes::{EmbedderPool, Indexes};
use crate::metrics::Metrics;
use crate::rerank::Reranker;
use crate::retrieve::Engine;

/// Loads what the node needs (fails fast on a missing model or a bad reranker setting) and
/// starts the background index tasks. Call inside a tokio runtime.
pub fn engine(config: Config) -> Result<Arc<Engine>> {
    // Load the Chinese dictionary now rather than on the first Chinese query.
    std::thread::spawn(freshet_tantivy::preload_zh_dictionary);
    let metrics = Metrics::new();
    let embedders = Arc::new(EmbedderPool::load(&config, metrics.clone())?);
    let counter = HfTokenCounter::from_file(config.embedding.model_dir.join("tokenizer.json"))
        .context("loading the model tokenizer (for context packing)")?;
    let reranker = Reranker::from_config(&config.query, config.embedding.ort_dylib_path.clone())?;
    let indexes = Indexes::new(metrics.clone());
    indexes.spawn_tantivy_reloader(
        config.tantivy.path.clone(),
        Duration::from_millis(config.query.reload_interval_ms.max(1)),
        config.query.bm25_params()?,
    );
    let mut mcfg = config.milvus.clone();
    mcfg.dim = embedders.dim();
    mcfg.model_id = embedders.model_id().to_owned();
    indexes.spawn_milvus_connector(mcfg);
    let auth = crate::auth::Auth::new(&config.query, metrics.clone(), &|v| std::env::var(v).ok())?;
    auth.log_startup();
    auth.start()?;
    let limiter = crate::overload::Limiter::new(
        config.query.max_running_retrievals,
        config.query.max_waiting_retrievals,
        Duration::from_millis(config.query.max_wait_ms),
        metrics.clone(),
    );
    Ok(Arc::new(Engine {
        limiter,
        config,
        indexes,
        embedders,
        reranker,
        counter: Arc::new(counter),
        metrics,
        auth,
    }))
}

/// Serves the API on `query.listen` (and `/metrics` on `query.admin_listen` when set), over TLS
/// when `query.tls_cert_file` is set, until SIGINT/SIGTERM.
pub async fn serve(engine: Arc<Engine>) -> Result<()> {
    let q = &engine.config.query;
    let tls = freshet_auth::transport::server_config("query", &q.tls_cert_file, &q.tls_key_file)?;
    let addr = q.listen.clone();
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(%addr, tls = tls.is_some(), "query node listening");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let admin = match q.admin_listen.as_str() {
        "" => None,
        admin_addr => {
            let l = tokio::net::TcpListener::bind(admin_addr)
                .await
                .with_context(|| format!("cannot listen on {admin_addr} (query.admin_listen)"))?;
            tracing::info!(addr = %admin_addr, "admin routes (/metrics) listening");
            Some(l)
        }
    };
    if !engine.auth.admin_guarded() {
        tracing::info!("/metrics needs no key (query.admin_keys is empty)");
    }
    let api = freshet_auth::transport::serve(
        listener,
        crate::http::router(engine.clone()),
        tls.clone(),
        stopped(stop_rx.clone()),
    );
    let admin = async {
        match admin {
            Some(l) => {
                freshet_auth::transport::serve(
                    l,
                    crate::http::admin_router(engine),
                    tls,
                    stopped(stop_rx),
                )
                .await
            }
            None => Ok(()),
        }
    };
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let api = async { api.await.context("HTTP server failed") };
    let admin = async { admin.await.context("admin HTTP server failed") };
    tokio::try_join!(api, admin).map(|_| ())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}
