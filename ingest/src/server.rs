//! Startup: the producer, then HTTP until SIGINT/SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use freshet_service::listen::{self, Shutdown};

use crate::config::Config;
use crate::http::App;
use crate::metrics::Metrics;
use crate::produce::KafkaPublisher;

/// The service with the real producer (no broker round trip yet: `/readyz` tells whether the
/// broker answers).
pub fn app(config: Config) -> Result<Arc<App>> {
    let metrics = Metrics::new();
    let publisher = KafkaPublisher::new(
        config.producer_kafka(),
        Duration::from_millis(config.ingest.ready_timeout_ms),
        metrics.kafka.clone(),
    )
    .context("creating the Kafka producer")?;
    let app = App::with_metrics(config, Arc::new(publisher), metrics, &|v| {
        std::env::var(v).ok()
    })?;
    app.auth.log_startup();
    Ok(app)
}

/// Serves the API on `ingest.listen` (over TLS when `ingest.tls_cert_file` is set) until
/// SIGINT/SIGTERM. Starts fetching the issuer's JWKS URL, when one is configured.
pub async fn serve(app: Arc<App>) -> Result<()> {
    let i = &app.config.ingest;
    let tls =
        freshet_service::transport::server_config("ingest", &i.tls_cert_file, &i.tls_key_file)?;
    app.auth.start()?;
    let listener = listen::bind(&i.listen, "ingest.listen").await?;
    tracing::info!(addr = %i.listen, tls = tls.is_some(), topic = %app.config.kafka.topic, "ingest service listening");
    let stop = Shutdown::on_signal();
    listen::serve(listener, crate::http::router(app), tls, stop.wait())
        .await
        .context("HTTP server failed")
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
