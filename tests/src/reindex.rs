//! Index generations in integration tests (docs/reindex.md): a shadow pipeline of a case,
//! reading the case's topics into its own tantivy index and Milvus collection under its own
//! consumer group, and the serving pointer a query node follows.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use freshet_kafka::DocumentProducer;
use freshet_tantivy::ChunkIndexReader;

use crate::{free_port, freshet_bin, Case};

impl Case {
    /// A second generation of this case: the same topics (and dead-letter topic), its own
    /// consumer group, tantivy index (`<dir>/<suffix>/tantivy`), collection and metrics port.
    /// Its pipeline starts from the beginning of the topics (`--new-index`) with
    /// `settings` (its chunking, say), beginning with a copy of this case's embedding cache
    /// (a pipeline holds its cache file locked; the copy is what a shadow re-uses).
    pub fn shadow(&self, suffix: &str, settings: &[(&str, &str)]) -> Result<Case> {
        let dir = self.dir.join(suffix);
        std::fs::create_dir_all(&dir)?;
        let cache = self.dir.join("cache.log");
        if cache.exists() {
            std::fs::copy(&cache, dir.join("cache.log")).context("copying the embedding cache")?;
        }
        let mut kafka = self.kafka.clone();
        kafka.group_id = format!("{}-{suffix}", self.kafka.group_id);
        let mut extra_env = self.extra_env.clone();
        extra_env.extend(settings.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Ok(Case {
            name: format!("{}-{suffix}", self.name),
            tantivy: dir.join("tantivy"),
            dir,
            producer: DocumentProducer::new(&kafka)?,
            kafka,
            collection: format!("{}_{suffix}", self.collection),
            milvus_url: self.milvus_url.clone(),
            partitions: self.partitions,
            metrics_port: free_port(),
            produced: self.produced.clone(),
            produced_elsewhere: self.produced_elsewhere.clone(),
            pipeline: None,
            peers: Vec::new(),
            extra_env,
            run_args: vec!["--new-index".into()],
            address_space_limit: None,
            keep: false,
        })
    }

    /// Takes the offsets `other` produced (the records a generation of the same topics must
    /// hold before [`Case::wait_indexed`] returns).
    pub fn produced_as(&mut self, other: &Case) {
        self.produced.clone_from(&other.produced);
        self.produced_elsewhere
            .clone_from(&other.produced_elsewhere);
    }

    /// This case as a generation of a serving pointer: its index, its collection and the index
    /// id of its last commit.
    pub fn generation(&self, name: &str) -> Result<freshet_config::serving::Generation> {
        let payload = ChunkIndexReader::open(self.tantivy_path())?
            .last_payload()?
            .context("the index has no commit yet")?;
        Ok(freshet_config::serving::Generation {
            name: name.to_string(),
            tantivy_path: self.tantivy_path(),
            milvus_collection: self.collection.clone(),
            index_id: payload.index_id.unwrap_or_default(),
            embedding: None,
        })
    }

    /// The directory of the case (where its shadows and pointer files live).
    pub fn dir(&self) -> PathBuf {
        self.dir.clone()
    }
}

/// What a `freshet reindex` command did.
pub struct Outcome {
    pub success: bool,
    /// Its standard output and error together.
    pub output: String,
}

impl Case {
    /// Runs `freshet reindex <args>` with this case's configuration (its topics, index,
    /// collection and the settings its pipeline runs with: the generation it builds),
    /// `pointer` and `alias` as `[reindex]`.
    pub fn reindex(&self, args: &[&str], pointer: &Path, alias: &str) -> Result<Outcome> {
        let out = Command::new(freshet_bin())
            .arg("reindex")
            .args(args)
            .envs(self.extra_env.iter().map(|(k, v)| (k, v)))
            .env("FRESHET_KAFKA_BROKERS", &self.kafka.brokers)
            .env("FRESHET_KAFKA_TOPIC", &self.kafka.topic)
            .env("FRESHET_KAFKA_DLQ_TOPIC", &self.kafka.dlq_topic)
            .env("FRESHET_KAFKA_GROUP_ID", &self.kafka.group_id)
            .env("FRESHET_MILVUS_URL", &self.milvus_url)
            .env("FRESHET_MILVUS_COLLECTION", &self.collection)
            .env("FRESHET_TANTIVY_PATH", self.tantivy_path())
            .env("FRESHET_REINDEX_POINTER", pointer)
            .env("FRESHET_REINDEX_ALIAS", alias)
            .env("FRESHET_LOG", "warn")
            .output()
            .with_context(|| format!("running {}", freshet_bin().display()))?;
        Ok(Outcome {
            success: out.status.success(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        })
    }

    /// The collection the Milvus alias `alias` names (`None`: no such alias).
    pub fn alias_target(&self, alias: &str) -> Result<Option<String>> {
        let alias = alias.to_string();
        self.with_milvus(|m| async move { m.alias_target(&alias).await })
    }
}

impl Case {
    /// Drops the Milvus alias `alias` (a collection with an alias cannot be dropped).
    pub fn drop_alias(&self, alias: &str) -> Result<()> {
        let alias = alias.to_string();
        self.with_milvus(|m| async move { m.drop_alias(&alias).await })
    }
}

impl Case {
    /// Runs `freshet-tools gate` with this case's configuration (the topics the nodes must
    /// have caught up with): `candidate` (and `serving`) are query node addresses, `args` the
    /// rest (`--dataset`, `--canary`, `--out`, ...).
    pub fn gate(&self, candidate: &str, serving: Option<&str>, args: &[&str]) -> Result<Outcome> {
        let tools = freshet_bin().with_file_name("freshet-tools");
        let mut cmd = Command::new(&tools);
        cmd.arg("gate")
            .arg("--candidate")
            .arg(format!("http://{candidate}"))
            .args(args)
            .env("FRESHET_KAFKA_BROKERS", &self.kafka.brokers)
            .env("FRESHET_KAFKA_TOPIC", &self.kafka.topic)
            .env("FRESHET_KAFKA_DLQ_TOPIC", &self.kafka.dlq_topic)
            .env("FRESHET_LOG", "warn");
        if let Some(s) = serving {
            cmd.arg("--serving").arg(format!("http://{s}"));
        }
        let out = cmd
            .output()
            .with_context(|| format!("running {}", tools.display()))?;
        Ok(Outcome {
            success: out.status.success(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        })
    }
}

impl Case {
    /// Whether the case's collection exists.
    pub fn has_collection(&self) -> Result<bool> {
        self.with_milvus(|m| async move { m.bound_index().await.map(|b| b.is_some()) })
    }
}
