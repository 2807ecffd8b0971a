//! # Publish a document and read it back through the query node
//!
//! The whole path of one document: produced to the document topic, indexed by the pipeline
//! (parsed, chunked, embedded, written to Milvus and tantivy), and found by the query node;
//! then deleted, and gone. It needs the local stack:
//!
//! ```sh
//! deploy/run-local.sh            # broker, Milvus, pipeline, query node (stays up)
//! cargo run -p freshet-examples --example publish_and_retrieve
//! ```
//!
//! It reads the `[kafka]` settings as every freshet binary does (`--config freshet.toml`, then
//! `FRESHET_KAFKA_*` variables; the defaults are the local stack's), and asks the query node at
//! `--query` (default `http://127.0.0.1:8080`; `--api-key` when the node requires one). It
//! exits non-zero if the document is not found, or still found after its delete.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Parser;
use freshet_config::Sections;
use freshet_core::document::{Change, ContentType, Document};
use freshet_core::envelope::encode_stating;
use freshet_kafka::{DocumentRecord, KafkaConfig, Placed, Produce, TopicProducer};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Parser)]
struct Args {
    /// freshet's TOML configuration (its `[kafka]` section is read).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The query node's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    query: String,
    /// An API key of the query node, if it requires one.
    #[arg(long)]
    api_key: Option<String>,
}

/// The settings this example reads: `[kafka]` only.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Settings {
    kafka: KafkaConfig,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let env: Vec<(String, String)> = std::env::vars().collect();
    let sections = Sections::new().with::<KafkaConfig>("kafka");
    let settings: Settings = freshet_config::load(args.config.as_deref(), &env, &sections)?;
    let kafka = settings.kafka;
    let node = Node::new(&args.query, args.api_key.as_deref())?;

    // ## 1. Publish
    //
    // A document is a `Change::Upsert` of the contract (`examples/contract.rs`), encoded as the
    // envelope and produced with the document id as the key. `encode_stating(.., true)` says
    // `"acl": "public"` for a document without principals: visible to every caller, stated on
    // purpose (`[limits] require_acl` refuses a document that says nothing).
    //
    // `Produce` is what every publisher of freshet uses (folder sync, `freshet publish`, the
    // ingest service): it returns where the broker wrote each record.
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let id = format!("examples/freshet-{nonce}");
    let word = format!("freshetexample{nonce}");
    let doc = Document {
        id: id.clone(),
        title: "Spring floods".into(),
        text: format!(
            "# Spring floods\n\nWhen the snow melts in spring, rivers rise quickly. Hydrologists \
             call this sudden rise a freshet ({word}); it can flood the plains downstream."
        ),
        content_type: ContentType::parse("text/markdown").context("text/markdown")?,
        source: "examples/publish_and_retrieve.rs".into(),
        metadata: [("lang".to_string(), "\"en\"".to_string())].into(),
        acl: Vec::new(),
    };
    let producer = TopicProducer::new(&kafka, &kafka.topic)?;
    let envelope = encode_stating(&Change::Upsert(doc), true);
    let placed = produce_one(&producer, DocumentRecord::upsert(id.clone(), envelope))?;
    println!(
        "published {id} to {} partition {} offset {}",
        kafka.topic, placed.partition, placed.offset
    );

    // ## 2. Wait until it is searchable
    //
    // The query node answers `/v1/index/wait` once the commit its searches see has passed this
    // offset: the pipeline has written both indexes (or refused the record to the dead-letter
    // topic). No sleeping and polling the search.
    let waited = node.wait(&kafka.topic, placed)?;
    println!("searchable after {} ms", waited["waited_ms"]);

    // ## 3. Retrieve
    //
    // Hybrid retrieval (BM25 and vectors, fused) by default; each result is a chunk with its
    // document id, text and scores per stage.
    let answer = node.retrieve(&format!("why do rivers rise in spring {word}"))?;
    let results = answer["results"].as_array().context("results")?;
    for r in results {
        println!(
            "  {:<32} fused {:.3}  {}",
            r["doc_id"].as_str().unwrap_or("?"),
            r["scores"]["fused"]["score"].as_f64().unwrap_or(f64::NAN),
            r["text"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(60)
                .collect::<String>()
        );
    }
    if !results.iter().any(|r| r["doc_id"] == id.as_str()) {
        bail!("{id} is not among the results: {answer}");
    }

    // ## 4. Delete
    //
    // A tombstone (the key with a null value) deletes the document from both indexes; once the
    // node has passed its offset, no answer holds it.
    let placed = produce_one(&producer, DocumentRecord::tombstone(id.clone()))?;
    node.wait(&kafka.topic, placed)?;
    let answer = node.retrieve(&word)?;
    let hits = answer["results"].as_array().context("results")?;
    if hits.iter().any(|r| r["doc_id"] == id.as_str()) {
        bail!("{id} is still found after its delete: {answer}");
    }
    println!("deleted {id}: no longer found");
    Ok(())
}

fn produce_one(producer: &dyn Produce, record: DocumentRecord) -> Result<Placed> {
    let placed = producer.produce(std::slice::from_ref(&record))?;
    placed
        .first()
        .copied()
        .context("the producer placed no record")
}

/// The query node's HTTP API (docs/query-api.md).
struct Node {
    base: String,
    api_key: Option<String>,
    http: reqwest::blocking::Client,
}

impl Node {
    fn new(base: &str, api_key: Option<&str>) -> Result<Node> {
        Ok(Node {
            base: base.trim_end_matches('/').to_string(),
            api_key: api_key.map(str::to_string),
            http: reqwest::blocking::Client::builder()
                .timeout(std::time::Duration::from_secs(150))
                .build()?,
        })
    }

    fn send(&self, request: reqwest::blocking::RequestBuilder) -> Result<Value> {
        let request = match &self.api_key {
            Some(key) => request.header("X-API-Key", key),
            None => request,
        };
        let response = request.send()?;
        let status = response.status();
        let body: Value = response.json().context("a JSON answer")?;
        if !status.is_success() {
            bail!("the query node answered {status}: {body}");
        }
        Ok(body)
    }

    fn wait(&self, topic: &str, placed: Placed) -> Result<Value> {
        let url = format!("{}/v1/index/wait", self.base);
        let query = [
            ("topic", topic.to_string()),
            ("partition", placed.partition.to_string()),
            ("offset", placed.offset.to_string()),
            ("timeout_ms", "120000".to_string()),
        ];
        self.send(self.http.get(url).query(&query))
    }

    fn retrieve(&self, query: &str) -> Result<Value> {
        let url = format!("{}/v1/retrieve", self.base);
        self.send(self.http.post(url).json(&json!({"query": query, "k": 5})))
    }
}
