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
    /// The sink flushes the collection once its oldest unflushed row is this old; `0` (the
    /// default): never by age. Off by default because a flush every few seconds makes many small
    /// segments that Milvus indexes and compacts while the ingest goes on, which multiplied the
    /// query tail during an ingest (docs/benchmarks.md, "Query load during ingest"); rows alone
    /// keep the brute-force-searched tail under `flush_rows`.
    #[serde(with = "duration_ms")]
    pub flush_interval: Duration,
    /// The vector index of a collection the sink creates ([`IndexType`]); an existing
    /// collection with another index type is refused ([`crate::Error::IndexMismatch`]).
    pub index_type: IndexType,
    /// HNSW: the most neighbours of a node (`M`, 2 to 2048).
    pub hnsw_m: u32,
    /// HNSW: the candidate list while building (`efConstruction`, 1 to 2^31 - 1).
    pub hnsw_ef_construction: u32,
    /// IVF_FLAT and IVF_SQ8: the clusters per segment (`nlist`, 1 to 65536).
    pub ivf_nlist: u32,
}

/// The vector index types freshet creates (all with the COSINE metric).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexType {
    /// A graph (`hnsw_m`, `hnsw_ef_construction`), searched with `ef`: the raw vectors and the
    /// graph in memory.
    #[default]
    Hnsw,
    /// Clusters (`ivf_nlist`) of raw vectors, searched with `nprobe`.
    IvfFlat,
    /// Clusters of vectors quantised to one byte a dimension (a quarter of the raw size),
    /// searched with `nprobe`.
    IvfSq8,
    /// No index: every search compares every vector (exact).
    Flat,
}

impl IndexType {
    /// Every type, in the order of the docs.
    pub const ALL: [IndexType; 4] = [
        IndexType::Hnsw,
        IndexType::IvfFlat,
        IndexType::IvfSq8,
        IndexType::Flat,
    ];

    /// The setting's value (`"hnsw"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            IndexType::Hnsw => "hnsw",
            IndexType::IvfFlat => "ivf_flat",
            IndexType::IvfSq8 => "ivf_sq8",
            IndexType::Flat => "flat",
        }
    }

    /// Milvus' name of the type (`"HNSW"`, ...).
    pub fn milvus_name(self) -> &'static str {
        match self {
            IndexType::Hnsw => "HNSW",
            IndexType::IvfFlat => "IVF_FLAT",
            IndexType::IvfSq8 => "IVF_SQ8",
            IndexType::Flat => "FLAT",
        }
    }

    /// Searched with `nprobe` (the IVF types).
    pub fn is_ivf(self) -> bool {
        matches!(self, IndexType::IvfFlat | IndexType::IvfSq8)
    }
}

impl std::fmt::Display for IndexType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Largest HNSW `M` Milvus 2.3 accepts.
pub const MAX_HNSW_M: u32 = 2048;
/// Largest IVF `nlist` (and `nprobe`) Milvus 2.3 accepts.
pub const MAX_IVF_NLIST: u32 = 65_536;

impl MilvusConfig {
    /// Checks the index settings against the ranges Milvus accepts, so that a wrong value
    /// stops the process at start instead of failing the first `create_index`.
    pub fn validate(&self) -> std::result::Result<(), crate::Error> {
        let bad = |m: String| Err(crate::Error::Config(m));
        if !(2..=MAX_HNSW_M).contains(&self.hnsw_m) {
            return bad(format!(
                "hnsw_m must be in 2..={MAX_HNSW_M}, got {}",
                self.hnsw_m
            ));
        }
        if !(1..=i32::MAX as u32).contains(&self.hnsw_ef_construction) {
            return bad(format!(
                "hnsw_ef_construction must be in 1..={}, got {}",
                i32::MAX,
                self.hnsw_ef_construction
            ));
        }
        if !(1..=MAX_IVF_NLIST).contains(&self.ivf_nlist) {
            return bad(format!(
                "ivf_nlist must be in 1..={MAX_IVF_NLIST}, got {}",
                self.ivf_nlist
            ));
        }
        Ok(())
    }
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
            flush_interval: Duration::ZERO,
            index_type: IndexType::Hnsw,
            hnsw_m: 16,
            hnsw_ef_construction: 200,
            ivf_nlist: 1024,
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

    #[test]
    fn index_settings_default_to_hnsw_16_200() {
        let c = MilvusConfig::default();
        assert_eq!(
            (c.index_type, c.hnsw_m, c.hnsw_ef_construction, c.ivf_nlist),
            (IndexType::Hnsw, 16, 200, 1024)
        );
        c.validate().unwrap();
    }

    #[test]
    fn index_types_by_name() {
        for t in IndexType::ALL {
            let c: MilvusConfig =
                serde_json::from_str(&format!(r#"{{"index_type": "{t}"}}"#)).unwrap();
            assert_eq!(c.index_type, t);
            assert_eq!(t.milvus_name().to_ascii_lowercase(), t.as_str());
        }
        for wrong in ["HNSW", "ivf", "ivf_pq", "diskann", ""] {
            let e =
                serde_json::from_str::<MilvusConfig>(&format!(r#"{{"index_type": "{wrong}"}}"#))
                    .unwrap_err();
            assert!(e.to_string().contains("ivf_sq8"), "{wrong}: {e}");
        }
    }

    #[test]
    fn index_settings_outside_milvus_ranges_are_refused() {
        let ok = MilvusConfig {
            hnsw_m: 2048,
            hnsw_ef_construction: 1,
            ivf_nlist: 65_536,
            ..Default::default()
        };
        ok.validate().unwrap();
        for (c, name) in [
            (
                MilvusConfig {
                    hnsw_m: 1,
                    ..ok.clone()
                },
                "hnsw_m",
            ),
            (
                MilvusConfig {
                    hnsw_m: 2049,
                    ..ok.clone()
                },
                "hnsw_m",
            ),
            (
                MilvusConfig {
                    hnsw_ef_construction: 0,
                    ..ok.clone()
                },
                "hnsw_ef_construction",
            ),
            (
                MilvusConfig {
                    hnsw_ef_construction: u32::MAX,
                    ..ok.clone()
                },
                "hnsw_ef_construction",
            ),
            (
                MilvusConfig {
                    ivf_nlist: 0,
                    ..ok.clone()
                },
                "ivf_nlist",
            ),
            (
                MilvusConfig {
                    ivf_nlist: 65_537,
                    ..ok.clone()
                },
                "ivf_nlist",
            ),
        ] {
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(name) && e.contains("[milvus]"), "{e}");
        }
    }
}
