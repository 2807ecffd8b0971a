//! What `freshet-tools` reads from the stack's configuration file (the services' file and
//! `FRESHET_<SECTION>_<KEY>` variables): the sections of the systems it talks to, and from the
//! pipeline's own sections only where the pipeline keeps its state (the embedding cache, the
//! topics it reads and how it creates them). The two commands that run the pipeline in process
//! (`bench-ingest`, `bench-load`) hand it the pipeline's full configuration instead.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use freshet_config::Sections;
use freshet_embedding::EmbeddingConfig;
use freshet_kafka::KafkaConfig;
use freshet_milvus::MilvusConfig;
use freshet_operators::chunk::ChunkerConfig;
use freshet_tantivy::TantivyConfig;
use serde::Deserialize;

/// The tools' view of the configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub pipeline: PipelineState,
    pub kafka: KafkaConfig,
    pub chunking: ChunkerConfig,
    pub embedding: EmbeddingConfig,
    pub milvus: MilvusConfig,
    pub tantivy: TantivyConfig,
    /// The topics of `[[sources]]`, each read only for its name.
    pub sources: Vec<SourceTopic>,
}

/// From `[pipeline]`, what says where the pipeline's state is; its other settings (workers,
/// batching, limits) are the pipeline's alone and are not read here.
#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct PipelineState {
    /// The embedding cache the pipeline writes (`bench-replicate` reuses its vectors).
    pub embedding_cache_path: PathBuf,
    /// Partitions of a topic the pipeline creates (the tools create topics the same way).
    pub topic_partitions: i32,
}

impl Default for PipelineState {
    fn default() -> Self {
        // The pipeline's defaults; `defaults_match_the_pipeline` holds them together.
        PipelineState {
            embedding_cache_path: freshet_config::freshet_home()
                .join("cache")
                .join("embeddings.log"),
            topic_partitions: 4,
        }
    }
}

/// A `[[sources]]` entry, by its topic.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct SourceTopic {
    pub topic: String,
}

impl Config {
    /// Reads `path` (if any) and applies the process environment.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        Self::load_with_env(path, &env)
    }

    pub fn load_with_env(path: Option<&Path>, env: &[(String, String)]) -> Result<Config> {
        Ok(freshet_config::load(path, env, &sections())?)
    }

    /// The names of the topics the pipeline reads, in its order: the `[[sources]]`, or
    /// `kafka.topic` without any (the pipeline's `topics` decides the same way, and checks more).
    pub fn topics(&self) -> Result<Vec<String>> {
        if self.sources.is_empty() {
            return Ok(vec![self.kafka.topic.clone()]);
        }
        self.sources
            .iter()
            .map(|s| match s.topic.as_str() {
                "" => bail!("a [[sources]] entry has no topic"),
                t => Ok(t.to_string()),
            })
            .collect()
    }
}

/// The sections the tools read.
pub fn sections() -> Sections {
    Sections::new()
        .with::<PipelineState>("pipeline")
        .with::<KafkaConfig>("kafka")
        .with::<ChunkerConfig>("chunking")
        .with::<EmbeddingConfig>("embedding")
        .with::<MilvusConfig>("milvus")
        .with::<TantivyConfig>("tantivy")
        .whole("sources")
}

#[cfg(test)]
mod tests {
    use super::*;

    use freshet_config::vars as env;

    fn deploy_file() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/freshet.toml")
    }

    #[test]
    fn defaults_match_the_pipeline() {
        let ours = Config::load_with_env(None, &[]).unwrap();
        let theirs = freshet_pipeline::config::Config::load_with_env(None, &[]).unwrap();
        assert_eq!(
            ours.pipeline.embedding_cache_path,
            theirs.pipeline.embedding_cache_path
        );
        assert_eq!(
            ours.pipeline.topic_partitions,
            theirs.pipeline.topic_partitions
        );
        assert_eq!(ours.topics().unwrap(), vec![theirs.kafka.topic]);
    }

    #[test]
    fn reads_the_services_file_as_the_pipeline_does() {
        let vars = env(&[
            ("FRESHET_PIPELINE_TOPIC_PARTITIONS", "7"),
            ("FRESHET_PIPELINE_WORKERS", "3"),
            ("FRESHET_KAFKA_TOPIC", "docs.env"),
            ("FRESHET_MILVUS_COLLECTION", "c_env"),
        ]);
        let file = deploy_file();
        let ours = Config::load_with_env(Some(&file), &vars).unwrap();
        let theirs = freshet_pipeline::config::Config::load_with_env(Some(&file), &vars).unwrap();
        assert_eq!(ours.pipeline.topic_partitions, 7);
        assert_eq!(
            ours.pipeline.topic_partitions,
            theirs.pipeline.topic_partitions
        );
        assert_eq!(ours.kafka.topic, theirs.kafka.topic);
        assert_eq!(ours.milvus.collection, theirs.milvus.collection);
        assert_eq!(ours.tantivy.path, theirs.tantivy.path);
        let names: Vec<String> = theirs
            .topics()
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(ours.topics().unwrap(), names);
    }

    #[test]
    fn topics_follow_the_sources_in_order() {
        let dir = std::env::temp_dir().join(format!("tools-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("freshet.toml");
        std::fs::write(
            &file,
            "[[sources]]\ntopic = \"b\"\n\n[[sources]]\ntopic = \"a\"\nformat = \"debezium\"\n\
             id_fields = [\"id\"]\ntext_fields = [\"body\"]\nnull_acl = \"public\"\n",
        )
        .unwrap();
        let ours = Config::load_with_env(Some(&file), &[]).unwrap();
        let theirs = freshet_pipeline::config::Config::load_with_env(Some(&file), &[]).unwrap();
        let names: Vec<String> = theirs
            .topics()
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(ours.topics().unwrap(), vec!["b", "a"]);
        assert_eq!(ours.topics().unwrap(), names);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unknown_section_still_stops() {
        let dir = std::env::temp_dir().join(format!("tools-config-u-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("freshet.toml");
        std::fs::write(&file, "[milvs]\nurl = \"x\"\n").unwrap();
        let err = Config::load_with_env(Some(&file), &[]).unwrap_err();
        assert!(err.to_string().contains("milvs"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
