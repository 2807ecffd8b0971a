//! Pipeline configuration: one TOML file (every setting optional, see `deploy/freshet.toml`),
//! then `FRESHET_<SECTION>_<KEY>` environment variables on top, layered by `freshet-config`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use freshet_config::{resolve_secret, Secret, Sections};
use serde::{Deserialize, Serialize};

use freshet_embedding::EmbeddingConfig;
use freshet_kafka::KafkaConfig;
use freshet_milvus::MilvusConfig;
use freshet_operators::chunk::ChunkerConfig;
use freshet_operators::limits::RecordLimits;
use freshet_tantivy::TantivyConfig;

use crate::topics::{SourceConfig, Topic};
use freshet_operators::changelog::config::ReplicationConfig;

/// Everything the pipeline reads ([`sections`]; `freshet-config` drops the other binaries'
/// sections and refuses unknown ones).
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
    pub metrics: MetricsConfig,
    /// `[replication]`: the changelog for query replicas (`docs/replicas.md`).
    pub replication: ReplicationConfig,
    /// The topics to read and their record formats (`[[sources]]`, see [`crate::topics`]);
    /// none: `kafka.topic` in freshet's envelope.
    pub sources: Vec<SourceConfig>,
}

/// Workers, batching and limits.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineConfig {
    /// Timely worker threads in this process.
    pub workers: usize,
    /// Copies of a local embedding model the process holds (1 to `workers`); the workers take
    /// turns on them, each copy running on cores ÷ copies threads unless `[embedding] threads`
    /// says otherwise. Every copy holds the model's weights and working memory of its own
    /// (docs/benchmarks.md, "Pipeline memory"). A remote model is one client per worker.
    pub model_copies: usize,
    /// Multi-process cluster: this process's index and the `host:port` of every process
    /// (empty = single process). Every process runs `workers` threads.
    pub process_index: usize,
    pub cluster_addresses: Vec<String>,
    /// Records a worker takes from Kafka per epoch. A backlog becomes durable, and searchable,
    /// an epoch at a time: fewer records per epoch commit sooner, at some throughput.
    pub batch_max_records: usize,
    /// How long an idle worker of a cluster waits for a record before it moves time on. A
    /// worker hands records on as soon as it reads them, and an idle worker moves past them as
    /// soon as another worker of its process has read; this bounds how long it can hold back
    /// the epochs of workers in other processes (and costs a wake-up per interval). In a single
    /// process an idle worker moves on every `max(this, 100 ms)` ([`crate::epochs`]).
    pub batch_max_wait_ms: u64,
    /// Where the embedding cache lives. Default `$FRESHET_HOME/cache/embeddings.log`.
    pub embedding_cache_path: PathBuf,
    /// How many epochs a worker may read ahead of what is durable in both indexes before it
    /// waits (back-pressure; also bounds the work replayed after a crash).
    pub max_epochs_in_flight: u64,
    /// Seconds to wait for in-flight work on SIGTERM/SIGINT before giving up.
    pub shutdown_timeout_s: u64,
    /// How long a write that fails for a reason not about one record (Milvus unreachable or
    /// timing out, a full disk under the index or the embedding cache) is retried before the
    /// pipeline stops; nothing is committed meanwhile (docs/faults.md). 0: stop at the first
    /// such failure.
    pub stall_limit_s: u64,
    /// Share of the Milvus collection the start-up reconcile may delete (rows whose chunks
    /// the tantivy index does not hold), beyond the rows of the last write whose tantivy commit
    /// may be missing; over it the pipeline stops and reports what it would delete (at least one
    /// row is always allowed). `freshet run --allow-reconcile-deletes` lifts it once.
    pub reconcile_max_delete_share: f64,
    /// Partitions of the document topic when the pipeline has to create it.
    pub topic_partitions: i32,
    /// A record being prepared in this many consecutive crashes of the process goes to the
    /// dead-letter topic (`crash_loop`) instead of being prepared again (docs/faults.md,
    /// "Crash loops"). At least 2; 0 never quarantines.
    pub crash_loop_limit: u32,
    /// Warn (log, `/readyz` note, `corpus_uncovered_share`) while more than this share of the
    /// indexed chunks is in languages the embedding model does not declare ([`crate::census`]).
    /// 0 never warns.
    pub uncovered_language_warn_share: f64,
    /// The nice value (0–19) the workers and every thread they start run at, so that queries
    /// on the same machine get a core before ingest does ([`crate::priority`]). 0: the same
    /// priority as everything else.
    pub nice: i32,
    /// The CPU priority the local embedding model computes at ([`EmbeddingPriority`]).
    pub embedding_priority: EmbeddingPriority,
}

/// The CPU priority of the local embedding model's work (`[pipeline] embedding_priority`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingPriority {
    /// On a thread of its own at `SCHED_IDLE`, its ONNX Runtime threads too: whatever else wakes
    /// on its core (a query, Milvus, the broker, the pipeline's own writes), in any process,
    /// preempts it, and within the pipeline it runs only when no other thread wants the core.
    /// Queries beside an ingest kept a lower tail, the ingest alone as fast in two of three runs
    /// (docs/benchmarks.md, "The model at idle CPU priority").
    #[default]
    Idle,
    /// On the workers' threads, at their priority (`nice`).
    Normal,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            workers: 2,
            model_copies: 1,
            process_index: 0,
            cluster_addresses: Vec::new(),
            batch_max_records: 256,
            batch_max_wait_ms: 5,
            embedding_cache_path: freshet_config::freshet_home()
                .join("cache")
                .join("embeddings.log"),
            max_epochs_in_flight: 16,
            shutdown_timeout_s: 30,
            stall_limit_s: 600,
            reconcile_max_delete_share: 0.01,
            topic_partitions: 4,
            crash_loop_limit: 3,
            uncovered_language_warn_share: 0.05,
            nice: 0,
            embedding_priority: EmbeddingPriority::Idle,
        }
    }
}

/// The pipeline's endpoint (`/metrics`, `/healthz`, `/readyz`, `/v1/status`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// `host:port` serving `/metrics`; empty disables it.
    pub listen: String,
    /// The keys `/v1/status` needs (`Authorization: Bearer`); none: it answers on a loopback
    /// `listen` only (403 beyond it).
    pub status_keys: Vec<StatusKey>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: "127.0.0.1:9464".into(),
            status_keys: Vec::new(),
        }
    }
}

/// One key of `[metrics] status_keys`: the secret itself, or a table naming it (for logs) with
/// the secret inline, in a file or in an environment variable (exactly one of the three).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StatusKey {
    Inline(Secret),
    Table(StatusKeyTable),
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatusKeyTable {
    pub name: String,
    pub key: Secret,
    pub key_file: PathBuf,
    pub key_env: String,
}

impl MetricsConfig {
    /// The status keys, read (files, environment variables `env` looks up), each with its name
    /// (`status_keys[i]` when it has none). An error names the key that cannot be read, or a
    /// key given twice.
    pub fn status_keys(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<(String, Secret)>> {
        let mut out: Vec<(String, Secret)> = Vec::new();
        for (i, k) in self.status_keys.iter().enumerate() {
            let what = format!("metrics.status_keys[{i}]");
            let (name, secret) = match k {
                StatusKey::Inline(s) => {
                    let s = resolve_secret(&what, s, Path::new(""), "", env)?;
                    (what.clone(), s)
                }
                StatusKey::Table(t) => {
                    let s = resolve_secret(&what, &t.key, &t.key_file, &t.key_env, env)?;
                    let name = if t.name.is_empty() {
                        what.clone()
                    } else {
                        t.name.clone()
                    };
                    (name, s)
                }
            };
            let Some(secret) = secret else {
                bail!("{what}: no key (give key, key_file or key_env)");
            };
            if out.iter().any(|(_, s)| s == &secret) {
                bail!("{what}: the same key appears twice in metrics.status_keys");
            }
            out.push((name, secret));
        }
        Ok(out)
    }
}

impl Config {
    /// Reads `path` (if any), applies the process environment, validates.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        Self::load_with_env(path, &env)
    }

    pub fn load_with_env(path: Option<&Path>, env: &[(String, String)]) -> Result<Config> {
        let config: Config = freshet_config::load(path, env, &sections())?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<()> {
        let p = &self.pipeline;
        if p.workers == 0 {
            bail!("pipeline.workers must be at least 1");
        }
        if p.model_copies == 0 || p.model_copies > p.workers {
            bail!(
                "pipeline.model_copies must be between 1 and pipeline.workers ({}), got {}: \
                 a copy no worker uses only takes memory",
                p.workers,
                p.model_copies
            );
        }
        if p.max_epochs_in_flight == 0 {
            bail!("pipeline.max_epochs_in_flight must be at least 1");
        }
        if !(0.0..=1.0).contains(&p.reconcile_max_delete_share) {
            bail!(
                "pipeline.reconcile_max_delete_share must be between 0 and 1, got {}",
                p.reconcile_max_delete_share
            );
        }
        if !(0.0..=1.0).contains(&p.uncovered_language_warn_share) {
            bail!(
                "pipeline.uncovered_language_warn_share must be between 0 and 1, got {}",
                p.uncovered_language_warn_share
            );
        }
        if !(0..=19).contains(&p.nice) {
            bail!(
                "pipeline.nice must be between 0 (no change) and 19 (lowest priority), got {}",
                p.nice
            );
        }
        if p.batch_max_records == 0 {
            bail!("pipeline.batch_max_records must be at least 1");
        }
        if p.crash_loop_limit == 1 {
            bail!(
                "pipeline.crash_loop_limit must be at least 2 (a first crash can find records \
                 of other workers in flight beside the one at fault), or 0 to never quarantine"
            );
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
        self.milvus.validate()?;
        self.topics()?;
        self.replication
            .validate()
            .map_err(|e| anyhow::anyhow!(e))?;
        if self.replication.enabled() {
            let t = &self.replication.changelog_topic;
            if self.topics()?.iter().any(|s| &s.name == t) || *t == self.kafka.dlq_topic {
                bail!("replication.changelog_topic {t:?} is a topic the pipeline reads or its dead-letter topic");
            }
        }
        crate::limits::check(&self.limits)
    }

    /// The topics to read, each with its record format ([`crate::topics::topics`]).
    pub fn topics(&self) -> Result<Vec<Topic>> {
        crate::topics::topics(
            &self.sources,
            &self.kafka.topic,
            &self.kafka.dlq_topic,
            self.limits.require_acl,
        )
    }
}

/// The sections the pipeline reads, each with the struct that reads it.
pub fn sections() -> Sections {
    Sections::new()
        .with::<PipelineConfig>("pipeline")
        .with::<RecordLimits>("limits")
        .with::<KafkaConfig>("kafka")
        .with::<ChunkerConfig>("chunking")
        .with::<EmbeddingConfig>("embedding")
        .with::<MilvusConfig>("milvus")
        .with::<TantivyConfig>("tantivy")
        .with::<MetricsConfig>("metrics")
        .with::<ReplicationConfig>("replication")
        .whole("sources")
}

#[cfg(test)]
mod tests {
    use super::*;

    use freshet_config::vars as env;

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

    /// Settings that default to unset are settable from the environment too.
    #[test]
    fn optional_settings_are_settings() {
        let c = Config::load_with_env(
            None,
            &env(&[
                ("FRESHET_EMBEDDING_MAX_LENGTH", "128"),
                ("FRESHET_EMBEDDING_PASSAGE_PREFIX", "passage: "),
                ("FRESHET_MILVUS_TOKEN", "milvus-s3cret"),
            ]),
        )
        .unwrap();
        assert_eq!(c.embedding.max_length, Some(128));
        assert_eq!(c.embedding.passage_prefix.as_deref(), Some("passage: "));
        assert_eq!(
            c.milvus.token.as_ref().map(|t| t.expose()),
            Some("milvus-s3cret")
        );
        assert!(
            !format!("{c:?}").contains("milvus-s3cret"),
            "the token is redacted"
        );
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
                ("FRESHET_PIPELINE_EMBEDDING_PRIORITY", "normal"),
                ("FRESHET_HOME", "/x"),
            ]),
        )
        .unwrap();
        assert_eq!(c.pipeline.embedding_priority, EmbeddingPriority::Normal);
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
        // a model copy no worker uses
        for bad in ["0", "3"] {
            let e = Config::load_with_env(None, &env(&[("FRESHET_PIPELINE_MODEL_COPIES", bad)]))
                .unwrap_err();
            assert!(format!("{e:#}").contains("model_copies"), "{e:#}");
        }
        let c =
            Config::load_with_env(None, &env(&[("FRESHET_PIPELINE_MODEL_COPIES", "2")])).unwrap();
        assert_eq!(c.pipeline.model_copies, 2);
        // one crash can blame an innocent record beside the one at fault
        let e = Config::load_with_env(None, &env(&[("FRESHET_PIPELINE_CRASH_LOOP_LIMIT", "1")]))
            .unwrap_err();
        assert!(format!("{e:#}").contains("at least 2"), "{e:#}");
        for ok in ["0", "2", "5"] {
            Config::load_with_env(None, &env(&[("FRESHET_PIPELINE_CRASH_LOOP_LIMIT", ok)]))
                .unwrap();
        }
    }

    #[test]
    fn milvus_index_settings_are_checked_at_load() {
        let c =
            Config::load_with_env(None, &env(&[("FRESHET_MILVUS_INDEX_TYPE", "flat")])).unwrap();
        assert_eq!(c.milvus.index_type, freshet_milvus::IndexType::Flat);
        let e =
            Config::load_with_env(None, &env(&[("FRESHET_MILVUS_HNSW_M", "4096")])).unwrap_err();
        assert!(
            format!("{e:#}").contains("[milvus] setting: hnsw_m"),
            "{e:#}"
        );
        let e = Config::load_with_env(None, &env(&[("FRESHET_MILVUS_INDEX_TYPE", "diskann")]))
            .unwrap_err();
        assert!(format!("{e:#}").contains("ivf_sq8"), "{e:#}");
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
        assert_eq!(c.pipeline.embedding_priority, d.pipeline.embedding_priority);
        assert_eq!(c.limits, d.limits);
        assert_eq!(c.chunking, d.chunking);
        assert_eq!(c.embedding, d.embedding);
        assert_eq!(c.kafka.brokers, d.kafka.brokers);
        assert_eq!(c.milvus.url, d.milvus.url);
        assert_eq!(c.milvus.timeout, d.milvus.timeout);
        assert_eq!(
            (c.milvus.index_type, c.milvus.hnsw_m),
            (d.milvus.index_type, d.milvus.hnsw_m)
        );
        assert_eq!(
            (c.milvus.hnsw_ef_construction, c.milvus.ivf_nlist),
            (d.milvus.hnsw_ef_construction, d.milvus.ivf_nlist)
        );
        assert_eq!(c.tantivy.writer_heap_bytes, d.tantivy.writer_heap_bytes);
        assert_eq!(c.tantivy.writer_threads, d.tantivy.writer_threads);
        assert_eq!(c.metrics.listen, d.metrics.listen);
    }

    /// Every `[embedding]` setting is in the documented file, set or commented out.
    #[test]
    fn the_documented_file_names_every_embedding_setting() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/freshet.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let section: Vec<&str> = text
            .lines()
            .skip_while(|l| l.trim() != "[embedding]")
            .skip(1)
            .take_while(|l| !l.starts_with('['))
            .collect();
        let sections = freshet_config::Sections::new().with::<EmbeddingConfig>("embedding");
        for name in sections.settings("embedding").unwrap() {
            assert!(
                section.iter().any(|l| l
                    .trim_start_matches(['#', ' '])
                    .starts_with(&format!("{name} ="))),
                "[embedding] {name} is not in deploy/freshet.toml"
            );
        }
    }

    #[test]
    fn status_keys_are_read_inline_from_files_and_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("console");
        std::fs::write(&file, "from-file\n").unwrap();
        let toml = format!(
            "[metrics]\nstatus_keys = [\"inline\", {{ name = \"console\", key_file = {:?} }}, \
             {{ key_env = \"STATUS_KEY\" }}]\n",
            file.display().to_string()
        );
        let path = dir.path().join("f.toml");
        std::fs::write(&path, &toml).unwrap();
        let c = Config::load_with_env(Some(&path), &[]).unwrap();
        let lookup = |n: &str| (n == "STATUS_KEY").then(|| "from-env".to_string());
        let keys = c.metrics.status_keys(&lookup).unwrap();
        let got: Vec<(&str, &str)> = keys.iter().map(|(n, s)| (n.as_str(), s.expose())).collect();
        assert_eq!(
            got,
            vec![
                ("metrics.status_keys[0]", "inline"),
                ("console", "from-file"),
                ("metrics.status_keys[2]", "from-env"),
            ]
        );
        assert!(!format!("{c:?}").contains("inline"), "redacted");
        let e = c.metrics.status_keys(&|_| None).unwrap_err();
        assert!(format!("{e:#}").contains("STATUS_KEY"), "{e:#}");
        let twice = |v: &str| {
            let c =
                Config::load_with_env(None, &env(&[("FRESHET_METRICS_STATUS_KEYS", v)])).unwrap();
            c.metrics
                .status_keys(&|_| None)
                .map_err(|e| format!("{e:#}"))
        };
        assert!(twice(r#"["a", "a"]"#).unwrap_err().contains("twice"));
        assert!(twice(r#"[""]"#).unwrap_err().contains("no key"));
        assert_eq!(twice(r#"["a", "b"]"#).unwrap().len(), 2);
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let e =
            Config::load_with_env(Some(Path::new("/nonexistent/freshet.toml")), &[]).unwrap_err();
        assert!(format!("{e:#}").contains("/nonexistent/freshet.toml"));
    }
}
