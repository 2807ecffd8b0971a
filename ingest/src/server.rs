//! Startup: the producer, then HTTP until SIGINT/SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::config::Config;
use crate::http::App;
use crate::produce::KafkaPublisher;

/// The service with the real producer (no broker round trip yet: `/readyz` tells whether the
/// broker answers).
pub fn app(config: Config) -> Result<Arc<App>> {
    let publisher = KafkaPublisher::new(
        config.producer_kafka(),
        Duration::from_millis(config.ingest.ready_timeout_ms),
    )
    .context("creating the Kafka producer")?;
    Ok(App::new(config, Arc::new(publisher)))
}

/// Serves the API on `ingest.listen` until SIGINT/SIGTERM.
pub async fn serve(app: Arc<App>) -> Result<()> {
    let addr = app.config.ingest.listen.clone();
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(%addr, topic = %app.config.kafka.topic, "ingest service listening");
    axum::serve(listener, crate::http::router(app))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("HTTP server failed")
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
