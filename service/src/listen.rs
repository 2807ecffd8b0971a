//! Listening: bind an address, serve a router on it (over TLS when configured, see
//! [`crate::transport::server_config`]) and stop gracefully on SIGINT/SIGTERM, letting the
//! requests in flight finish.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::serve::ListenerExt;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Binds `addr` (`host:port`); `setting` names it in the error (`query.listen`).
pub async fn bind(addr: &str, setting: &str) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({setting})"))
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until `shutdown` completes, then
/// lets requests in flight finish (at most 10 s with TLS). Every connection has `TCP_NODELAY`:
/// a streamed answer writes small events one after another, and Nagle's algorithm would hold
/// each back until the client acknowledged the one before (40 ms with a delayed ACK).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    tls: Option<Arc<ServerConfig>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    match tls {
        None => {
            let listener = listener.tap_io(|tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY not set");
                }
            });
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        Some(config) => {
            let listener = listener.into_std()?;
            let handle = axum_server::Handle::new();
            let stopper = handle.clone();
            tokio::spawn(async move {
                shutdown.await;
                stopper.graceful_shutdown(Some(Duration::from_secs(10)));
            });
            let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(
                axum_server::tls_rustls::RustlsConfig::from_config(config),
            )
            .acceptor(axum_server::accept::NoDelayAcceptor::new());
            axum_server::from_tcp(listener)?
                .acceptor(acceptor)
                .handle(handle)
                .serve(app.into_make_service())
                .await
        }
    }
}
/// The stop of a process's servers: once SIGINT or SIGTERM arrives, every [`Shutdown::wait`]
/// completes. Cheap to clone.
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// Waits for SIGINT/SIGTERM in a task of the current tokio runtime.
    pub fn on_signal() -> Shutdown {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            signal().await;
            let _ = tx.send(true);
        });
        Shutdown(rx)
    }

    /// Completes once the process is told to stop (at once if it already was).
    pub fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.0.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }
}

/// Completes on SIGINT or SIGTERM.
async fn signal() {
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
mod tests {
    use super::*;

    #[tokio::test]
    async fn serving_stops_when_shutdown_completes_and_bind_names_the_setting() {
        let listener = bind("127.0.0.1:0", "x.listen").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let e = bind(&addr.to_string(), "x.listen").await.unwrap_err();
        assert!(format!("{e:#}").contains("(x.listen)"), "{e:#}");
        let (tx, rx) = watch::channel(false);
        let stop = Shutdown(rx);
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "hi" }));
        let server = tokio::spawn(serve(listener, app, None, stop.wait()));
        let body = reqwest::get(format!("http://{addr}/"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(body, "hi");
        tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the server stops")
            .unwrap()
            .unwrap();
    }
}
