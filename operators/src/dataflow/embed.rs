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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SinkRecord {
    /// Write the chunk; `vector` is `Some` for leaf chunks (they go to the vector index too) and
    /// `None` for parents (text index only).
    Upsert { chunk: Chunk, vector: Option<Vec<f32>> },
    Delete { chunk_id: String, doc_id: String },
    /// Embedding failed: the sink must not commit this time (the pipeline stops and a restart
    /// replays it).
    Failed { error: String },
}

/// Embeds the leaf upserts of each message with `embed`, which receives the texts (see
/// [`embed_input`]) of one batch and returns one vector per text.
pub fn embed_deltas<'s, F>(deltas: Stream<'s, Time, Vec<ChunkDelta>>, mut embed: F) -> Stream<'s, Time, Vec<SinkRecord>>
where
    F: FnMut(&[String]) -> Result<Vec<Vec<f32>>, EmbedError> + 'static,
{
    deltas.unary(Pipeline, "Embed", move |_cap, _info| {
        move |input, output| {
            input.for_each(|cap, data| {
                let deltas: Vec<ChunkDelta> = data.drain(..).collect();
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
            ChunkDelta::Upsert { chunk, .. } if chunk.kind == ChunkKind::Leaf => Some(embed_input(chunk)),
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
                    error: format!("embedder returned {} vectors for {} texts", v.len(), texts.len()),
                }]
            }
            Err(e) => return vec![SinkRecord::Failed { error: e.to_string() }],
        }
    }
    .into_iter();
    deltas
        .into_iter()
        .map(|d| match d {
            ChunkDelta::Upsert { chunk, .. } => {
                let vector = if chunk.kind == ChunkKind::Leaf { vectors.next() } else { None };
                SinkRecord::Upsert { chunk, vector }
            }
            ChunkDelta::Delete { chunk_id, doc_id } => SinkRecord::Delete { chunk_id, doc_id },
        })
        .collect()
}
