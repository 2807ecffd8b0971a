//! `freshet publish`: the file sources of `freshet-sources` (JSONL of envelopes or BEIR lines,
//! or a directory of documents) publishing to the configured document topic.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use freshet_kafka::{admin, DocumentProducer};
use freshet_sources::{publish_dir, publish_jsonl, Mapping};

use crate::config::Config;

pub fn publish(config: &Config, jsonl: Option<PathBuf>, dir: Option<PathBuf>) -> Result<()> {
    let kafka = &config.kafka;
    admin::ensure_topic(kafka, &kafka.topic, config.pipeline.topic_partitions)
        .context("creating the document topic")?;
    let producer = DocumentProducer::new(kafka).context("creating the producer")?;
    let mapping = Mapping::default();
    let report = match (jsonl, dir) {
        (Some(path), None) => publish_jsonl(&path, &producer, &kafka.topic, &mapping)
            .with_context(|| format!("publishing {}", path.display()))?,
        (None, Some(path)) => publish_dir(&path, &producer, &kafka.topic, &mapping)
            .with_context(|| format!("publishing {}", path.display()))?,
        _ => bail!("give exactly one of --jsonl FILE or --dir DIR"),
    };
    for bad in &report.bad {
        eprintln!("skipped: {bad}");
    }
    println!(
        "published {} records ({} upserts, {} deletes) to {}; {} inputs skipped",
        report.published,
        report.upserts,
        report.deletes,
        kafka.topic,
        report.bad.len()
    );
    Ok(())
}
