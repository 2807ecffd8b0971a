//! Who may write what. A request carries one credential: an API key of `[[ingest.keys]]`
//! (`Authorization: Bearer <key>` or `X-API-Key: <key>`) or a JWT of the `[ingest.jwt]` issuer
//! (`Authorization: Bearer <jwt>`), checked by [`freshet_service::auth`] as the query node checks its
//! own, before the request's body is read. Its identity carries write rules ([`rules`]): the id
//! prefixes it may write, the ACL principals it may grant, whether it may publish a document
//! without an ACL (public), whether it may delete. A key has its own rule; a token has the
//! rules of `[[ingest.jwt_rules]]` whose principal it holds. A write no rule allows is a 403
//! naming what is not allowed.
//!
//! With neither keys nor an issuer the service is unauthenticated: anyone who reaches it may
//! write anything. It then says so at start and in `/readyz`, and it refuses to start on an
//! address beyond loopback unless `allow_unauthenticated = true`.

pub mod rules;
pub mod settings;

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{bail, Result};
use axum::http::{HeaderMap, StatusCode};
use freshet_service::auth::keys::KeyEntry;
use freshet_service::auth::limits::Gate;
use freshet_service::auth::{resolve_secret, Authenticator, Caller, Limits, Refused};
use tokio::sync::OwnedSemaphorePermit;

use crate::config::IngestConfig;
use crate::error::ApiError;
use crate::metrics::Metrics;
use rules::{Rights, Write, WriteRule};

const ANONYMOUS: &str = "anonymous";

/// An admitted writer: its name (a key's name, `jwt`, `anonymous`; for errors, logs and
/// metrics) and its rights.
#[derive(Clone, Debug)]
pub struct Writer {
    pub name: String,
    pub rights: Rights,
}

/// The service's keys, issuer and rules.
pub struct IngestAuth {
    ids: Authenticator<Arc<WriteRule>>,
    jwt_rules: Vec<(String, Arc<WriteRule>)>,
    anonymous: Arc<Gate>,
    warnings: Vec<String>,
    metrics: Metrics,
}

impl IngestAuth {
    /// Reads the secrets (files, `env`) of `c`.
    pub fn new(
        c: &IngestConfig,
        metrics: Metrics,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<IngestAuth> {
        let defaults = c.limits();
        let mut keys = Vec::new();
        for k in &c.keys {
            let what = format!("ingest.keys {:?}", k.name);
            let Some(secret) = resolve_secret(&what, &k.key, &k.key_file, &k.key_env, env)? else {
                bail!("{what}: no key (give key, key_file or key_env)");
            };
            let limits = Limits::with(defaults, k.rate_per_second, k.burst, k.max_concurrent);
            let rule = WriteRule::new(format!("the key {:?}", k.name), &k.grants());
            keys.push(KeyEntry::new(
                k.name.clone(),
                secret.expose(),
                Arc::new(rule),
                Arc::new(Gate::new(limits)),
            ));
        }
        let jwt =
            freshet_service::auth::Verifier::from_config(&c.jwt, "ingest.jwt", env)?.map(|v| {
                let limits = Limits::with(
                    defaults,
                    c.jwt.rate_per_second,
                    c.jwt.burst,
                    c.jwt.max_concurrent,
                );
                (v, limits)
            });
        let jwt_rules = c
            .jwt_rules
            .iter()
            .map(|r| {
                let owner = format!("the rule for {:?}", r.principal);
                (
                    r.principal.clone(),
                    Arc::new(WriteRule::new(owner, &r.grants())),
                )
            })
            .collect();
        let ids = Authenticator::new(keys, jwt).map_err(|e| anyhow::anyhow!("ingest.keys: {e}"))?;
        let mut warnings = Vec::new();
        if ids.is_open() {
            warnings.push(
                "no authentication configured (ingest.keys, ingest.jwt): anyone who reaches this \
                 service may write, overwrite and delete any document, with any ACL"
                    .to_string(),
            );
        }
        warnings.extend(freshet_service::transport::listen_warning(
            "the ingest service",
            "ingest.listen",
            &c.listen,
            !c.tls_cert_file.as_os_str().is_empty(),
        ));
        Ok(IngestAuth {
            ids,
            jwt_rules,
            anonymous: Arc::new(Gate::new(defaults)),
            warnings,
            metrics,
        })
    }

    /// How writers are identified: `keys`, `jwt`, `keys+jwt` or `none`.
    pub fn mode(&self) -> &'static str {
        self.ids.mode()
    }

    /// What an operator must know about this setup (`/readyz`, and logged at start).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Starts fetching the issuer's JWKS URL, when one is configured (inside a tokio runtime).
    pub fn start(&self) -> Result<()> {
        self.ids.start()
    }

    /// `Err` with why while tokens cannot be verified yet (the JWKS URL not fetched).
    pub fn ready(&self) -> Result<(), String> {
        self.ids.ready()
    }

    pub fn log_startup(&self) {
        for w in &self.warnings {
            tracing::warn!("{w}");
        }
        tracing::info!(
            mode = self.mode(),
            keys = self.ids.key_count(),
            jwt_rules = self.jwt_rules.len(),
            "authentication"
        );
    }

    /// Identifies the writer of a `/v1` request from its headers and applies its limits; the
    /// permit holds its concurrency slot.
    pub fn admit(
        &self,
        headers: &HeaderMap,
    ) -> Result<(Writer, Option<OwnedSemaphorePermit>), ApiError> {
        if self.ids.is_open() {
            return match self.anonymous.admit() {
                Ok(permit) => Ok((
                    Writer {
                        name: ANONYMOUS.into(),
                        rights: Rights::Everything,
                    },
                    permit,
                )),
                Err(refusal) => Err(self.refused(Refused::Limited {
                    name: ANONYMOUS.into(),
                    refusal,
                })),
            };
        }
        let admitted = self.ids.admit(headers).map_err(|r| self.refused(r))?;
        let rights = match admitted.caller {
            Caller::Key(rule) => Rights::Rules(vec![rule]),
            Caller::Token(claims) => Rights::Rules(self.rules_of(&claims.principals)),
        };
        Ok((
            Writer {
                name: admitted.name,
                rights,
            },
            admitted.permit,
        ))
    }

    fn rules_of(&self, principals: &BTreeSet<String>) -> Vec<Arc<WriteRule>> {
        self.jwt_rules
            .iter()
            .filter(|(p, _)| principals.contains(p))
            .map(|(_, r)| r.clone())
            .collect()
    }

    fn refused(&self, r: Refused) -> ApiError {
        self.metrics.auth_rejection(r.label(), r.reason());
        let mut e = ApiError::new(r.status(), r.code(), r.message());
        e.retry_after = r.retry_after();
        e
    }

    /// `Ok` when `writer` may make every write of `writes`, else a 403 naming what it may not
    /// do (`lines` pairs each refused write with its batch line, when given).
    pub fn check(
        &self,
        writer: &Writer,
        writes: &[(Option<usize>, Write<'_>)],
    ) -> Result<(), ApiError> {
        let mut refused: Vec<(Option<usize>, String)> = Vec::new();
        for (line, w) in writes {
            if let Err(why) = writer.rights.allows(*w) {
                refused.push((*line, why));
            }
        }
        let Some((_, first)) = refused.first() else {
            return Ok(());
        };
        self.metrics.auth_rejection(&writer.name, "forbidden");
        let mut message = first.clone();
        if refused.len() > 1 || refused[0].0.is_some() {
            message = format!(
                "{} write(s) not allowed, nothing was produced; first: {}",
                refused.len(),
                match refused[0].0 {
                    Some(l) => format!("line {l}: {first}"),
                    None => first.clone(),
                }
            );
        }
        let mut e = ApiError::new(StatusCode::FORBIDDEN, "forbidden", message);
        if refused.iter().any(|(l, _)| l.is_some()) {
            let lines: Vec<serde_json::Value> = refused
                .iter()
                .map(|(l, m)| serde_json::json!({"line": l, "message": m}))
                .collect();
            e.details
                .insert("lines".into(), serde_json::Value::Array(lines));
        }
        Err(e)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
