//! The incremental heart of freshet: from keyed document upserts to chunk deltas.
//!
//! ```text
//! (doc id, Some(chunks) | None, time)            one record per Kafka change, after prepare()
//!   └─ arrange_from_upsert (exchange by doc id)   a new version retracts the previous one
//!        └─ flat_map to (chunk id, chunk)          every chunk of every live document
//!             └─ arrange_by_key (by chunk id)      a chunk's retraction and insertion meet
//!                  └─ ChunkDeltas                  per complete time: upsert / delete per chunk id
//! ```
//!
//! Identical re-sends cancel inside the arrangements, so they produce no delta at all; an edit
//! produces deltas only for chunk ids whose record changed (see [`crate::chunk::chunk_id`]).
//! Time `0` is reserved for the bootstrap of state that the indexes already hold (after a
//! restart); [`chunk_deltas`] drops its deltas so that nothing is written twice.

mod delta;
mod embed;

use std::collections::BTreeMap;

use differential_dataflow::operators::arrange::upsert::arrange_from_upsert;
use differential_dataflow::trace::implementations::{ValBuilder, ValSpine};
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::Capability;
use timely::dataflow::Stream;

use crate::chunk::Chunk;

pub use delta::{deltas_from_updates, reference_deltas, ChunkDelta};
pub use embed::{embed_batch, embed_deltas, SinkRecord};

/// Logical time of the dataflow: an epoch counter driven by the pipeline's source loop.
pub type Time = u64;

/// The epoch at which state already present in the indexes is replayed after a restart.
pub const BOOTSTRAP_TIME: Time = 0;

/// A document upsert (`Some(chunks)`) or delete (`None`) at a time.
pub type DocUpdate = (String, Option<Vec<Chunk>>, Time);

/// Updates of one time, waiting for the frontier to pass it, with the capability to emit them.
type Pending = (Capability<Time>, Vec<(Chunk, isize)>);

type DocBuilder = ValBuilder<String, Vec<Chunk>, Time, isize>;
type DocSpine = ValSpine<String, Vec<Chunk>, Time, isize>;

/// Computes, for every completed time, the chunk deltas that take the indexes from the previous
/// state to the current one. Deltas of one time are emitted at that time, sorted by chunk id.
pub fn chunk_deltas<'s>(
    updates: Stream<'s, Time, Vec<DocUpdate>>,
) -> Stream<'s, Time, Vec<ChunkDelta>> {
    let docs =
        arrange_from_upsert::<DocBuilder, DocSpine, String, Vec<Chunk>>(updates, "DocUpserts");
    let chunks = docs.flat_map_ref(|_doc_id: &String, chunks: &Vec<Chunk>| {
        chunks
            .iter()
            .map(|c| (c.chunk_id.clone(), c.clone()))
            .collect::<Vec<_>>()
    });
    chunks
        .arrange_by_key_named("ChunksById")
        .as_collection(|_id: &String, chunk: &Chunk| chunk.clone())
        .inner
        .unary_frontier(Pipeline, "ChunkDeltas", |_cap, _info| {
            let mut stash: BTreeMap<Time, Pending> = BTreeMap::new();
            move |(input, frontier), output| {
                input.for_each(|cap, data| {
                    for (chunk, time, diff) in data.drain(..) {
                        let entry = stash.entry(time).or_insert_with(|| {
                            (cap.delayed(&time, output.output_index()), Vec::new())
                        });
                        entry.1.push((chunk, diff));
                    }
                });
                while let Some(entry) = stash.first_entry() {
                    if frontier.less_equal(entry.key()) {
                        break;
                    }
                    let (time, (cap, updates)) = entry.remove_entry();
                    if time == BOOTSTRAP_TIME {
                        continue;
                    }
                    let deltas = deltas_from_updates(updates);
                    if !deltas.is_empty() {
                        output.session(&cap).give_iterator(deltas.into_iter());
                    }
                }
            }
        })
}
