//! Who is asking, and which principals they may search with.
//!
//! A request carries one credential: an API key (`Authorization: Bearer <key>` or
//! `X-API-Key: <key>`) or a JWT from the configured issuer (`Authorization: Bearer <jwt>`). Its
//! identity holds a set of principals: a `[[query.keys]]` entry's `principals`, a token's groups
//! (with `group_prefix`), none for a bare `api_keys` entry (public documents only). A request's
//! `principals` may only narrow that set: naming one the identity lacks is a 403; leaving them
//! out searches with all of them.
//!
//! A node with neither keys nor an issuer is unauthenticated: it says so at start and in
//! `/readyz`, and serves public documents only, unless `trust_request_principals` is set (a
//! node behind a proxy that authenticates callers and writes their principals): then the
//! request's principals are used as given.
//!
//! Each identity has its own rate and concurrency limits (429 with `Retry-After` past them).
//! `/metrics` can need an admin key (`admin_keys`).

pub mod jwks;
pub mod jwt;
pub mod keys;
pub mod limits;
pub mod settings;

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{bail, Result};
use axum::http::{header, HeaderMap, StatusCode};
use tokio::sync::OwnedSemaphorePermit;

use crate::config::QueryConfig;
use crate::http::ApiError;
use crate::metrics::Metrics;
use keys::KeyEntry;
use limits::{retry_after_secs, Gate, Gates, Refusal};
use settings::{resolve_secret, Limits};

/// The principals an identity may search with.
#[derive(Debug, Clone, PartialEq)]
pub enum Principals {
    /// Exactly these (and public documents).
    Bound(BTreeSet<String>),
    /// Whatever the request says (`trust_request_principals`).
    FromRequest,
}

/// An admitted request: who it is, and its concurrency slot (held until dropped).
#[derive(Debug)]
pub struct Admission {
    /// For logs and metrics: a key's name, `jwt`, `anonymous`.
    pub name: String,
    pub principals: Principals,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Admission {
    /// The principals a request searches with: the identity's when `requested` is `None`, else
    /// `requested` if the identity holds every one of them, else a 403.
    pub fn principals(&self, requested: Option<Vec<String>>) -> Result<Vec<String>, ApiError> {
        match (&self.principals, requested) {
            (Principals::FromRequest, r) => Ok(r.unwrap_or_default()),
            (Principals::Bound(held), None) => Ok(held.iter().cloned().collect()),
            (Principals::Bound(held), Some(r)) => {
                let missing: Vec<&str> = r
                    .iter()
                    .filter(|p| !held.contains(*p))
                    .map(String::as_str)
                    .collect();
                if missing.is_empty() {
                    return Ok(r);
                }
                let why = if self.name == ANONYMOUS {
                    "this node has no authentication configured and serves public documents \
                     only"
                        .to_string()
                } else {
                    format!("the credential {:?} does not hold them", self.name)
                };
                Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    format!("principals {missing:?} not allowed: {why}"),
                ))
            }
        }
    }
}

const ANONYMOUS: &str = "anonymous";

/// The node's authentication: keys, issuer, admin keys, limits.
pub struct Auth {
    keys: Vec<KeyEntry>,
    jwt: Option<(jwt::Verifier, Gates)>,
    admin: Vec<[u8; 32]>,
    trust_request_principals: bool,
    anonymous: Arc<Gate>,
    legacy_keys: usize,
    metrics: Metrics,
}

impl Auth {
    /// Reads the secrets (files, `env`) of `c`.
    pub fn new(
        c: &QueryConfig,
        metrics: Metrics,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Auth> {
        let defaults = c.limits();
        let mut keys = Vec::new();
        for (i, k) in c.api_keys.iter().enumerate() {
            keys.push(KeyEntry::new(
                format!("api_keys[{i}]"),
                &k.0,
                BTreeSet::new(),
                Arc::new(Gate::new(defaults)),
            ));
        }
        for k in &c.keys {
            let what = format!("query.keys {:?}", k.name);
            let Some(secret) = resolve_secret(&what, &k.key, &k.key_file, &k.key_env, env)? else {
                bail!("{what}: no key (give key, key_file or key_env)");
            };
            let limits = Limits::with(defaults, k.rate_per_second, k.burst, k.max_concurrent);
            keys.push(KeyEntry::new(
                k.name.clone(),
                &secret.0,
                k.principals.iter().cloned().collect(),
                Arc::new(Gate::new(limits)),
            ));
        }
        let mut digests: Vec<&[u8; 32]> = keys.iter().map(KeyEntry::digest).collect();
        let admin: Vec<[u8; 32]> = c.admin_keys.iter().map(|k| keys::digest(&k.0)).collect();
        digests.extend(admin.iter());
        let unique: BTreeSet<_> = digests.iter().collect();
        if unique.len() != digests.len() {
            bail!("the same key appears twice in query.api_keys, query.keys or query.admin_keys");
        }
        let jwt = jwt::Verifier::from_config(&c.jwt, env)?.map(|v| {
            let limits = Limits::with(
                defaults,
                c.jwt.rate_per_second,
                c.jwt.burst,
                c.jwt.max_concurrent,
            );
            (v, Gates::new(limits))
        });
        Ok(Auth {
            legacy_keys: c.api_keys.len(),
            keys,
            jwt,
            admin,
            trust_request_principals: c.trust_request_principals,
            anonymous: Arc::new(Gate::new(defaults)),
            metrics,
        })
    }

    fn authenticated(&self) -> bool {
        !self.keys.is_empty() || self.jwt.is_some()
    }

    /// How callers are identified: `keys`, `jwt`, `keys+jwt`, `trusted_proxy` or `none`.
    pub fn mode(&self) -> &'static str {
        match (!self.keys.is_empty(), self.jwt.is_some()) {
            (true, true) => "keys+jwt",
            (true, false) => "keys",
            (false, true) => "jwt",
            (false, false) if self.trust_request_principals => "trusted_proxy",
            (false, false) => "none",
        }
    }

    /// What an operator must know about this setup (`/readyz`, and logged at start).
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        match self.mode() {
            "none" => w.push(
                "no authentication configured (query.keys, query.api_keys, query.jwt): anyone \
                 who reaches this node may query it; public documents only"
                    .to_string(),
            ),
            "trusted_proxy" => w.push(
                "no authentication configured and query.trust_request_principals = true: \
                 requests search with the principals they name; only a proxy that \
                 authenticates callers may reach this node"
                    .to_string(),
            ),
            _ => {}
        }
        if self.legacy_keys > 0 {
            w.push(format!(
                "{} key(s) in query.api_keys hold no principals and see public documents \
                 only; bind principals with [[query.keys]]",
                self.legacy_keys
            ));
        }
        w
    }

    /// Whether `/metrics` needs an admin key.
    pub fn admin_guarded(&self) -> bool {
        !self.admin.is_empty()
    }

    /// Logs the setup: a warning per [`Auth::warnings`].
    /// Starts fetching the issuer's JWKS URL, when one is configured (inside a tokio runtime).
    pub fn start(&self) -> Result<()> {
        if let Some(remote) = self.jwt.as_ref().and_then(|(v, _)| v.remote()) {
            remote.spawn()?;
        }
        Ok(())
    }

    /// `Err` with why while the node cannot verify tokens yet (its JWKS URL not fetched).
    pub fn ready(&self) -> Result<(), String> {
        match self.jwt.as_ref().and_then(|(v, _)| v.remote()) {
            Some(remote) => remote.status(),
            None => Ok(()),
        }
    }

    pub fn log_startup(&self) {
        for w in self.warnings() {
            tracing::warn!("{w}");
        }
        tracing::info!(
            mode = self.mode(),
            keys = self.keys.len(),
            jwt = self.jwt.is_some(),
            admin_keys = self.admin.len(),
            "authentication"
        );
    }

    fn reject(&self, name: &str, reason: &str, e: ApiError) -> ApiError {
        self.metrics.auth_rejection(name, reason);
        e
    }

    /// Identifies the caller of a `/v1` or `/pathway` request and applies its limits.
    pub fn admit(&self, headers: &HeaderMap) -> Result<Admission, ApiError> {
        let (name, principals, gate): (String, Principals, Arc<Gate>) = if !self.authenticated() {
            let principals = if self.trust_request_principals {
                Principals::FromRequest
            } else {
                Principals::Bound(BTreeSet::new())
            };
            (ANONYMOUS.into(), principals, self.anonymous.clone())
        } else {
            let given = credential(headers)
                .map_err(|m| self.reject("none", "unauthorized", unauthorized(m)))?;
            if let Some(k) = keys::find(&self.keys, KeyEntry::digest, given) {
                (
                    k.name.clone(),
                    Principals::Bound(k.principals.clone()),
                    k.gate.clone(),
                )
            } else if let (Some((verifier, gates)), true) = (&self.jwt, looks_like_jwt(given)) {
                let claims = verifier
                    .verify(given)
                    .map_err(|m| self.reject("jwt", "unauthorized", unauthorized(m)))?;
                let gate = gates.get(&claims.subject);
                ("jwt".into(), Principals::Bound(claims.principals), gate)
            } else {
                return Err(self.reject(
                    "unknown",
                    "unauthorized",
                    unauthorized("invalid API key".into()),
                ));
            }
        };
        let admitted = gate.admit();
        match admitted {
            Ok(permit) => Ok(Admission {
                name,
                principals,
                _permit: permit,
            }),
            Err(r) => {
                let (reason, message) = match r {
                    Refusal::Rate(_) => ("rate_limited", "request rate limit reached"),
                    Refusal::Concurrency => ("concurrency_limited", "too many requests in flight"),
                };
                let mut e = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_requests",
                    format!("{message} for {name:?}; retry later"),
                );
                e.retry_after = Some(retry_after_secs(r));
                Err(self.reject(&name, reason, e))
            }
        }
    }

    /// Checks the admin key of `/metrics` when admin keys are configured.
    pub fn admit_admin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.admin.is_empty() {
            return Ok(());
        }
        let given = credential(headers)
            .map_err(|m| self.reject("admin", "unauthorized", unauthorized(m)))?;
        match keys::find(&self.admin, |d| d, given) {
            Some(_) => Ok(()),
            None => Err(self.reject(
                "admin",
                "unauthorized",
                unauthorized("invalid admin key".into()),
            )),
        }
    }
}

fn unauthorized(message: String) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

fn looks_like_jwt(s: &str) -> bool {
    s.matches('.').count() == 2
}

/// The one credential of a request: `Authorization: Bearer` or `X-API-Key`, not both.
fn credential(headers: &HeaderMap) -> Result<&str, String> {
    let bearer = match headers.get(header::AUTHORIZATION) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .ok_or("the Authorization header must be `Bearer <key or token>`")?,
        ),
    };
    let api_key = match headers.get("x-api-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map(str::trim)
                .map_err(|_| "the X-API-Key header is not text")?,
        ),
    };
    match (bearer, api_key) {
        (Some(_), Some(_)) => {
            Err("send one credential: Authorization or X-API-Key, not both".into())
        }
        (Some(c), None) | (None, Some(c)) if !c.is_empty() => Ok(c),
        _ => Err(
            "missing credential: send an API key (`Authorization: Bearer <key>` or \
             `X-API-Key: <key>`) or a token (`Authorization: Bearer <jwt>`)"
                .into(),
        ),
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
