//! `freshet-tools status` and `freshet-tools search`: look at what the pipeline has indexed (both indexes),
//! without the query node. Used by the local quick start and by operators.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use freshet_embedding::EmbeddingModel;
use freshet_kafka::{admin, KafkaConfig, PartitionReader};
use freshet_milvus::MilvusSink;
use freshet_operators::embed::Embedder;
use freshet_tantivy::{ChunkFilter, ChunkIndexReader};

use crate::config::Config;

/// `freshet-tools status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// Wait up to this many seconds until every record on the topic is indexed.
    #[arg(long)]
    wait_secs: Option<u64>,
}

impl crate::Run for StatusArgs {
    fn run(self, config: Option<&Path>) -> Result<i32> {
        let wait = self.wait_secs.map(Duration::from_secs);
        print_status(&Config::load(config)?, wait)?;
        Ok(0)
    }
}

/// `freshet-tools search`.
#[derive(clap::Args)]
pub struct SearchArgs {
    query: String,
    #[arg(long, default_value_t = 3)]
    k: usize,
}

impl crate::Run for SearchArgs {
    fn run(self, config: Option<&Path>) -> Result<i32> {
        search(&Config::load(config)?, &self.query, self.k)?;
        Ok(0)
    }
}

/// Index state against the topics the pipeline reads: what is durable, what is still to do.
pub struct Status {
    /// The tantivy index, or why it cannot be read (none at the path, ...).
    pub tantivy: std::result::Result<Side, String>,
    /// The Milvus collection, or why it cannot be read.
    pub milvus: std::result::Result<Side, String>,
    pub topics: Vec<TopicStatus>,
}

/// What one index holds, and the id that binds it to the other.
pub struct Side {
    pub chunks: u64,
    pub index_id: Option<String>,
    /// Milvus: the vector index and how far its build has come (rows in sealed segments
    /// indexed, pending); `None` for tantivy, or a collection without one.
    pub vector_index: Option<String>,
}

/// One topic's durable offsets (the newest tantivy commit) against its high watermarks.
pub struct TopicStatus {
    pub topic: String,
    pub durable: BTreeMap<i32, i64>,
    pub high: BTreeMap<i32, i64>,
}

impl Status {
    pub fn caught_up(&self) -> bool {
        self.topics.iter().all(|t| covers(&t.durable, &t.high))
    }
}

/// The high watermark of every partition of the document topic (read with a throwaway group
/// named after the pipeline's, with `purpose` appended).
pub fn high_watermarks(kafka: &KafkaConfig, purpose: &str) -> Result<BTreeMap<i32, i64>> {
    high_watermarks_of(kafka, &kafka.topic, purpose)
}

/// [`high_watermarks`] of another topic.
pub fn high_watermarks_of(
    kafka: &KafkaConfig,
    topic: &str,
    purpose: &str,
) -> Result<BTreeMap<i32, i64>> {
    let partitions = admin::partitions(kafka, topic)
        .with_context(|| format!("reading the partitions of {topic}"))?;
    let mut probe_cfg = kafka.clone();
    probe_cfg.group_id = format!("{}-{purpose}", kafka.group_id);
    let reader = PartitionReader::new(&probe_cfg, topic, &partitions, &BTreeMap::new())?;
    Ok(reader.high_watermarks()?)
}

/// True when the durable offsets reach every partition's high watermark.
pub fn covers(durable: &BTreeMap<i32, i64>, high: &BTreeMap<i32, i64>) -> bool {
    high.iter()
        .all(|(p, h)| durable.get(p).copied().unwrap_or(0) >= *h)
}

/// The next offset per partition of `topic` that the newest tantivy commit covers (empty when
/// there is no index or no commit yet).
pub fn durable_offsets(index: &std::path::Path, topic: &str) -> BTreeMap<i32, i64> {
    last_payload(index)
        .and_then(|p| p.offsets.get(topic).cloned())
        .unwrap_or_default()
}

/// The payload of the newest tantivy commit (`None` when there is no index or no commit yet).
pub fn last_payload(index: &std::path::Path) -> Option<freshet_tantivy::CommitPayload> {
    ChunkIndexReader::open(index)
        .ok()
        .and_then(|r| r.last_payload().ok().flatten())
}

/// The status of every topic the configuration names (`[[sources]]`, or `kafka.topic`).
pub fn status(config: &Config) -> Result<Status> {
    config.tantivy.configure_japanese()?;
    let mut topics = Vec::new();
    for t in config.topics()? {
        topics.push(TopicStatus {
            high: high_watermarks_of(&config.kafka, &t, "status")?,
            durable: durable_offsets(&config.tantivy.path, &t),
            topic: t,
        });
    }
    let path = &config.tantivy.path;
    let tantivy = if path.join("meta.json").exists() {
        ChunkIndexReader::open(path)
            .and_then(|r| {
                let index_id = r.last_payload()?.and_then(|p| p.index_id);
                Ok(Side {
                    chunks: r.count(),
                    index_id,
                    vector_index: None,
                })
            })
            .map_err(|e| e.to_string())
    } else {
        Err(format!(
            "no index here (the local stack keeps it at {}; set [tantivy] path or \
             FRESHET_TANTIVY_PATH)",
            freshet_config::run_dir()
                .join("index")
                .join("tantivy")
                .display()
        ))
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let milvus = rt
        .block_on(async {
            let m = MilvusSink::connect(config.milvus.clone()).await?;
            let Some(index_id) = m.bound_index().await? else {
                return Ok(Err("no such collection".to_string()));
            };
            let vector_index = m.describe_vector_index().await?.map(|i| {
                format!(
                    "{} index: {} of {} sealed rows indexed, {} pending{}",
                    i.milvus_type,
                    i.indexed_rows,
                    i.total_rows,
                    i.pending_rows,
                    if i.failure.is_empty() {
                        String::new()
                    } else {
                        format!(", last build failed: {}", i.failure)
                    }
                )
            });
            Ok::<_, freshet_milvus::Error>(Ok(Side {
                chunks: m.count().await?,
                index_id,
                vector_index,
            }))
        })
        .unwrap_or_else(|e| Err(e.to_string()));
    Ok(Status {
        tantivy,
        milvus,
        topics,
    })
}

impl Status {
    /// Why the two indexes are not each other's, if they are not.
    pub fn mismatch(&self) -> Option<String> {
        let (Ok(t), Ok(m)) = (&self.tantivy, &self.milvus) else {
            return None;
        };
        match (&t.index_id, &m.index_id) {
            (Some(a), Some(b)) if a != b => Some(format!(
                "the tantivy index is index {a}, the Milvus collection belongs to index {b}: \
                 they are not each other's (check [tantivy] path and [milvus] collection)"
            )),
            _ => None,
        }
    }
}

fn side(s: &std::result::Result<Side, String>, unit: &str) -> String {
    match s {
        Ok(s) => {
            format!(
                "{} {unit}{}",
                s.chunks,
                s.index_id
                    .as_deref()
                    .map(|id| format!(" (index {id})"))
                    .unwrap_or_default()
            ) + &s
                .vector_index
                .as_deref()
                .map(|v| format!("; {v}"))
                .unwrap_or_default()
        }
        Err(e) => e.clone(),
    }
}

/// Prints the status; with `wait`, first waits until every record on the topics is durable.
pub fn print_status(config: &Config, wait: Option<Duration>) -> Result<()> {
    let deadline = wait.map(|w| Instant::now() + w);
    loop {
        let s = status(config)?;
        let done = s.caught_up();
        if done || deadline.is_none_or(|d| Instant::now() > d) {
            for t in &s.topics {
                println!(
                    "topic {}: durable offsets {:?} of {:?}",
                    t.topic, t.durable, t.high
                );
            }
            println!(
                "tantivy {}: {}",
                config.tantivy.path.display(),
                side(&s.tantivy, "chunks")
            );
            println!(
                "milvus {} / {}: {}",
                config.milvus.url,
                config.milvus.collection,
                side(&s.milvus, "vectors")
            );
            if let Some(why) = s.mismatch() {
                bail!("{why}");
            }
            if wait.is_some() && !done {
                bail!("not caught up within {:?}", wait.unwrap_or_default());
            }
            println!(
                "{}",
                if done {
                    "caught up: every record on the topics is indexed"
                } else {
                    "behind"
                }
            );
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Runs one query through both routes and prints the top hits of each.
pub fn search(config: &Config, query: &str, k: usize) -> Result<()> {
    // The query is analysed as the index was: the same Japanese analysis.
    config.tantivy.configure_japanese()?;
    let reader = ChunkIndexReader::open(&config.tantivy.path)
        .with_context(|| format!("opening {}", config.tantivy.path.display()))?;
    println!("BM25 (tantivy):");
    for (score, c) in reader.search_bm25(query, k, &ChunkFilter::none())? {
        println!(
            "  {score:7.3}  {} [{}#{}]  {}",
            c.title,
            c.doc_id,
            c.index,
            snippet(&c.text)
        );
    }
    let mut model = EmbeddingModel::load(&config.embedding)?;
    let vector = model.embed_query(query)?;
    let mut milvus_cfg = config.milvus.clone();
    milvus_cfg.dim = model.dim();
    milvus_cfg.model_id = model.model_id().to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let hits = rt
        .block_on(async {
            let m = MilvusSink::connect(milvus_cfg).await?;
            m.search(&vector, k, &ChunkFilter::none()).await
        })
        .map_err(|e| anyhow!("vector search: {e}"))?;
    println!("Vector (Milvus):");
    for (id, score) in hits {
        match reader.get(&id)? {
            Some(c) => println!(
                "  {score:7.3}  {} [{}#{}]  {}",
                c.title,
                c.doc_id,
                c.index,
                snippet(&c.text)
            ),
            None => println!("  {score:7.3}  {id} (not in tantivy yet)"),
        }
    }
    Ok(())
}

fn snippet(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut s: String = one_line.chars().take(90).collect();
    if one_line.chars().count() > 90 {
        s.push('…');
    }
    s
}
