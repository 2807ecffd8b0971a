//! The authentication settings of `[query]`: API keys bound to principals (`[[query.keys]]`),
//! the bare `api_keys` list, admin keys, a JWT issuer (`[query.jwt]`), and request limits.
//! Secrets are [`Secret`]s: never printed by `Debug`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// A secret string (an API key, an HMAC secret): `Debug` prints `"<redacted>"`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Secret(s.to_owned())
    }
}

/// One API key (`[[query.keys]]`): its name (in logs and metrics, never the key), the secret
/// (inline, or read from a file or an environment variable: exactly one of the three), the
/// principals a request made with it may use, and its own limits (the `[query]` defaults when
/// absent).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeyConfig {
    pub name: String,
    pub key: Secret,
    pub key_file: PathBuf,
    pub key_env: String,
    pub principals: Vec<String>,
    pub rate_per_second: Option<f64>,
    pub burst: Option<u32>,
    pub max_concurrent: Option<u32>,
}

/// A JWT issuer (`[query.jwt]`): tokens signed by it (HS256 secret, RS256/ES256 public key PEM,
/// a JWKS file or a JWKS URL) with the right `iss` and `aud`, within `exp`/`nbf`, carry the caller's groups
/// in `groups_claim`. An empty `issuer` turns JWT authentication off.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JwtConfig {
    pub issuer: String,
    /// Accepted `aud` values (a token must name one of them); required with an issuer.
    pub audience: Vec<String>,
    pub hs256_secret: Secret,
    pub hs256_secret_file: PathBuf,
    pub hs256_secret_env: String,
    /// PEM public key: RSA (RS256) or EC P-256 (ES256).
    pub public_key_file: PathBuf,
    /// A JWKS document (`{"keys": [...]}`); the token's `kid` picks the key.
    pub jwks_file: PathBuf,
    /// The issuer's JWKS URL (`https://…/.well-known/jwks.json`, or `jwks_uri` of its OpenID
    /// configuration): fetched at start, every `jwks_refresh_s`, and when a token names an
    /// unknown `kid` (at most every 30 s).
    pub jwks_url: String,
    pub jwks_refresh_s: u64,
    /// Claim holding the groups: an array of strings or one string; dots walk into objects
    /// (`realm_access.roles`).
    pub groups_claim: String,
    /// Prefix added to each group to make its principal (`eng` → `group:eng`).
    pub group_prefix: String,
    /// Non-empty: the token's `sub` is a principal too, with this prefix (`user:`).
    pub subject_prefix: String,
    /// Clock skew tolerated on `exp` and `nbf` (seconds).
    pub leeway_s: u64,
    /// Limits per token subject (the `[query]` defaults when absent).
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
            hs256_secret_file: PathBuf::new(),
            hs256_secret_env: String::new(),
            public_key_file: PathBuf::new(),
            jwks_file: PathBuf::new(),
            jwks_url: String::new(),
            jwks_refresh_s: 300,
            groups_claim: "groups".into(),
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
}

/// A rate and concurrency limit (0 = unlimited).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub rate_per_second: f64,
    pub burst: u32,
    pub max_concurrent: u32,
}

impl Limits {
    /// `own` settings where given, else `defaults`.
    pub fn with(
        defaults: Limits,
        rate: Option<f64>,
        burst: Option<u32>,
        concurrent: Option<u32>,
    ) -> Limits {
        Limits {
            rate_per_second: rate.unwrap_or(defaults.rate_per_second),
            burst: burst.unwrap_or(defaults.burst),
            max_concurrent: concurrent.unwrap_or(defaults.max_concurrent),
        }
    }

    pub fn check(&self, what: &str) -> Result<()> {
        if !(self.rate_per_second.is_finite() && self.rate_per_second >= 0.0) {
            bail!("{what}: rate_per_second must be a finite number ≥ 0");
        }
        if self.rate_per_second > 1_000_000.0 {
            bail!("{what}: rate_per_second must be at most 1000000");
        }
        Ok(())
    }
}

/// A secret given inline, in a file (trailing newline dropped) or in an environment variable:
/// exactly one of them. `None` when none is given.
pub fn resolve_secret(
    what: &str,
    inline: &Secret,
    file: &Path,
    env_var: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Secret>> {
    let given = [
        !inline.0.is_empty(),
        !file.as_os_str().is_empty(),
        !env_var.is_empty(),
    ];
    match given.iter().filter(|g| **g).count() {
        0 => return Ok(None),
        1 => {}
        _ => bail!("{what}: give the secret one way only (inline, _file or _env)"),
    }
    let value = if !inline.0.is_empty() {
        inline.0.clone()
    } else if !file.as_os_str().is_empty() {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("{what}: cannot read {}", file.display()))?;
        text.trim_end_matches(['\r', '\n']).to_owned()
    } else {
        env(env_var)
            .with_context(|| format!("{what}: environment variable {env_var} is not set"))?
    };
    if value.trim().is_empty() {
        bail!("{what}: the secret is empty");
    }
    Ok(Some(Secret(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_not_printed() {
        let k = KeyConfig {
            name: "a".into(),
            key: "hunter2".into(),
            ..Default::default()
        };
        let shown = format!("{k:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("redacted"),
            "{shown}"
        );
    }

    #[test]
    fn a_secret_comes_one_way() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("k");
        std::fs::write(&file, "from-file\n").unwrap();
        let env = |n: &str| (n == "K").then(|| "from-env".to_string());
        let none = Path::new("");
        let got = |inline: &str, f: &Path, e: &str| {
            resolve_secret("k", &Secret(inline.into()), f, e, &env).map(|s| s.map(|s| s.0))
        };
        assert_eq!(got("x", none, "").unwrap().as_deref(), Some("x"));
        assert_eq!(got("", &file, "").unwrap().as_deref(), Some("from-file"));
        assert_eq!(got("", none, "K").unwrap().as_deref(), Some("from-env"));
        assert_eq!(got("", none, "").unwrap(), None);
        assert!(got("x", &file, "").is_err());
        assert!(got("", none, "MISSING").is_err());
        assert!(got("", &dir.path().join("nope"), "").is_err());
        std::fs::write(&file, "\n").unwrap();
        assert!(got("", &file, "").is_err());
    }
}
