//! The topics the pipeline reads: the `[[sources]]` entries of the configuration (each topic with
//! its record format and, for Debezium, the mapping of its rows to documents; `docs/cdc.md`), the
//! default of one topic of freshet's envelope (`kafka.topic`) when there are none, and which
//! worker reads which partition of which topic.
//!
//! Documents of different topics must have different ids (a Debezium source's `id_prefix` is
//! there for that): each document's records are read in order only within one partition.

use std::collections::BTreeSet;

use anyhow::{anyhow, bail, Result};
use freshet_operators::cdc::{DebeziumMapping, NullAcl, RecordFormat};
use freshet_operators::document::ContentType;
use serde::{Deserialize, Serialize};

/// How a source topic's records are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceFormat {
    /// freshet's document envelope (`core/src/envelope.rs`).
    #[default]
    Freshet,
    /// Debezium change events of one table (Kafka Connect's JSON converter).
    Debezium,
}

/// One `[[sources]]` entry: a topic and how its records become documents. The mapping
/// settings apply to format `debezium` only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourceConfig {
    pub topic: String,
    pub format: SourceFormat,
    /// Columns whose values make the document id (the table's primary key).
    pub id_fields: Vec<String>,
    /// Put in front of every id of this source.
    pub id_prefix: String,
    pub title_field: Option<String>,
    /// Columns joined, in order and separated by a blank line, into the document's text.
    pub text_fields: Vec<String>,
    /// The documents' content type (default `text/plain`).
    pub content_type: Option<String>,
    /// Columns copied into the document's metadata.
    pub metadata_fields: Vec<String>,
    /// Column of ACL principals: an array of strings or one comma-separated string.
    pub acl_field: Option<String>,
    /// What a row whose ACL column is null or names no principal gets: `"refuse"` (to the
    /// dead-letter topic as `missing_acl`; the default with `acl_field`) or `"public"` (also
    /// every row of a source without `acl_field`).
    pub null_acl: Option<String>,
    /// Column holding the document's `source` (default: `debezium://<db>/<schema>.<table>`).
    pub source_field: Option<String>,
}

impl SourceConfig {
    /// The record format this entry describes, checked.
    pub fn record_format(&self) -> Result<RecordFormat> {
        match self.format {
            SourceFormat::Freshet => {
                if *self
                    != (SourceConfig {
                        topic: self.topic.clone(),
                        ..SourceConfig::default()
                    })
                {
                    bail!(
                        "source {:?}: the mapping settings apply to format \"debezium\" only",
                        self.topic
                    );
                }
                Ok(RecordFormat::Freshet)
            }
            SourceFormat::Debezium => {
                let content_type = match &self.content_type {
                    None => ContentType::default(),
                    Some(s) => ContentType::parse(s).ok_or_else(|| {
                        anyhow!("source {:?}: unknown content_type {s:?}", self.topic)
                    })?,
                };
                let null_acl = match &self.null_acl {
                    None => None,
                    Some(s) => Some(NullAcl::parse(s).ok_or_else(|| {
                        anyhow!(
                            "source {:?}: null_acl {s:?} is neither \"refuse\" nor \"public\"",
                            self.topic
                        )
                    })?),
                };
                let mapping = DebeziumMapping {
                    id_fields: self.id_fields.clone(),
                    id_prefix: self.id_prefix.clone(),
                    title_field: self.title_field.clone(),
                    text_fields: self.text_fields.clone(),
                    content_type,
                    metadata_fields: self.metadata_fields.clone(),
                    acl_field: self.acl_field.clone(),
                    null_acl,
                    source_field: self.source_field.clone(),
                };
                mapping
                    .validate()
                    .map_err(|e| anyhow!("source {:?}: {e}", self.topic))?;
                Ok(RecordFormat::Debezium(mapping))
            }
        }
    }
}

/// A topic the pipeline reads, with its record format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topic {
    pub name: String,
    pub format: RecordFormat,
}

/// The topics to read, in configuration order (a topic's place in it is its index in offsets
/// and record references): the `[[sources]]`, or `default_topic` of freshet's envelope when
/// there are none. `Err` for an empty or repeated topic, the dead-letter topic, a mapping that
/// cannot make documents, or (with `require_acl`) one whose rows could never state an ACL.
pub fn topics(
    sources: &[SourceConfig],
    default_topic: &str,
    dlq_topic: &str,
    require_acl: bool,
) -> Result<Vec<Topic>> {
    if sources.is_empty() {
        return Ok(vec![Topic {
            name: default_topic.to_string(),
            format: RecordFormat::Freshet,
        }]);
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(sources.len());
    for s in sources {
        if s.topic.is_empty() {
            bail!("a [[sources]] entry has no topic");
        }
        if s.topic == dlq_topic {
            bail!("source {:?} is the dead-letter topic", s.topic);
        }
        if !seen.insert(s.topic.as_str()) {
            bail!("source {:?} is configured twice", s.topic);
        }
        let format = s.record_format()?;
        if let RecordFormat::Debezium(m) = &format {
            if require_acl && m.acl_field.is_none() && m.null_acl != Some(NullAcl::Public) {
                bail!(
                    "source {:?} maps no acl_field while [limits] require_acl is on: every row \
                     would go to the dead-letter topic; map the ACL column with acl_field, or set \
                     null_acl = \"public\" if the table is public",
                    s.topic
                );
            }
        }
        out.push(Topic {
            name: s.topic.clone(),
            format,
        });
    }
    Ok(out)
}

/// The partitions of each topic that worker `worker` of `workers` reads: the topics' partitions
/// taken in order (topic by topic, partitions ascending) and dealt out in turn, so that every
/// worker gets its share of every topic's load. With one topic, worker `w` reads the
/// partitions `p` with `p % workers == w`.
pub fn assign(partitions: &[Vec<i32>], worker: usize, workers: usize) -> Vec<Vec<i32>> {
    let workers = workers.max(1);
    let mut turn = 0usize;
    partitions
        .iter()
        .map(|ps| {
            let mut sorted = ps.clone();
            sorted.sort_unstable();
            sorted.dedup();
            let base = turn;
            turn += sorted.len();
            sorted
                .into_iter()
                .enumerate()
                .filter(|(i, _)| (base + i) % workers == worker)
                .map(|(_, p)| p)
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn debezium(topic: &str) -> SourceConfig {
        SourceConfig {
            topic: topic.into(),
            format: SourceFormat::Debezium,
            id_fields: vec!["id".into()],
            text_fields: vec!["body".into()],
            ..SourceConfig::default()
        }
    }

    #[test]
    fn no_sources_is_the_document_topic() {
        let t = topics(&[], "documents", "documents.dlq", false).unwrap();
        assert_eq!(
            t,
            vec![Topic {
                name: "documents".into(),
                format: RecordFormat::Freshet
            }]
        );
    }

    #[test]
    fn sources_are_checked() {
        let plain = SourceConfig {
            topic: "docs".into(),
            ..SourceConfig::default()
        };
        let t = topics(&[plain.clone(), debezium("pg.public.t")], "x", "dlq", false).unwrap();
        assert_eq!(t.len(), 2);
        assert!(matches!(&t[1].format, RecordFormat::Debezium(m) if m.id_fields == ["id"]));
        let err = |s: &[SourceConfig]| format!("{:#}", topics(s, "x", "dlq", false).unwrap_err());
        assert!(err(&[plain.clone(), plain.clone()]).contains("twice"));
        assert!(err(&[debezium("dlq")]).contains("dead-letter"));
        assert!(err(&[debezium("")]).contains("no topic"));
        let mapped_freshet = SourceConfig {
            id_fields: vec!["id".into()],
            ..plain
        };
        assert!(err(&[mapped_freshet]).contains("debezium"));
        let no_ids = SourceConfig {
            id_fields: vec![],
            ..debezium("t")
        };
        assert!(err(&[no_ids]).contains("id_fields"));
        let bad_type = SourceConfig {
            content_type: Some("image/png".into()),
            ..debezium("t")
        };
        assert!(err(&[bad_type]).contains("content_type"));
        let md = SourceConfig {
            content_type: Some("text/markdown".into()),
            ..debezium("t")
        };
        let t = topics(&[md], "x", "dlq", false).unwrap();
        assert!(
            matches!(&t[0].format, RecordFormat::Debezium(m) if m.content_type == ContentType::Markdown)
        );
    }

    /// `null_acl` is read and checked; with `require_acl`, a source whose rows could never
    /// state an ACL stops the pipeline at start instead of dead-lettering every row.
    #[test]
    fn null_acl_and_require_acl() {
        let with = |acl_field: Option<&str>, null_acl: Option<&str>| SourceConfig {
            acl_field: acl_field.map(str::to_owned),
            null_acl: null_acl.map(str::to_owned),
            ..debezium("t")
        };
        let mapped = |s: SourceConfig, require: bool| -> Result<DebeziumMapping> {
            match topics(&[s], "x", "dlq", require)?.remove(0).format {
                RecordFormat::Debezium(m) => Ok(m),
                RecordFormat::Freshet => bail!("not debezium"),
            }
        };
        let m = mapped(with(Some("acl"), Some("public")), true).unwrap();
        assert_eq!(m.null_acl, Some(NullAcl::Public));
        let m = mapped(with(Some("acl"), None), true).unwrap();
        assert_eq!(m.null_acl, None);
        let e = mapped(with(Some("acl"), Some("allow")), false).unwrap_err();
        assert!(format!("{e:#}").contains("null_acl"), "{e:#}");
        let e = mapped(with(None, Some("refuse")), false).unwrap_err();
        assert!(format!("{e:#}").contains("acl_field"), "{e:#}");
        assert!(mapped(with(None, None), false).is_ok());
        let e = mapped(with(None, None), true).unwrap_err();
        assert!(format!("{e:#}").contains("require_acl"), "{e:#}");
        assert!(mapped(with(None, Some("public")), true).is_ok());
    }

    #[test]
    fn every_partition_has_one_worker_and_one_topic_is_as_before() {
        let parts = vec![vec![0, 1, 2, 3], vec![0], vec![1, 0]];
        for workers in 1..=5 {
            let mut seen = Vec::new();
            for w in 0..workers {
                for (t, ps) in assign(&parts, w, workers).into_iter().enumerate() {
                    seen.extend(ps.into_iter().map(|p| (t, p)));
                }
            }
            seen.sort();
            assert_eq!(
                seen,
                vec![(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (2, 0), (2, 1)]
            );
            let one = vec![vec![0, 1, 2, 3, 4, 5]];
            for w in 0..workers {
                assert_eq!(
                    assign(&one, w, workers)[0],
                    freshet_kafka::partitions_for_worker(&one[0], w, workers)
                );
            }
        }
        // the second topic's only partition goes to the worker after the first topic's last
        assert_eq!(assign(&parts, 0, 2), vec![vec![0, 2], vec![0], vec![1]]);
    }
}

#[cfg(test)]
mod config_tests {
    use std::path::Path;

    use crate::config::Config;

    use super::*;

    #[test]
    fn sources_are_read_from_the_file() {
        let file =
            std::env::temp_dir().join(format!("freshet-sources-{}.toml", std::process::id()));
        std::fs::write(
            &file,
            r#"
[kafka]
topic = "ignored-when-sources-are-given"

[[sources]]
topic = "documents"

[[sources]]
topic = "pg.public.articles"
format = "debezium"
id_fields = ["id"]
id_prefix = "articles:"
title_field = "title"
text_fields = ["summary", "body"]
content_type = "text/markdown"
metadata_fields = ["lang"]
acl_field = "acl"
"#,
        )
        .unwrap();
        let c = Config::load_with_env(Some(&file), &[]).unwrap();
        let t = c.topics().unwrap();
        assert_eq!(t[0].name, "documents");
        assert_eq!(t[1].name, "pg.public.articles");
        let RecordFormat::Debezium(m) = &t[1].format else {
            panic!("a debezium source")
        };
        assert_eq!(m.text_fields, ["summary", "body"]);
        assert_eq!(m.id_prefix, "articles:");
        std::fs::write(&file, "[[sources]]\ntopic = \"t\"\nformat = \"avro\"\n").unwrap();
        assert!(Config::load_with_env(Some(&file), &[]).is_err());
        std::fs::write(&file, "[[sources]]\ntopic = \"t\"\nid_field = [\"id\"]\n").unwrap();
        let e = Config::load_with_env(Some(&file), &[]).unwrap_err();
        assert!(format!("{e:#}").contains("id_field"), "{e:#}");
        // the documented file has none, so the pipeline reads kafka.topic as before
        let documented = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/freshet.toml");
        let c = Config::load_with_env(Some(&documented), &[]).unwrap();
        assert_eq!(c.topics().unwrap()[0].name, c.kafka.topic);
        assert_eq!(c.topics().unwrap().len(), 1);
    }
}
