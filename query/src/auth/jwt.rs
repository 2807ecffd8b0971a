//! Verification of bearer JWTs from the configured issuer (`[query.jwt]`): signature (HS256
//! secret, RS256/ES256 public key PEM, a JWKS file or a JWKS URL ([`super::jwks`]), picked by
//! the token's `kid`), `iss`, `aud`, `exp` and `nbf` (with `leeway_s`), then the groups claim
//! becomes principals.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use super::jwks::RemoteJwks;
use super::settings::{resolve_secret, JwtConfig};

/// A verified token's caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Claims {
    pub subject: String,
    pub principals: BTreeSet<String>,
}

pub(super) struct Key {
    pub(super) kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

/// Checks tokens of one issuer.
pub struct Verifier {
    issuer: String,
    audience: Vec<String>,
    keys: Vec<Key>,
    remote: Option<Arc<RemoteJwks>>,
    groups_claim: String,
    group_prefix: String,
    subject_prefix: String,
    leeway_s: u64,
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
    pub fn from_config(
        c: &JwtConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Verifier>> {
        if !c.enabled() {
            return Ok(None);
        }
        let mut keys = Vec::new();
        if let Some(secret) = resolve_secret(
            "query.jwt.hs256_secret",
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
                    "query.jwt.public_key_file: cannot read {}",
                    c.public_key_file.display()
                )
            })?;
            let (alg, key) = if let Ok(k) = DecodingKey::from_rsa_pem(&pem) {
                (Algorithm::RS256, k)
            } else if let Ok(k) = DecodingKey::from_ec_pem(&pem) {
                (Algorithm::ES256, k)
            } else {
                bail!(
                    "query.jwt.public_key_file {}: not an RSA or EC public key in PEM",
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
            keys.extend(read_jwks(&c.jwks_file)?);
        }
        let remote = match c.jwks_url.as_str() {
            "" => None,
            url if url.starts_with("https://") || url.starts_with("http://") => {
                Some(Arc::new(RemoteJwks::new(
                    url.to_owned(),
                    Duration::from_secs(c.jwks_refresh_s.max(1)),
                    super::jwks::MIN_REFETCH,
                )))
            }
            url => bail!("query.jwt.jwks_url {url:?}: not an http(s) URL"),
        };
        if keys.is_empty() && remote.is_none() {
            bail!(
                "query.jwt.issuer is set but no key is: give hs256_secret (or _file, _env), \
                 public_key_file, jwks_file or jwks_url"
            );
        }
        Ok(Some(Verifier {
            issuer: c.issuer.clone(),
            audience: c.audience.clone(),
            keys,
            remote,
            groups_claim: c.groups_claim.clone(),
            group_prefix: c.group_prefix.clone(),
            subject_prefix: c.subject_prefix.clone(),
            leeway_s: c.leeway_s,
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
        let groups = walk(&claims, &self.groups_claim)
            .ok_or_else(|| format!("the token has no {:?} claim", self.groups_claim))?;
        let groups: Vec<&str> = match groups {
            Value::String(s) => vec![s.as_str()],
            Value::Array(items) => items
                .iter()
                .map(|i| i.as_str().ok_or(()))
                .collect::<Result<_, _>>()
                .map_err(|_| format!("the {:?} claim must hold strings", self.groups_claim))?,
            _ => {
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

/// `claims.a.b` for the path `a.b`.
fn walk<'a>(claims: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(claims, |v, part| v.get(part))
}

fn read_jwks(path: &std::path::Path) -> Result<Vec<Key>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("query.jwt.jwks_file: cannot read {}", path.display()))?;
    parse_jwks(&text, &format!("query.jwt.jwks_file {}", path.display()))
}

/// The keys of a JWKS document; `what` names its source in errors.
pub(super) fn parse_jwks(text: &str, what: &str) -> Result<Vec<Key>> {
    let set: JwkSet = serde_json::from_str(text).with_context(|| format!("{what}: not a JWKS"))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let key = DecodingKey::from_jwk(jwk).with_context(|| format!("{what}: a key"))?;
        let alg = match jwk.common.key_algorithm {
            Some(a) => a
                .to_string()
                .parse::<Algorithm>()
                .with_context(|| format!("{what}: unsupported algorithm {a}"))?,
            None => match &jwk.algorithm {
                jsonwebtoken::jwk::AlgorithmParameters::RSA(_) => Algorithm::RS256,
                jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_) => Algorithm::ES256,
                _ => bail!("{what}: a key without \"alg\" that is neither RSA nor EC"),
            },
        };
        keys.push(Key {
            kid: jwk.common.key_id.clone(),
            alg,
            key,
        });
    }
    Ok(keys)
}

#[cfg(test)]
#[path = "jwt_tests.rs"]
mod tests;
