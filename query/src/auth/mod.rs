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
//! `/metrics` can need an admin key (`admin_keys`); `/v1/deletes` always does.

pub mod settings;

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{bail, Result};
use axum::http::{HeaderMap, StatusCode};
use freshet_service::auth::keys::{self, KeyEntry};
use freshet_service::auth::limits::Gate;
use freshet_service::auth::{Authenticator, Caller, Refused};
use tokio::sync::OwnedSemaphorePermit;

use crate::config::QueryConfig;
use crate::metrics::Metrics;
use freshet_service::ApiError;
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
    ids: Authenticator<BTreeSet<String>>,
    admin: Vec<[u8; 32]>,
    trust_request_principals: bool,
    anonymous: Arc<Gate>,
    legacy_keys: usize,
    /// Listening beyond loopback without TLS.
    exposure: Vec<String>,
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
        let admin: Vec<[u8; 32]> = c.admin_keys.iter().map(|k| keys::digest(&k.0)).collect();
        let mut digests: Vec<&[u8; 32]> = keys.iter().map(KeyEntry::digest).collect();
        digests.extend(admin.iter());
        let unique: BTreeSet<_> = digests.iter().collect();
        if unique.len() != digests.len() {
            bail!("the same key appears twice in query.api_keys, query.keys or query.admin_keys");
        }
        let jwt =
            freshet_service::auth::Verifier::from_config(&c.jwt, "query.jwt", env)?.map(|v| {
                let limits = Limits::with(
                    defaults,
                    c.jwt.rate_per_second,
                    c.jwt.burst,
                    c.jwt.max_concurrent,
                );
                (v, limits)
            });
        let tls = !c.tls_cert_file.as_os_str().is_empty();
        let mut exposure = Vec::new();
        exposure.extend(freshet_service::transport::listen_warning(
            "the query node",
            "query.listen",
            &c.listen,
            tls,
        ));
        if !c.admin_listen.is_empty() {
            exposure.extend(freshet_service::transport::listen_warning(
                "the query node's admin routes",
                "query.admin_listen",
                &c.admin_listen,
                tls,
            ));
        }
        Ok(Auth {
            ids: Authenticator::new(keys, jwt)?,
            legacy_keys: c.api_keys.len(),
            admin,
            trust_request_principals: c.trust_request_principals,
            anonymous: Arc::new(Gate::new(defaults)),
            exposure,
            metrics,
        })
    }

    /// How callers are identified: `keys`, `jwt`, `keys+jwt`, `trusted_proxy` or `none`.
    pub fn mode(&self) -> &'static str {
        match self.ids.mode() {
            "none" if self.trust_request_principals => "trusted_proxy",
            m => m,
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
        w.extend(self.exposure.iter().cloned());
        w
    }

    /// Whether `/metrics` needs an admin key.
    pub fn admin_guarded(&self) -> bool {
        !self.admin.is_empty()
    }

    /// Starts fetching the issuer's JWKS URL, when one is configured (inside a tokio runtime).
    pub fn start(&self) -> Result<()> {
        self.ids.start()
    }

    /// `Err` with why while the node cannot verify tokens yet (its JWKS URL not fetched).
    pub fn ready(&self) -> Result<(), String> {
        self.ids.ready()
    }

    /// Logs the setup: a warning per [`Auth::warnings`].
    pub fn log_startup(&self) {
        for w in self.warnings() {
            tracing::warn!("{w}");
        }
        tracing::info!(
            mode = self.mode(),
            keys = self.ids.key_count(),
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
        if self.ids.is_open() {
            let principals = if self.trust_request_principals {
                Principals::FromRequest
            } else {
                Principals::Bound(BTreeSet::new())
            };
            return match self.anonymous.admit() {
                Ok(permit) => Ok(Admission {
                    name: ANONYMOUS.into(),
                    principals,
                    _permit: permit,
                }),
                Err(refusal) => Err(self.refused(Refused::Limited {
                    name: ANONYMOUS.into(),
                    refusal,
                })),
            };
        }
        let admitted = self.ids.admit(headers).map_err(|r| self.refused(r))?;
        let principals = match admitted.caller {
            Caller::Key(p) => p,
            Caller::Token(claims) => claims.principals,
        };
        Ok(Admission {
            name: admitted.name,
            principals: Principals::Bound(principals),
            _permit: admitted.permit,
        })
    }

    /// The API error of a refusal, counted.
    fn refused(&self, r: Refused) -> ApiError {
        let mut e = ApiError::new(r.status(), r.code(), r.message());
        e.retry_after = r.retry_after();
        self.reject(r.label(), r.reason(), e)
    }

    /// The principals an admitted request searches with (see [`Admission::principals`]); a
    /// 403 is counted.
    pub fn principals(
        &self,
        admission: &Admission,
        requested: Option<Vec<String>>,
    ) -> Result<Vec<String>, ApiError> {
        admission
            .principals(requested)
            .inspect_err(|_| self.metrics.auth_rejection(&admission.name, "forbidden"))
    }

    /// Who may read `GET /v1/status` (counts over every document, dead letters with their keys
    /// and messages): an admin key when admin keys are configured, else any caller the API
    /// admits.
    pub fn admit_status(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.admin_guarded() {
            return self.admit_admin(headers);
        }
        self.admit(headers).map(|_| ())
    }

    /// Checks the admin key of `/metrics` when admin keys are configured.
    pub fn admit_admin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.admin.is_empty() {
            return Ok(());
        }
        let given = freshet_service::auth::credential::credential(headers)
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

impl Auth {
    /// Checks the admin key of an operator's route that names documents (`/v1/deletes`):
    /// unlike `/metrics`, a node without admin keys refuses it (403), since document ids of
    /// private documents must not reach every caller.
    pub fn admit_operator(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.admin.is_empty() {
            return Err(self.reject(
                "admin",
                "forbidden",
                ApiError::new(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "this route needs an admin key and the node has none: set [query] \
                     admin_keys"
                        .to_string(),
                ),
            ));
        }
        let refused = match self.admit_admin(headers) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        // A caller known by an ordinary key or token is told it lacks the right (403); any
        // other credential is not known (401).
        if !self.ids.is_open() && self.admit(headers).is_ok() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "this route needs an admin key (query.admin_keys)".to_string(),
            ));
        }
        Err(refused)
    }
}

fn unauthorized(message: String) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
