//! Verification of bearer JWTs from one configured issuer: signature (HS256 secret, RS256/ES256
//! public key PEM, a JWKS file or a JWKS URL ([`crate::auth::jwks`]), picked by the token's `alg` and
//! `kid`), `iss`, `aud`, `exp` and `nbf` (with `leeway_s`), then the groups claim becomes
//! principals.
//!
//! The groups claim is named by `groups_claim`: a name starting with `/` is a JSON pointer
//! (RFC 6901: `/realm_access/roles`, `/https:~1~1example.com~1claims/groups`); any other name is
//! looked up as one top-level claim first (so Auth0's namespaced `https://example.com/groups`
//! works as written), then as a path whose dots walk into objects (`realm_access.roles`).
//! A token without the claim holds no group (public documents only) unless
//! `missing_groups = "reject"`, which refuses it (401).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::jwk::{parse_jwks, Key};
use crate::auth::jwks::RemoteJwks;
use crate::auth::secret::{resolve_secret, Secret};

/// What a valid token without the groups claim holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissingGroups {
    /// No group: what a token with an empty groups list holds (identity providers leave the
    /// claim out for a user in no group).
    #[default]
    Public,
    /// A 401: every token must carry the claim.
    Reject,
}

/// A JWT issuer (`[query.jwt]`, `[ingest.jwt]`): tokens signed by it (HS256 secret, RS256/ES256
/// public key PEM, a JWKS file or a JWKS URL) with the right `iss` and `aud`, within
/// `exp`/`nbf`, carry the caller's groups in `groups_claim`. An empty `issuer` turns JWT
/// authentication off.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JwtConfig {
    pub issuer: String,
    /// Accepted `aud` values (a token must name one of them); required with an issuer.
    pub audience: Vec<String>,
    pub hs256_secret: Secret,
    pub hs256_secret_file: std::path::PathBuf,
    pub hs256_secret_env: String,
    /// PEM public key: RSA (RS256) or EC P-256 (ES256).
    pub public_key_file: std::path::PathBuf,
    /// A JWKS document (`{"keys": [...]}`); the token's `kid` picks the key.
    pub jwks_file: std::path::PathBuf,
    /// The issuer's JWKS URL (`https://…/.well-known/jwks.json`, or `jwks_uri` of its OpenID
    /// configuration): fetched at start, every `jwks_refresh_s`, and when a token names an
    /// unknown `kid` (at most every 30 s). `https://` unless the host is a loopback address or
    /// `allow_insecure_http` is set.
    pub jwks_url: String,
    pub jwks_refresh_s: u64,
    /// `jwks_url` may be `http://` to a host beyond loopback (the keys could be swapped on the
    /// way, and with them every identity).
    pub allow_insecure_http: bool,
    /// Claim holding the groups: an array of strings or one string (see the module doc for how
    /// it is looked up).
    pub groups_claim: String,
    /// A token without the groups claim: `public` (no group) or `reject` (401).
    pub missing_groups: MissingGroups,
    /// Prefix added to each group to make its principal (`eng` → `group:eng`).
    pub group_prefix: String,
    /// Non-empty: the token's `sub` is a principal too, with this prefix (`user:`).
    pub subject_prefix: String,
    /// Clock skew tolerated on `exp` and `nbf` (seconds).
    pub leeway_s: u64,
    /// Limits per token subject (the service's defaults when absent).
    pub rate_per_second: Option<f64>,
    pub burst: Option<u32>,
    pub max_concurrent: Option<u32>,
}

impl Default for JwtConfig {
    fn default() -> Self {
        JwtConfig {
            issuer: String::new(),
            audience: Vec::new(),
            hs256_secret: Secret::default(),
            hs256_secret_file: Default::default(),
            hs256_secret_env: String::new(),
            public_key_file: Default::default(),
            jwks_file: Default::default(),
            jwks_url: String::new(),
            jwks_refresh_s: 300,
            allow_insecure_http: false,
            groups_claim: "groups".into(),
            missing_groups: MissingGroups::Public,
            group_prefix: "group:".into(),
            subject_prefix: String::new(),
            leeway_s: 30,
            rate_per_second: None,
            burst: None,
            max_concurrent: None,
        }
    }
}

impl JwtConfig {
    pub fn enabled(&self) -> bool {
        !self.issuer.is_empty()
    }

    /// Checks what can be checked without reading files (`section` names it in errors:
    /// `query.jwt`).
    pub fn validate(&self, section: &str, defaults: crate::auth::Limits) -> Result<()> {
        if !self.enabled() {
            return Ok(());
        }
        if self.audience.is_empty() || self.audience.iter().any(|a| a.is_empty()) {
            bail!("{section}.audience: give the audience tokens must be issued for");
        }
        if self.groups_claim.is_empty() || self.groups_claim == "/" {
            bail!("{section}.groups_claim must name a claim");
        }
        crate::auth::Limits::with(
            defaults,
            self.rate_per_second,
            self.burst,
            self.max_concurrent,
        )
        .check(section)?;
        if !self.jwks_url.is_empty() {
            crate::transport::check_url(
                &format!("{section}.jwks_url"),
                &self.jwks_url,
                self.allow_insecure_http,
                &format!("{section}.allow_insecure_http"),
            )?;
        }
        Ok(())
    }
}

/// A verified token's caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Claims {
    pub subject: String,
    /// The groups with `group_prefix`, and the subject with `subject_prefix` when that is set.
    pub principals: BTreeSet<String>,
}

/// Checks tokens of one issuer.
pub struct Verifier {
    issuer: String,
    audience: Vec<String>,
    keys: Vec<Key>,
    remote: Option<Arc<RemoteJwks>>,
    groups_claim: String,
    missing_groups: MissingGroups,
    group_prefix: String,
    subject_prefix: String,
    leeway_s: u64,
    /// Whether a token without the groups claim was logged already.
    told_missing: AtomicBool,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("issuer", &self.issuer)
            .field("keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// Reads the configured keys (files, environment). `None` when no issuer is configured.
    /// `section` names the settings in errors (`query.jwt`).
    pub fn from_config(
        c: &JwtConfig,
        section: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Verifier>> {
        if !c.enabled() {
            return Ok(None);
        }
        c.validate(section, crate::auth::Limits::NONE)?;
        let mut keys = Vec::new();
        if let Some(secret) = resolve_secret(
            &format!("{section}.hs256_secret"),
            &c.hs256_secret,
            &c.hs256_secret_file,
            &c.hs256_secret_env,
            env,
        )? {
            keys.push(Key {
                kid: None,
                alg: Algorithm::HS256,
                key: DecodingKey::from_secret(secret.0.as_bytes()),
            });
        }
        if !c.public_key_file.as_os_str().is_empty() {
            let pem = std::fs::read(&c.public_key_file).with_context(|| {
                format!(
                    "{section}.public_key_file: cannot read {}",
                    c.public_key_file.display()
                )
            })?;
            let (alg, key) = if let Ok(k) = DecodingKey::from_rsa_pem(&pem) {
                (Algorithm::RS256, k)
            } else if let Ok(k) = DecodingKey::from_ec_pem(&pem) {
                (Algorithm::ES256, k)
            } else {
                bail!(
                    "{section}.public_key_file {}: not an RSA or EC public key in PEM",
                    c.public_key_file.display()
                );
            };
            keys.push(Key {
                kid: None,
                alg,
                key,
            });
        }
        if !c.jwks_file.as_os_str().is_empty() {
            let what = format!("{section}.jwks_file {}", c.jwks_file.display());
            let text = std::fs::read_to_string(&c.jwks_file)
                .with_context(|| format!("{what}: cannot read it"))?;
            let (found, skipped) = parse_jwks(&text, &what)?;
            for s in skipped {
                tracing::warn!(jwks = %what, key = %s, "JWKS key skipped");
            }
            keys.extend(found);
        }
        let remote = match c.jwks_url.as_str() {
            "" => None,
            url => Some(Arc::new(RemoteJwks::new(
                url.to_owned(),
                format!("{section}.jwks_url"),
                Duration::from_secs(c.jwks_refresh_s.max(1)),
                crate::auth::jwks::MIN_REFETCH,
            ))),
        };
        if keys.is_empty() && remote.is_none() {
            bail!(
                "{section}.issuer is set but no key is: give hs256_secret (or _file, _env), \
                 public_key_file, jwks_file or jwks_url"
            );
        }
        Ok(Some(Verifier {
            issuer: c.issuer.clone(),
            audience: c.audience.clone(),
            keys,
            remote,
            groups_claim: c.groups_claim.clone(),
            missing_groups: c.missing_groups,
            group_prefix: c.group_prefix.clone(),
            subject_prefix: c.subject_prefix.clone(),
            leeway_s: c.leeway_s,
            told_missing: AtomicBool::new(false),
        }))
    }

    /// The keys fetched from `jwks_url`, when one is configured.
    pub fn remote(&self) -> Option<&Arc<RemoteJwks>> {
        self.remote.as_ref()
    }

    /// The caller of a valid token, or why the token is refused.
    pub fn verify(&self, token: &str) -> Result<Claims, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("bad token: {e}"))?;
        let fits = |k: &&Key| {
            k.alg == header.alg
                && match (&header.kid, &k.kid) {
                    (Some(want), Some(have)) => want == have,
                    (Some(_), None) | (None, _) => true,
                }
        };
        let fetched = self.remote.as_ref().map(|r| r.keys());
        let found = self
            .keys
            .iter()
            .find(fits)
            .or_else(|| fetched.as_ref().and_then(|f| f.iter().find(fits)));
        let Some(key) = found else {
            let mut why = format!(
                "no configured key verifies {:?} tokens{}",
                header.alg,
                header
                    .kid
                    .as_deref()
                    .map(|k| format!(" with kid {k:?}"))
                    .unwrap_or_default()
            );
            if let Some(r) = &self.remote {
                r.unknown_kid();
                why.push_str(" (the JWKS is fetched again)");
            }
            return Err(why);
        };
        let mut v = Validation::new(key.alg);
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&self.audience);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.validate_nbf = true;
        v.leeway = self.leeway_s;
        let data = jsonwebtoken::decode::<Value>(token, &key.key, &v)
            .map_err(|e| format!("invalid token: {e}"))?;
        let claims = data.claims;
        let subject = claims["sub"]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or("the token's sub is not a non-empty string")?
            .to_owned();
        let groups = match claim(&claims, &self.groups_claim) {
            Some(Value::Null) | None => match self.missing_groups {
                MissingGroups::Reject => {
                    return Err(format!("the token has no {:?} claim", self.groups_claim))
                }
                MissingGroups::Public => {
                    if !self.told_missing.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            claim = %self.groups_claim,
                            "a token without the groups claim holds no group (public \
                             documents only; missing_groups = \"public\"); if no token \
                             has it, check groups_claim"
                        );
                    }
                    Vec::new()
                }
            },
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().ok_or(()))
                .collect::<Result<_, _>>()
                .map_err(|_| format!("the {:?} claim must hold strings", self.groups_claim))?,
            Some(_) => {
                return Err(format!(
                    "the {:?} claim must be a string or an array of strings",
                    self.groups_claim
                ))
            }
        };
        let mut principals: BTreeSet<String> = groups
            .into_iter()
            .filter(|g| !g.is_empty())
            .map(|g| format!("{}{g}", self.group_prefix))
            .collect();
        if !self.subject_prefix.is_empty() {
            principals.insert(format!("{}{subject}", self.subject_prefix));
        }
        Ok(Claims {
            subject,
            principals,
        })
    }
}

/// The claim `name` of `claims`: a JSON pointer when `name` starts with `/`; else the top-level
/// claim of that exact name, else the path whose dots walk into objects.
pub fn claim<'a>(claims: &'a Value, name: &str) -> Option<&'a Value> {
    if name.starts_with('/') {
        return claims.pointer(name);
    }
    claims
        .get(name)
        .or_else(|| name.split('.').try_fold(claims, |v, part| v.get(part)))
}

#[cfg(test)]
#[path = "jwt_tests.rs"]
mod tests;
