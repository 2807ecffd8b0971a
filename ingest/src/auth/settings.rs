//! The write-permission settings of `[ingest]`: API keys with what each may write
//! (`[[ingest.keys]]`), and, for tokens of the `[ingest.jwt]` issuer, the same rules bound to a
//! principal the token holds (`[[ingest.jwt_rules]]`).

use std::path::PathBuf;

use anyhow::{bail, Result};
use freshet_service::auth::Secret;
use serde::{Deserialize, Serialize};

/// One API key (`[[ingest.keys]]`): its name (in logs, metrics and errors, never the key), the
/// secret (inline, or read from a file or an environment variable: exactly one of the three),
/// what it may write, and its own limits (the `[ingest]` defaults when absent).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WriteKeyConfig {
    pub name: String,
    pub key: Secret,
    pub key_file: PathBuf,
    pub key_env: String,
    pub id_prefixes: Vec<String>,
    pub may_grant: Vec<String>,
    pub may_publish_public: bool,
    pub may_delete: bool,
    pub rate_per_second: Option<f64>,
    pub burst: Option<u32>,
    pub max_concurrent: Option<u32>,
}

/// What the tokens holding `principal` may write (`[[ingest.jwt_rules]]`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WriteRuleConfig {
    /// A principal of the token: a group with `[ingest.jwt] group_prefix` (`group:crm-sync`),
    /// or the subject with `subject_prefix` (`user:alice`).
    pub principal: String,
    pub id_prefixes: Vec<String>,
    pub may_grant: Vec<String>,
    pub may_publish_public: bool,
    pub may_delete: bool,
}

/// The rights of a key or a rule, as configured.
pub struct Grants<'a> {
    pub id_prefixes: &'a [String],
    pub may_grant: &'a [String],
    pub may_publish_public: bool,
    pub may_delete: bool,
}

impl WriteKeyConfig {
    pub fn grants(&self) -> Grants<'_> {
        Grants {
            id_prefixes: &self.id_prefixes,
            may_grant: &self.may_grant,
            may_publish_public: self.may_publish_public,
            may_delete: self.may_delete,
        }
    }
}

impl WriteRuleConfig {
    pub fn grants(&self) -> Grants<'_> {
        Grants {
            id_prefixes: &self.id_prefixes,
            may_grant: &self.may_grant,
            may_publish_public: self.may_publish_public,
            may_delete: self.may_delete,
        }
    }
}

impl Grants<'_> {
    /// Refuses rights that are missing, empty or would grant nothing. `what` names the entry.
    pub fn check(&self, what: &str) -> Result<()> {
        if self.id_prefixes.is_empty() {
            bail!(
                "{what}: give id_prefixes, the ids it may write (\"crm/\"; [\"*\"] for every id)"
            );
        }
        if self.id_prefixes.iter().any(|p| p.is_empty()) {
            bail!("{what}: an empty id prefix; write \"*\" for every id");
        }
        if self.may_grant.iter().any(|p| p.trim().is_empty()) {
            bail!("{what}: may_grant must not hold an empty principal");
        }
        if self.may_grant.is_empty() && !self.may_publish_public && !self.may_delete {
            bail!(
                "{what}: it may write nothing: give may_grant (the ACL principals its documents \
                 may carry), may_publish_public or may_delete"
            );
        }
        Ok(())
    }
}
