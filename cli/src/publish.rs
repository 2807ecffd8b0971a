//! `freshet publish`: the file publishers of `freshet-publishers` (JSONL of envelopes or BEIR
//! lines, or a directory of documents) publishing to the configured document topic, with the ACL of
//! the `[[files.acl]]` rules and `--acl` / `--public`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use freshet_kafka::{admin, TopicProducer};
use freshet_publishers::{publish_dir, publish_jsonl, FileAcls, Mapping};

use crate::config::Config;

/// The ACL flags of `freshet publish` and `freshet watch`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct AclArgs {
    /// A principal that may see the documents no `[[files.acl]]` rule matches (repeatable:
    /// `--acl group:eng --acl user:ana`). An envelope that states its own ACL keeps it.
    #[arg(long = "acl", value_name = "PRINCIPAL")]
    pub principals: Vec<String>,
    /// The documents no `[[files.acl]]` rule matches are public, said so (`"acl": "public"`,
    /// which `[limits] require_acl` accepts).
    #[arg(long, conflicts_with = "principals")]
    pub public: bool,
}

/// How files and lines become documents: the `[[files.acl]]` rules, then the flags' ACL;
/// `[files] follow_symlinks_outside_roots`; files read up to `[limits] max_value_bytes`.
/// Warns when `[limits] require_acl` is on and a document may get no ACL (the pipeline refuses
/// such a document as `missing_acl`).
pub fn mapping(config: &Config, acl: &AclArgs) -> Result<Mapping> {
    let default = FileAcls::default_from_flags(&acl.principals, acl.public)?;
    let acls = FileAcls::new(&config.files.acl, default)?;
    if config.pipeline.limits.require_acl && acls.may_leave_unstated() {
        tracing::warn!(
            "[limits] require_acl is on, and documents that no [[files.acl]] rule matches get \
             no ACL (no --acl or --public): the pipeline refuses them as missing_acl"
        );
    }
    Ok(Mapping {
        acl: acls,
        max_file_bytes: config.pipeline.limits.max_value_bytes as u64,
        follow_symlinks_outside_roots: config.files.follow_symlinks_outside_roots,
        ..Mapping::default()
    })
}

pub fn publish(
    config: &Config,
    jsonl: Option<PathBuf>,
    dir: Option<PathBuf>,
    acl: &AclArgs,
) -> Result<()> {
    let kafka = &config.pipeline.kafka;
    let mapping = mapping(config, acl)?;
    admin::ensure_topic(
        kafka,
        &kafka.topic,
        config.pipeline.pipeline.topic_partitions,
    )
    .context("creating the document topic")?;
    let producer = TopicProducer::new(kafka, &kafka.topic).context("creating the producer")?;
    let report = match (jsonl, dir) {
        (Some(path), None) => publish_jsonl(&path, &producer, &mapping)
            .with_context(|| format!("publishing {}", path.display()))?,
        (None, Some(path)) => publish_dir(&path, &producer, &mapping)
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
