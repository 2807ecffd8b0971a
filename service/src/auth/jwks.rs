//! Keys of an issuer published at a JWKS URL (`jwks_url`), as identity providers (Keycloak,
//! Auth0, Okta, Entra ID, Dex) publish them, and rotate them. Keys that cannot verify
//! signatures (an encryption key beside the signing ones) are skipped ([`crate::auth::jwk`]).
//!
//! A background task fetches the document at start and every `jwks_refresh_s`, and sooner when a
//! token names a `kid` the node does not know (a rotation), at most once per
//! [`MIN_REFETCH`]; a failed fetch (or a document with no usable key) is retried with a
//! doubling pause and keeps the keys already fetched. An `https://` URL is never followed to a
//! plain `http://` one. Until the first fetch succeeds the node is not ready (`/readyz` says why) and every
//! token that needs those keys is refused with 401.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::auth::jwk::{parse_jwks, Key};

/// The shortest time between two fetches that an unknown `kid` asks for.
pub const MIN_REFETCH: Duration = Duration::from_secs(30);
/// The pause after a failed fetch: 1 s, doubling up to this.
const MAX_RETRY: Duration = Duration::from_secs(60);
const TIMEOUT: Duration = Duration::from_secs(10);

/// The keys of one JWKS URL, kept fresh by [`RemoteJwks::spawn`].
pub struct RemoteJwks {
    url: String,
    /// The setting, in errors and logs (`query.jwt.jwks_url`).
    what: String,
    refresh: Duration,
    min_refetch: Duration,
    keys: RwLock<Arc<Vec<Key>>>,
    state: Mutex<State>,
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    fetched_at: Option<Instant>,
    last_error: Option<String>,
}

impl std::fmt::Debug for RemoteJwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteJwks")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl RemoteJwks {
    /// Fetched every `refresh`, and on an unknown `kid` at most every `min_refetch`
    /// ([`MIN_REFETCH`] in the node).
    pub fn new(url: String, what: String, refresh: Duration, min_refetch: Duration) -> Self {
        RemoteJwks {
            url,
            what,
            refresh,
            min_refetch,
            keys: RwLock::new(Arc::new(Vec::new())),
            state: Mutex::new(State::default()),
            wake: tokio::sync::Notify::new(),
        }
    }

    /// The keys fetched last (none before the first fetch).
    pub fn keys(&self) -> Arc<Vec<Key>> {
        self.keys
            .read()
            .map(|k| k.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// A token named a key the node does not have: fetch again soon.
    pub fn unknown_kid(&self) {
        self.wake.notify_one();
    }

    /// `Err` with why until the first fetch has succeeded.
    pub fn status(&self) -> Result<(), String> {
        let Ok(s) = self.state.lock() else {
            return Err("the JWKS state is poisoned".into());
        };
        match (&s.fetched_at, &s.last_error) {
            (Some(_), _) => Ok(()),
            (None, Some(e)) => Err(format!("JWKS {} not fetched yet: {e}", self.url)),
            (None, None) => Err(format!("JWKS {} not fetched yet", self.url)),
        }
    }

    /// Fetches in the background for as long as the runtime runs.
    pub fn spawn(self: &Arc<Self>) -> Result<()> {
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .https_only(self.url.starts_with("https://"))
            .build()
            .context("building the JWKS HTTP client")?;
        let me = self.clone();
        tokio::spawn(async move { me.run(client).await });
        Ok(())
    }

    async fn run(self: Arc<Self>, client: reqwest::Client) {
        let mut retry = Duration::from_secs(1);
        loop {
            let next = match self.fetch(&client).await {
                Ok(n) => {
                    tracing::info!(url = %self.url, keys = n, "JWKS fetched");
                    retry = Duration::from_secs(1);
                    self.refresh
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    tracing::warn!(url = %self.url, error = %msg, "fetching the JWKS failed; the keys already fetched stay");
                    if let Ok(mut s) = self.state.lock() {
                        s.last_error = Some(msg);
                    }
                    let r = retry;
                    retry = (retry * 2).min(MAX_RETRY);
                    r
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                _ = self.wake.notified() => {
                    // A rotation: fetch again, but not more often than min_refetch.
                    let since = self
                        .state
                        .lock()
                        .ok()
                        .and_then(|s| s.fetched_at)
                        .map_or(self.min_refetch, |t| t.elapsed());
                    if let Some(wait) = self.min_refetch.checked_sub(since) {
                        tokio::time::sleep(wait).await;
                    }
                }
            }
        }
    }

    async fn fetch(&self, client: &reqwest::Client) -> Result<usize> {
        let resp = client
            .get(&self.url)
            .send()
            .await
            .with_context(|| format!("GET {}", self.url))?;
        let status = resp.status();
        anyhow::ensure!(status.is_success(), "GET {} answered {status}", self.url);
        let text = resp.text().await.context("reading the JWKS")?;
        let (keys, skipped) = parse_jwks(&text, &format!("{} {}", self.what, self.url))?;
        for s in skipped {
            tracing::info!(url = %self.url, key = %s, "JWKS key skipped");
        }
        let n = keys.len();
        if let Ok(mut k) = self.keys.write() {
            *k = Arc::new(keys);
        }
        if let Ok(mut s) = self.state.lock() {
            s.fetched_at = Some(Instant::now());
            s.last_error = None;
        }
        Ok(n)
    }
}

#[cfg(test)]
#[path = "jwks_tests.rs"]
mod tests;
