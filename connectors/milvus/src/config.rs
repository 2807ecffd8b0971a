//! Connection and collection settings.

use std::time::Duration;

use freshet_config::Secret;
use serde::{Deserialize, Serialize};

/// Where the vectors go and what they are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MilvusConfig {
    /// gRPC endpoint, e.g. `http://127.0.0.1:19530`.
    pub url: String,
    /// Collection name.
    pub collection: String,
    /// Vector dimension (384 for all-MiniLM-L6-v2).
    pub dim: usize,
    /// Embedding model id, recorded in the collection and checked on `ensure_collection`.
    pub model_id: String,
    /// `user:password` or an API key; `None` without authentication. `Debug` redacts it.
    pub token: Option<Secret>,
    /// Connect timeout and per-RPC deadline (also how long `flush` waits).
    #[serde(with = "duration_ms")]
    pub timeout: Duration,
    /// Rows per upsert request (requests are also kept under [`MilvusConfig::max_batch_bytes`]).
    pub max_batch_rows: usize,
    /// Approximate payload bytes per upsert request (Milvus 2.3 proxies accept 64 MiB).
    pub max_batch_bytes: usize,
    /// Ids per delete / get request, and rows per page when listing ids (at most 16384).
    pub page_size: usize,
    /// The sink flushes (seals) the collection once this many rows were written (inserted or
    /// deleted) since its last flush; `0`: never by rows ([`crate::Sealer`]).
    pub flush_rows: u64,
    /// The sink flushes the collection once its oldest unflushed row is this old; `0`: never
    /// by age.
    #[serde(with = "duration_ms")]
    pub flush_interval: Duration,
}

impl Default for MilvusConfig {
    fn default() -> Self {
        MilvusConfig {
            url: "http://127.0.0.1:19530".to_owned(),
            collection: "freshet_chunks".to_owned(),
            dim: 384,
            model_id: "sentence-transformers/all-MiniLM-L6-v2".to_owned(),
            token: None,
            timeout: Duration::from_secs(60),
            max_batch_rows: 1000,
            max_batch_bytes: 8 * 1024 * 1024,
            page_size: 4096,
            flush_rows: 4096,
            flush_interval: Duration::from_secs(10),
        }
    }
}

/// `timeout` in a config file: milliseconds (`60000`) or a string with a unit (`"60s"`,
/// `"500ms"`, `"2m"`).
mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Ms(u64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Ms(ms) => Ok(Duration::from_millis(ms)),
            Raw::Text(t) => parse(&t).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "invalid duration {t:?}: use milliseconds or a number with ms, s or m"
                ))
            }),
        }
    }

    pub(super) fn parse(t: &str) -> Option<Duration> {
        let t = t.trim();
        let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
            (n, 1)
        } else if let Some(n) = t.strip_suffix('s') {
            (n, 1000)
        } else if let Some(n) = t.strip_suffix('m') {
            (n, 60_000)
        } else {
            (t, 1)
        };
        let n: u64 = num.trim().parse().ok()?;
        Some(Duration::from_millis(n.checked_mul(mult)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_token() {
        let c: MilvusConfig = serde_json::from_str(r#"{"token": "root:Milvus-s3cret"}"#).unwrap();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn timeout_formats() {
        let c: MilvusConfig = serde_json::from_str(r#"{"timeout": 1500, "dim": 8}"#).unwrap();
        assert_eq!((c.timeout, c.dim), (Duration::from_millis(1500), 8));
        assert_eq!(c.collection, "freshet_chunks");
        for (t, ms) in [("\"30s\"", 30_000), ("\"250ms\"", 250), ("\"2m\"", 120_000)] {
            let c: MilvusConfig = serde_json::from_str(&format!(r#"{{"timeout": {t}}}"#)).unwrap();
            assert_eq!(c.timeout, Duration::from_millis(ms));
        }
        assert!(serde_json::from_str::<MilvusConfig>(r#"{"timeout": "soon"}"#).is_err());
    }
}
