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
    let app = App::new(config, Arc::new(publisher))?;
    app.auth.log_startup();
    Ok(app)
}

/// Serves the API on `ingest.listen` (over TLS when `ingest.tls_cert_file` is set) until
/// SIGINT/SIGTERM. Starts fetching the issuer's JWKS URL, when one is configured.
pub async fn serve(app: Arc<App>) -> Result<()> {
    let i = &app.config.ingest;
    let tls = freshet_auth::transport::server_config("ingest", &i.tls_cert_file, &i.tls_key_file)?;
    app.auth.start()?;
    let addr = i.listen.clone();
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(%addr, tls = tls.is_some(), topic = %app.config.kafka.topic, "ingest service listening");
    freshet_auth::transport::serve(listener, crate::http::router(app), tls, shutdown_signal())
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

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
