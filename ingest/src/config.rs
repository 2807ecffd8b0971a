//! Ingest service configuration: the `[ingest]` section of the same TOML file the pipeline and
//! the query node read (`deploy/freshet.toml`), plus the shared `[kafka]` (brokers, topic) and
//! `[limits]` (the pipeline's record limits, which every document is checked against before it
//! is produced). `FRESHET_<SECTION>_<KEY>` environment variables override the file
//! (`FRESHET_INGEST_LISTEN=0.0.0.0:8090`).

use std::path::Path;

use std::path::PathBuf;

use anyhow::{bail, Result};
use freshet_config::Sections;
use freshet_core::limits::RecordLimits;
use freshet_kafka::KafkaConfig;
use freshet_service::auth::{JwtConfig, Limits};
use serde::{Deserialize, Serialize};

use crate::auth::settings::{WriteKeyConfig, WriteRuleConfig};

/// Everything the ingest service reads ([`sections`]; `freshet-config` drops the other
/// binaries' sections and refuses unknown ones).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub ingest: IngestConfig,
    pub kafka: KafkaConfig,
    pub limits: RecordLimits,
}

/// The `[ingest]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// `host:port` of the HTTP API.
    pub listen: String,
    /// PEM certificate chain and private key: serve HTTPS. Both or neither.
    pub tls_cert_file: PathBuf,
    pub tls_key_file: PathBuf,
    /// API keys with what each may write (`[[ingest.keys]]`; see the `auth` module).
    pub keys: Vec<WriteKeyConfig>,
    /// A JWT issuer whose tokens identify writers (`[ingest.jwt]`, the shape of `[query.jwt]`).
    pub jwt: JwtConfig,
    /// What tokens holding a principal may write (`[[ingest.jwt_rules]]`).
    pub jwt_rules: Vec<WriteRuleConfig>,
    /// Without keys or an issuer, serve on an address beyond loopback anyway (anyone who
    /// reaches it may write anything).
    pub allow_unauthenticated: bool,
    /// Default limits of each key, token subject, or (unauthenticated) of all callers together:
    /// requests per second sustained, at once (0: the rate, rounded up), and in flight.
    /// 0 = unlimited. Past them: 429 with `Retry-After`.
    pub rate_per_second: f64,
    pub rate_burst: u32,
    pub max_concurrent: u32,
    /// Largest request body accepted (bytes); a larger one is answered 413. A file upload is
    /// sent on as base64 (4/3 of its size), which must also fit `limits.max_value_bytes`.
    pub max_body_bytes: usize,
    /// Most documents one `POST /v1/documents:batch` may carry.
    pub max_batch_documents: usize,
    /// How long the broker may take to acknowledge a record before the request fails with a
    /// 503 (librdkafka's `message.timeout.ms` of this service's producer, unless
    /// `kafka.client_properties` sets it).
    pub produce_timeout_ms: u64,
    /// How long `/readyz` waits for the broker's metadata.
    pub ready_timeout_ms: u64,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            listen: "127.0.0.1:8090".into(),
            tls_cert_file: PathBuf::new(),
            tls_key_file: PathBuf::new(),
            keys: Vec::new(),
            jwt: JwtConfig::default(),
            jwt_rules: Vec::new(),
            allow_unauthenticated: false,
            rate_per_second: 0.0,
            rate_burst: 0,
            max_concurrent: 0,
            max_body_bytes: 16 << 20,
            max_batch_documents: 1000,
            produce_timeout_ms: 30_000,
            ready_timeout_ms: 2_000,
        }
    }
}

impl Config {
    /// Reads `path` (if any), applies the process environment, validates.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        Self::load_with_env(path, &env)
    }

    pub fn load_with_env(path: Option<&Path>, env: &[(String, String)]) -> Result<Config> {
        if env.iter().any(|(k, _)| k == "FRESHET_INGEST_API_KEYS") {
            bail!(
                "FRESHET_INGEST_API_KEYS is not a setting: each ingest key comes with what it may \
                 write, as [[ingest.keys]] (or FRESHET_INGEST_KEYS); see docs/ingest.md"
            );
        }
        let config: Config = freshet_config::load(path, env, &sections())?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<()> {
        let i = &self.ingest;
        let positive = [
            ("max_body_bytes", i.max_body_bytes as u64),
            ("max_batch_documents", i.max_batch_documents as u64),
            ("produce_timeout_ms", i.produce_timeout_ms),
            ("ready_timeout_ms", i.ready_timeout_ms),
        ];
        for (name, v) in positive {
            if v == 0 {
                bail!("ingest.{name} must be at least 1");
            }
        }
        if self.kafka.topic.is_empty() {
            bail!("kafka.topic must not be empty");
        }
        i.validate_auth()
    }

    /// The Kafka settings of this service's producer: `[kafka]` with `message.timeout.ms` set to
    /// `ingest.produce_timeout_ms` unless `kafka.client_properties` says otherwise.
    pub fn producer_kafka(&self) -> KafkaConfig {
        let mut k = self.kafka.clone();
        let set = ["message.timeout.ms", "delivery.timeout.ms"]
            .iter()
            .any(|p| k.client_properties.contains_key(*p));
        if !set {
            k.client_properties.insert(
                "message.timeout.ms".into(),
                self.ingest.produce_timeout_ms.to_string(),
            );
        }
        k
    }
}

impl IngestConfig {
    /// The default limits (`rate_per_second`, `rate_burst`, `max_concurrent`).
    pub fn limits(&self) -> Limits {
        Limits {
            rate_per_second: self.rate_per_second,
            burst: self.rate_burst,
            max_concurrent: self.max_concurrent,
        }
    }

    /// Whether writers must identify themselves (keys or an issuer).
    pub fn authenticated(&self) -> bool {
        !self.keys.is_empty() || self.jwt.enabled()
    }

    fn validate_auth(&self) -> Result<()> {
        self.limits().check("ingest")?;
        let mut names = std::collections::BTreeSet::new();
        for k in &self.keys {
            if k.name.trim().is_empty() {
                bail!("every [[ingest.keys]] entry needs a name");
            }
            if !names.insert(k.name.as_str()) {
                bail!("ingest.keys: the name {:?} appears twice", k.name);
            }
            let what = format!("ingest.keys {:?}", k.name);
            k.grants().check(&what)?;
            Limits::with(self.limits(), k.rate_per_second, k.burst, k.max_concurrent)
                .check(&what)?;
        }
        self.jwt.validate("ingest.jwt", self.limits())?;
        match (self.jwt.enabled(), self.jwt_rules.is_empty()) {
            (true, true) => bail!(
                "ingest.jwt has an issuer but no [[ingest.jwt_rules]]: every token would be \
                 refused; give each principal that may write its rule"
            ),
            (false, false) => bail!("[[ingest.jwt_rules]] need an [ingest.jwt] issuer"),
            _ => {}
        }
        let mut principals = std::collections::BTreeSet::new();
        for r in &self.jwt_rules {
            if r.principal.trim().is_empty() {
                bail!("every [[ingest.jwt_rules]] entry needs a principal");
            }
            if !principals.insert(r.principal.as_str()) {
                bail!(
                    "ingest.jwt_rules: the principal {:?} appears twice",
                    r.principal
                );
            }
            r.grants()
                .check(&format!("ingest.jwt_rules {:?}", r.principal))?;
        }
        if self.tls_cert_file.as_os_str().is_empty() != self.tls_key_file.as_os_str().is_empty() {
            bail!("ingest.tls_cert_file and ingest.tls_key_file go together: set both");
        }
        if self.authenticated() && self.allow_unauthenticated {
            bail!(
                "ingest.allow_unauthenticated is for a service without keys or an issuer; with \
                 ingest.keys or ingest.jwt every writer must identify itself"
            );
        }
        if !self.authenticated()
            && !self.allow_unauthenticated
            && !freshet_service::transport::is_loopback_listen(&self.listen)
        {
            bail!(
                "ingest.listen {:?} is beyond loopback and no writer must identify itself: \
                 anyone who reaches it could write, overwrite and delete any document with any \
                 ACL. Give [[ingest.keys]] (or an [ingest.jwt] issuer), or set \
                 ingest.allow_unauthenticated = true",
                self.listen
            );
        }
        Ok(())
    }
}

/// The sections the ingest service reads (the others are accepted in the file and ignored).
pub fn sections() -> Sections {
    Sections::new()
        .with::<IngestConfig>("ingest")
        .with::<KafkaConfig>("kafka")
        .with::<RecordLimits>("limits")
}

#[cfg(test)]
mod tests {
    use super::*;

    use freshet_config::vars as env;

    #[test]
    fn defaults_need_no_file_and_env_overrides() {
        let c = Config::load_with_env(None, &[]).unwrap();
        assert_eq!(c.ingest, IngestConfig::default());
        assert_eq!(c.kafka.topic, "documents");
        let c = Config::load_with_env(
            None,
            &env(&[
                ("FRESHET_INGEST_LISTEN", "127.0.0.1:1"),
                ("FRESHET_INGEST_RATE_PER_SECOND", "2.5"),
                ("FRESHET_KAFKA_TOPIC", "t"),
                ("FRESHET_LIMITS_MAX_ID_BYTES", "10"),
            ]),
        )
        .unwrap();
        assert_eq!(c.ingest.listen, "127.0.0.1:1");
        assert_eq!(c.ingest.rate_per_second, 2.5);
        assert_eq!(c.kafka.topic, "t");
        assert_eq!(c.limits.max_id_bytes, 10);
    }

    #[test]
    fn the_documented_file_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/freshet.toml");
        let c = Config::load_with_env(Some(&path), &[]).unwrap();
        assert_eq!(c.ingest, IngestConfig::default());
        let documented = freshet_config::read_table(Some(&path)).unwrap()["ingest"]
            .as_table()
            .unwrap()
            .keys()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>();
        let settings = sections().settings("ingest").unwrap().clone();
        assert_eq!(documented, settings.iter().map(|s| s.to_string()).collect());
    }

    #[test]
    fn bad_settings_are_clear_errors() {
        let e = Config::load_with_env(None, &env(&[("FRESHET_INGEST_MAX_BODY_BYTES", "0")]))
            .unwrap_err();
        assert!(format!("{e:#}").contains("ingest.max_body_bytes"), "{e:#}");
        let e = Config::load_with_env(None, &env(&[("FRESHET_INGEST_API_KEYS", r#"["k"]"#)]))
            .unwrap_err();
        assert!(format!("{e:#}").contains("[[ingest.keys]]"), "{e:#}");
    }

    #[test]
    fn the_producer_timeout_follows_the_setting_unless_kafka_sets_one() {
        let c = Config::load_with_env(None, &env(&[("FRESHET_INGEST_PRODUCE_TIMEOUT_MS", "5")]))
            .unwrap();
        assert_eq!(
            c.producer_kafka().client_properties["message.timeout.ms"],
            "5"
        );
        let c = Config::load_with_env(
            None,
            &env(&[(
                "FRESHET_KAFKA_CLIENT_PROPERTIES",
                r#"{"message.timeout.ms" = "7"}"#,
            )]),
        )
        .unwrap();
        assert_eq!(
            c.producer_kafka().client_properties["message.timeout.ms"],
            "7"
        );
    }
}
