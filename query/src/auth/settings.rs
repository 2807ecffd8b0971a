//! The authentication settings of `[query]`: API keys bound to principals (`[[query.keys]]`),
//! the bare `api_keys` list, admin keys, a JWT issuer (`[query.jwt]`, read by
//! [`freshet_service::auth::JwtConfig`]), and request limits. Secrets are [`Secret`]s: never printed by
//! `Debug`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use freshet_service::auth::{resolve_secret, JwtConfig, Limits, Secret};

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
}
