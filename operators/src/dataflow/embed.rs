//! The embedding operator: attaches a vector to every leaf-chunk upsert, asking the embedding
//! function (which consults the cache first) once per message batch.

use serde::{Deserialize, Serialize};
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::Stream;

use super::{ChunkDelta, Time};
use crate::chunk::{Chunk, ChunkKind};
use crate::embed::{embed_input, EmbedError};

/// A chunk delta ready for the sinks.
// Most records are upserts: boxing them would cost an allocation per chunk for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SinkRecord {
    /// Write the chunk; `vector` is `Some` for leaf chunks (they go to the vector index too) and
    /// `None` for parents (text index only).
    Upsert {
        chunk: Chunk,
        vector: Option<Vec<f32>>,
    },
    Delete {
        chunk_id: String,
        doc_id: String,
    },
    /// Embedding failed: the sink must not commit this time (the pipeline stops and a restart
    /// replays it).
    Failed {
        error: String,
    },
}

/// Embeds the leaf upserts of each message with `embed`, which receives the texts (see
/// [`embed_input`]) of one batch and returns one vector per text.
pub fn embed_deltas<'s, F>(
    deltas: Stream<'s, Time, Vec<ChunkDelta>>,
    mut embed: F,
) -> Stream<'s, Time, Vec<SinkRecord>>
where
    F: FnMut(&[String]) -> Result<Vec<Vec<f32>>, EmbedError> + 'static,
{
    deltas.unary(Pipeline, "Embed", move |_cap, _info| {
        move |input, output| {
            input.for_each(|cap, data| {
                let deltas: Vec<ChunkDelta> = std::mem::take(data);
                let records = embed_batch(deltas, &mut embed);
                output.session(&cap).give_iterator(records.into_iter());
            });
        }
    })
}

/// The sequential core of [`embed_deltas`].
pub fn embed_batch<F>(deltas: Vec<ChunkDelta>, embed: &mut F) -> Vec<SinkRecord>
where
    F: FnMut(&[String]) -> Result<Vec<Vec<f32>>, EmbedError>,
{
    let texts: Vec<String> = deltas
        .iter()
        .filter_map(|d| match d {
            ChunkDelta::Upsert { chunk, .. } if chunk.kind == ChunkKind::Leaf => {
                Some(embed_input(chunk))
            }
            _ => None,
        })
        .collect();
    let mut vectors = if texts.is_empty() {
        Vec::new()
    } else {
        match embed(&texts) {
            Ok(v) if v.len() == texts.len() => v,
            Ok(v) => {
                return vec![SinkRecord::Failed {
                    error: format!(
                        "embedder returned {} vectors for {} texts",
                        v.len(),
                        texts.len()
                    ),
                }]
            }
            Err(e) => {
                return vec![SinkRecord::Failed {
                    error: e.to_string(),
                }]
            }
        }
    }
    .into_iter();
    deltas
        .into_iter()
        .map(|d| match d {
            ChunkDelta::Upsert { chunk, .. } => {
                let vector = if chunk.kind == ChunkKind::Leaf {
                    vectors.next()
                } else {
                    None
                };
                SinkRecord::Upsert { chunk, vector }
            }
            ChunkDelta::Delete { chunk_id, doc_id } => SinkRecord::Delete { chunk_id, doc_id },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::chunk_id;

    fn chunk(kind: ChunkKind, text: &str) -> Chunk {
        Chunk {
            chunk_id: chunk_id("d", kind, text, 0),
            doc_id: "d".into(),
            kind,
            parent_id: None,
            index: 0,
            char_start: 0,
            char_end: text.chars().count() as u32,
            section: vec!["S".into()],
            text: text.into(),
            token_count: 1,
            title: "T".into(),
            source: String::new(),
            metadata_json: "{}".into(),
            acl: vec![],
            doc_hash: String::new(),
        }
    }

    #[test]
    fn only_leaf_upserts_are_embedded_in_one_call() {
        let deltas = vec![
            ChunkDelta::Upsert {
                chunk: chunk(ChunkKind::Leaf, "a"),
                text_changed: true,
            },
            ChunkDelta::Upsert {
                chunk: chunk(ChunkKind::Parent, "p"),
                text_changed: true,
            },
            ChunkDelta::Delete {
                chunk_id: "x".into(),
                doc_id: "d".into(),
            },
            ChunkDelta::Upsert {
                chunk: chunk(ChunkKind::Leaf, "b"),
                text_changed: false,
            },
        ];
        let mut calls = Vec::new();
        let out = embed_batch(deltas, &mut |texts: &[String]| {
            calls.push(texts.to_vec());
            Ok(texts.iter().map(|t| vec![t.len() as f32]).collect())
        });
        assert_eq!(
            calls,
            vec![vec!["T\nS\na".to_string(), "T\nS\nb".to_string()]]
        );
        assert!(matches!(&out[0], SinkRecord::Upsert { vector: Some(v), .. } if v == &vec![5.0]));
        assert!(matches!(&out[1], SinkRecord::Upsert { vector: None, .. }));
        assert!(matches!(&out[2], SinkRecord::Delete { .. }));
        assert!(matches!(
            &out[3],
            SinkRecord::Upsert {
                vector: Some(_),
                ..
            }
        ));
    }

    #[test]
    fn a_failing_or_short_embedder_yields_a_failure_record_not_a_panic() {
        let deltas = vec![ChunkDelta::Upsert {
            chunk: chunk(ChunkKind::Leaf, "a"),
            text_changed: true,
        }];
        let out = embed_batch(deltas.clone(), &mut |_: &[String]| {
            Err(EmbedError("model gone".into()))
        });
        assert_eq!(
            out,
            vec![SinkRecord::Failed {
                error: "model gone".into()
            }]
        );
        let out = embed_batch(deltas, &mut |_: &[String]| Ok(vec![]));
        assert!(matches!(&out[0], SinkRecord::Failed { .. }));
    }
}
