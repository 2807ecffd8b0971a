//! Pipeline configuration: one TOML file (every setting optional, see `deploy/freshet.toml`),
//! then `FRESHET_<SECTION>_<KEY>` environment variables on top (`FRESHET_KAFKA_BROKERS=…`,
//! `FRESHET_PIPELINE_WORKERS=4`). Values of environment variables are read as TOML values
//! (`4`, `true`, `["a","b"]`) and fall back to plain strings.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use freshet_embedding::EmbeddingConfig;
use freshet_kafka::KafkaConfig;
use freshet_milvus::MilvusConfig;
use freshet_operators::chunk::ChunkerConfig;
use freshet_operators::limits::RecordLimits;

/// Everything the pipeline binary reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub pipeline: PipelineConfig,
    /// Size limits of records and fields (a record over one goes to the DLQ with the limit's
    /// class); checked against what the sinks store by [`crate::limits::check`].
    pub limits: RecordLimits,
    pub kafka: KafkaConfig,
    pub chunking: ChunkerConfig,
    pub embedding: EmbeddingConfig,
    pub milvus: MilvusConfig,
    pub tantivy: TantivyConfig,
    /// The query node's settings (`freshet-query` reads them from the same file); not read here.
    pub query: toml::Table,
    pub metrics: MetricsConfig,
}

/// Workers, batching and limits.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineConfig {
    /// Timely worker threads in this process.
    pub workers: usize,
    /// Multi-process cluster: this process's index and the `host:port` of every process
    /// (empty = single process). Every process runs `workers` threads.
    pub process_index: usize,
    pub cluster_addresses: Vec<String>,
    /// Records a worker takes from Kafka per epoch.
    pub batch_max_records: usize,
    /// How long an idle worker waits for a record before it moves time on. A worker hands
    /// records on as soon as it reads them; this bounds how long an idle worker can hold back
    /// the epochs of the others (and costs a wake-up per interval).
    pub batch_max_wait_ms: u64,
    /// Where the embedding cache lives. Default `$FRESHET_HOME/cache/embeddings.log`.
    pub embedding_cache_path: PathBuf,
    /// How many epochs a worker may read ahead of what is durable in both indexes before it
    /// waits (back-pressure; also bounds the work replayed after a crash).
    pub max_epochs_in_flight: u64,
    /// Seconds to wait for in-flight work on SIGTERM/SIGINT before giving up.
    pub shutdown_timeout_s: u64,
    /// Partitions of the document topic when the pipeline has to create it.
    pub topic_partitions: i32,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            workers: 2,
            process_index: 0,
            cluster_addresses: Vec::new(),
            batch_max_records: 512,
            batch_max_wait_ms: 5,
            embedding_cache_path: freshet_embedding::freshet_home()
                .join("cache")
                .join("embeddings.log"),
            max_epochs_in_flight: 16,
            shutdown_timeout_s: 30,
            topic_partitions: 4,
        }
    }
}

/// The tantivy index the pipeline writes and the query node reads.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TantivyConfig {
    /// Index directory. Default `$FRESHET_HOME/index/tantivy`.
    pub path: PathBuf,
    /// Writer memory budget in bytes (split over the threads, at least 15 MB each).
    pub writer_heap_bytes: usize,
    /// Indexing threads. Each commit writes one segment per thread that received documents,
    /// at a fixed cost per segment; the pipeline commits a few chunks at a time, so one thread
    /// is cheapest (see `ChunkIndexWriter::open_or_create_with_threads`). More help only bulk
    /// loads whose chunks come from the embedding cache.
    pub writer_threads: usize,
}

impl Default for TantivyConfig {
    fn default() -> Self {
        TantivyConfig {
            path: freshet_embedding::freshet_home()
                .join("index")
                .join("tantivy"),
            writer_heap_bytes: 64 * 1024 * 1024,
            writer_threads: 1,
        }
    }
}

/// The Prometheus endpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// `host:port` serving `/metrics`; empty disables it.
    pub listen: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: "127.0.0.1:9464".into(),
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
        let mut table = read_table(path)?;
        apply_env(&mut table, env, &known_keys()?)?;
        let config: Config = toml::Value::Table(table)
            .try_into()
            .context("invalid configuration (file or FRESHET_* environment)")?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<()> {
        let p = &self.pipeline;
        if p.workers == 0 {
            bail!("pipeline.workers must be at least 1");
        }
        if p.max_epochs_in_flight == 0 {
            bail!("pipeline.max_epochs_in_flight must be at least 1");
        }
        if p.batch_max_records == 0 {
            bail!("pipeline.batch_max_records must be at least 1");
        }
        if !p.cluster_addresses.is_empty() && p.process_index >= p.cluster_addresses.len() {
            bail!(
                "pipeline.process_index {} is outside cluster_addresses (len {})",
                p.process_index,
                p.cluster_addresses.len()
            );
        }
        self.chunking
            .validate()
            .map_err(|e| anyhow::anyhow!("chunking: {e}"))?;
        crate::limits::check(&self.limits)
    }
}

/// Settings that default to "unset" and so do not appear in the serialized defaults.
const OPTIONAL_KEYS: &[(&str, &str)] = &[
    ("embedding", "model_id"),
    ("embedding", "ort_dylib_path"),
    ("embedding", "threads"),
    ("milvus", "token"),
];

/// The config file as a table (empty without a file).
pub fn read_table(path: Option<&Path>) -> Result<toml::Table> {
    match path {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read config file {}", p.display()))?;
            text.parse::<toml::Table>()
                .with_context(|| format!("config file {} is not valid TOML", p.display()))
        }
        None => Ok(toml::Table::new()),
    }
}

/// The keys of a config section, read off its serialized defaults.
pub fn keys<T: Serialize>(value: &T) -> Result<BTreeSet<String>> {
    match toml::Value::try_from(value)? {
        toml::Value::Table(t) => Ok(t.keys().cloned().collect()),
        _ => bail!("a config section did not serialize to a table"),
    }
}

/// The keys each section accepts, read off the serialized defaults.
fn known_keys() -> Result<BTreeMap<&'static str, BTreeSet<String>>> {
    let d = Config::default();
    Ok(known_sections([
        ("pipeline", keys(&d.pipeline)?),
        ("limits", keys(&d.limits)?),
        ("kafka", keys(&d.kafka)?),
        ("chunking", keys(&d.chunking)?),
        ("embedding", keys(&d.embedding)?),
        ("milvus", keys(&d.milvus)?),
        ("tantivy", keys(&d.tantivy)?),
        ("metrics", keys(&d.metrics)?),
    ]))
}

/// The keys of each section (from [`keys`] of its defaults) plus the settings that default to
/// unset ([`OPTIONAL_KEYS`]): what [`apply_env`] accepts.
pub fn known_sections<const N: usize>(
    sections: [(&'static str, BTreeSet<String>); N],
) -> BTreeMap<&'static str, BTreeSet<String>> {
    let mut out = BTreeMap::from(sections);
    for (section, key) in OPTIONAL_KEYS {
        if let Some(set) = out.get_mut(section) {
            set.insert(key.to_string());
        }
    }
    out
}

/// Applies `FRESHET_<SECTION>_<KEY>=value` on top of `table` for the keys in `known`.
/// Variables that name no setting (such as the deploy scripts' `FRESHET_KAFKA_PORT`) are left
/// alone. Shared by both binaries, so one environment configures both.
pub fn apply_env(
    table: &mut toml::Table,
    env: &[(String, String)],
    known: &BTreeMap<&'static str, BTreeSet<String>>,
) -> Result<()> {
    for (name, raw) in env {
        let Some(rest) = name.strip_prefix("FRESHET_") else {
            continue;
        };
        let rest = rest.to_ascii_lowercase();
        let Some((section, keys)) = known
            .iter()
            .find(|(s, _)| rest.starts_with(&format!("{s}_")))
        else {
            continue;
        };
        let key = &rest[section.len() + 1..];
        if !keys.contains(key) {
            tracing::debug!(variable = %name, "not a configuration setting; ignored");
            continue;
        }
        let value = parse_env_value(raw);
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let Some(section_table) = entry.as_table_mut() else {
            bail!("config section [{section}] is not a table");
        };
        section_table.insert(key.to_string(), value);
    }
    Ok(())
}

fn parse_env_value(raw: &str) -> toml::Value {
    match format!("v = {raw}").parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_need_no_file() {
        let c = Config::load_with_env(None, &[]).unwrap();
        assert_eq!(c.kafka.brokers, "127.0.0.1:9092");
        assert_eq!(c.kafka.topic, "documents");
        assert_eq!(c.kafka.dlq_topic, "documents.dlq");
        assert_eq!(c.pipeline.workers, 2);
    }

    #[test]
    fn deploy_script_variables_are_not_settings() {
        let c = Config::load_with_env(
            None,
            &env(&[
                ("FRESHET_KAFKA_PORT", "9092"),
                ("FRESHET_MILVUS_IMPL", "lite"),
                ("FRESHET_EMBEDDING_THREADS", "3"),
            ]),
        )
        .unwrap();
        assert_eq!(c.embedding.threads, Some(3));
    }

    #[test]
    fn env_overrides_file() {
        let dir = std::env::temp_dir().join(format!("freshet-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f.toml");
        std::fs::write(
            &file,
            "[kafka]\ntopic = \"from-file\"\nbrokers = \"h:1\"\n[pipeline]\nworkers = 3\n",
        )
        .unwrap();
        let c = Config::load_with_env(
            Some(&file),
            &env(&[
                ("FRESHET_KAFKA_TOPIC", "from-env"),
                ("FRESHET_PIPELINE_BATCH_MAX_RECORDS", "7"),
                ("FRESHET_HOME", "/x"),
            ]),
        )
        .unwrap();
        assert_eq!(c.kafka.topic, "from-env");
        assert_eq!(c.kafka.brokers, "h:1");
        assert_eq!(c.pipeline.workers, 3);
        assert_eq!(c.pipeline.batch_max_records, 7);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_clear_errors() {
        let file = std::env::temp_dir().join(format!("freshet-typo-{}.toml", std::process::id()));
        std::fs::write(&file, "[pipeline]\nworkres = 2\n").unwrap();
        let e = Config::load_with_env(Some(&file), &[]).unwrap_err();
        assert!(format!("{e:#}").contains("workres"), "{e:#}");
        let e =
            Config::load_with_env(None, &env(&[("FRESHET_PIPELINE_WORKERS", "0")])).unwrap_err();
        assert!(format!("{e:#}").contains("workers"), "{e:#}");
        let e =
            Config::load_with_env(None, &env(&[("FRESHET_PIPELINE_WORKERS", "many")])).unwrap_err();
        assert!(
            format!("{e:#}").contains("workers") || format!("{e:#}").contains("invalid"),
            "{e:#}"
        );
    }

    #[test]
    fn the_documented_file_parses_and_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/freshet.toml");
        let c = Config::load_with_env(Some(&path), &[]).unwrap();
        let d = Config::default();
        assert_eq!(c.pipeline.workers, d.pipeline.workers);
        assert_eq!(c.pipeline.batch_max_records, d.pipeline.batch_max_records);
        assert_eq!(
            c.pipeline.max_epochs_in_flight,
            d.pipeline.max_epochs_in_flight
        );
        assert_eq!(c.limits, d.limits);
        assert_eq!(c.chunking, d.chunking);
        assert_eq!(c.embedding, d.embedding);
        assert_eq!(c.kafka.brokers, d.kafka.brokers);
        assert_eq!(c.milvus.url, d.milvus.url);
        assert_eq!(c.milvus.timeout, d.milvus.timeout);
        assert_eq!(c.tantivy.writer_heap_bytes, d.tantivy.writer_heap_bytes);
        assert_eq!(c.tantivy.writer_threads, d.tantivy.writer_threads);
        assert_eq!(c.metrics.listen, d.metrics.listen);
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let e =
            Config::load_with_env(Some(Path::new("/nonexistent/freshet.toml")), &[]).unwrap_err();
        assert!(format!("{e:#}").contains("/nonexistent/freshet.toml"));
    }
}
