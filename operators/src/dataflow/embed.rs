//! The embedding operator: attaches a vector to every leaf-chunk upsert, asking the embedder
//! (which consults the cache first) once per message batch.
//!
//! A text the model cannot embed is isolated, not fatal: a failing batch is split in halves
//! until each failing text stands alone, and a text that fails alone while the model still
//! embeds a known text ([`BatchEmbed::model_works`]) becomes a [`SinkRecord::Rejected`]; its
//! document's version is refused by the sink and dead-lettered, everything else is written. A
//! vector with a NaN or infinite component is such a failure too. Only a failure that is not
//! about one text (the model embeds nothing, or the embedder says so:
//! [`EmbedError::may_be_about_texts`], e.g. a cache it cannot write) stops the pipeline
//! ([`SinkRecord::Failed`]).

use serde::{Deserialize, Serialize};
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::Capability;
use timely::dataflow::Stream;

use super::{ChunkDelta, Time};
use crate::chunk::{Chunk, ChunkChange, ChunkKind};
use crate::embed::{embed_input, BatchEmbed, EmbedError};

/// A chunk delta ready for the sinks.
// Most records are upserts: boxing them would cost an allocation per chunk for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SinkRecord {
    /// Write the chunk; `vector` is `Some` for leaf chunks (they go to the vector index too) and
    /// `None` for parents (text index only). `change` as in [`ChunkDelta::Upsert`]: a leaf
    /// the indexes already hold still gets its vector (from the cache), so that the sink can
    /// rewrite a document the indexes lost.
    Upsert {
        chunk: Chunk,
        vector: Option<Vec<f32>>,
        change: ChunkChange,
    },
    Delete {
        chunk_id: String,
        doc_id: String,
    },
    /// A leaf upsert whose text the model cannot embed (while it embeds others): the sink
    /// refuses this version of the chunk's document.
    Rejected {
        chunk: Chunk,
        error: String,
    },
    /// Embedding failed for reasons not about one text: the sink must not commit this time (the
    /// pipeline stops and a restart replays it).
    Failed {
        error: String,
    },
}

/// Embeds the leaf upserts of each message with `embedder`, one time at a time: an activation
/// takes in every message that has arrived but embeds only those of the earliest time, then
/// returns (asking to run again while messages wait). Embedding is the slow step; a worker
/// that read many epochs ahead (a backlog) would otherwise embed them all in one activation,
/// and no epoch of them could become durable before the last was embedded. When a time was
/// embedded with more waiting, the next activation only asks to run again: the operators
/// downstream (the sink) run after this one in a worker's step, and so see the frontier pass
/// that time before the next time's embedding, not after it. The sink's commits then follow
/// one epoch at a time. A message that finds nothing waiting is embedded at once.
pub fn embed_deltas<'s, E>(
    deltas: Stream<'s, Time, Vec<ChunkDelta>>,
    mut embedder: E,
) -> Stream<'s, Time, Vec<SinkRecord>>
where
    E: BatchEmbed + 'static,
{
    let scope = deltas.scope();
    deltas.unary(Pipeline, "Embed", move |_cap, info| {
        let activator = scope.activator_for(info.address);
        // Messages taken in and not embedded yet, with the capabilities that hold their times.
        let mut waiting: Vec<(Capability<Time>, Vec<ChunkDelta>)> = Vec::new();
        // Whether the last activation embedded and left messages waiting: the next one then
        // leaves the step to the operators downstream.
        let mut rest = false;
        move |input, output| {
            input.for_each(|cap, data| {
                let deltas = std::mem::take(data);
                match cap.retain_least(0) {
                    Some(held) => waiting.push((held, deltas)),
                    // A message without a time to hold: embedded now, as it came.
                    None => {
                        let records = embed_batch(deltas, &mut embedder);
                        output.session(&cap).give_iterator(records.into_iter());
                    }
                }
            });
            let Some(earliest) = waiting.iter().map(|(c, _)| *c.time()).min() else {
                return;
            };
            if std::mem::take(&mut rest) {
                activator.activate();
                return;
            }
            let (now, later): (Vec<_>, Vec<_>) =
                waiting.drain(..).partition(|(c, _)| *c.time() == earliest);
            waiting = later;
            for (cap, deltas) in now {
                let records = embed_batch(deltas, &mut embedder);
                output.session(&cap).give_iterator(records.into_iter());
            }
            if !waiting.is_empty() {
                rest = true;
                activator.activate();
            }
        }
    })
}

/// The sequential core of [`embed_deltas`]: one embedding request for the leaf upserts of
/// `deltas` (texts by [`embed_input`]), split only when it fails.
pub fn embed_batch<E: BatchEmbed + ?Sized>(
    deltas: Vec<ChunkDelta>,
    embedder: &mut E,
) -> Vec<SinkRecord> {
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
        match embed_isolating(&texts, embedder) {
            Ok(v) => v,
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
            ChunkDelta::Upsert { chunk, change } if chunk.kind == ChunkKind::Leaf => {
                match vectors.next() {
                    Some(Ok(vector)) => SinkRecord::Upsert {
                        chunk,
                        vector: Some(vector),
                        change,
                    },
                    Some(Err(error)) => SinkRecord::Rejected { chunk, error },
                    None => SinkRecord::Failed {
                        error: "the embedder returned fewer vectors than texts".into(),
                    },
                }
            }
            ChunkDelta::Upsert { chunk, change } => SinkRecord::Upsert {
                chunk,
                vector: None,
                change,
            },
            ChunkDelta::Delete { chunk_id, doc_id } => SinkRecord::Delete { chunk_id, doc_id },
        })
        .collect()
}

/// Per text: its vector, or why the model cannot embed it. `Err` when the failure is not about
/// the texts (see the module docs).
fn embed_isolating<E: BatchEmbed + ?Sized>(
    texts: &[String],
    embedder: &mut E,
) -> Result<Vec<Result<Vec<f32>, String>>, EmbedError> {
    match embedder.embed(texts) {
        Ok(vectors) if vectors.len() == texts.len() => Ok(vectors
            .into_iter()
            .map(|v| {
                if v.iter().all(|x| x.is_finite()) {
                    Ok(v)
                } else {
                    Err("the model returned a vector with a NaN or infinite component".into())
                }
            })
            .collect()),
        Ok(vectors) => Err(EmbedError::new(format!(
            "the embedder returned {} vectors for {} texts",
            vectors.len(),
            texts.len()
        ))),
        Err(e) if !e.may_be_about_texts => Err(e),
        Err(e) if texts.len() == 1 => {
            if embedder.model_works() {
                Ok(vec![Err(e.to_string())])
            } else {
                Err(e)
            }
        }
        Err(_) => {
            let (a, b) = texts.split_at(texts.len() / 2);
            let mut out = embed_isolating(a, embedder)?;
            out.extend(embed_isolating(b, embedder)?);
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::chunk_id;

    fn chunk(kind: ChunkKind, text: &str) -> Chunk {
        Chunk {
            chunk_id: chunk_id("d", kind, text, 0),
            kind,
            section: vec!["S".into()],
            title: "T".into(),
            ..crate::testing::chunk("d", text)
        }
    }

    fn leaf(text: &str) -> ChunkDelta {
        ChunkDelta::Upsert {
            chunk: chunk(ChunkKind::Leaf, text),
            change: ChunkChange::NEW,
        }
    }

    /// A model double: a text containing one of `bad` fails its whole batch, one containing
    /// `nan` gets a NaN vector, and a `dead` model embeds nothing.
    #[derive(Default)]
    struct Fake {
        calls: Vec<Vec<String>>,
        bad: Vec<&'static str>,
        nan: Option<&'static str>,
        dead: bool,
        short: bool,
        /// Fails every call as the machinery would (a cache it cannot write).
        cache_full: bool,
        probes: usize,
    }

    impl BatchEmbed for Fake {
        fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.push(texts.to_vec());
            if self.dead {
                return Err(EmbedError::new("model gone"));
            }
            if self.cache_full {
                return Err(EmbedError::environment("cache: No space left on device"));
            }
            if let Some(b) = texts
                .iter()
                .find(|t| self.bad.iter().any(|b| t.contains(b)))
            {
                return Err(EmbedError::new(format!("cannot embed {b:?}")));
            }
            if self.short {
                return Ok(vec![]);
            }
            Ok(texts
                .iter()
                .map(|t| match self.nan {
                    Some(n) if t.contains(n) => vec![f32::NAN],
                    _ => vec![t.len() as f32],
                })
                .collect())
        }

        fn model_works(&mut self) -> bool {
            self.probes += 1;
            !self.dead
        }
    }

    /// Notes, at each model call, whether the operator downstream has seen the frontier pass
    /// time 0.
    struct Noting {
        downstream_past_0: std::sync::Arc<std::sync::atomic::AtomicBool>,
        calls: std::sync::Arc<std::sync::Mutex<Vec<bool>>>,
    }

    impl BatchEmbed for Noting {
        fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            let past = self
                .downstream_past_0
                .load(std::sync::atomic::Ordering::SeqCst);
            self.calls.lock().unwrap().push(past);
            Ok(texts.iter().map(|t| vec![t.len() as f32]).collect())
        }
        fn model_works(&mut self) -> bool {
            true
        }
    }

    /// Two times' messages wait together (a worker that read ahead): the earlier is embedded,
    /// and the operator downstream sees the frontier pass it before the later one is embedded,
    /// so that the earlier can become durable first. Both come out, each at its own time.
    #[test]
    fn each_time_is_embedded_in_an_activation_of_its_own() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        use timely::container::CapacityContainerBuilder;
        use timely::dataflow::operators::Probe;
        use timely::dataflow::{InputHandle, ProbeHandle};

        let past_0 = Arc::new(AtomicBool::new(false));
        let calls: Arc<Mutex<Vec<bool>>> = Arc::default();
        let seen: Arc<Mutex<Vec<(Time, usize)>>> = Arc::default();
        let model = Noting {
            downstream_past_0: past_0.clone(),
            calls: calls.clone(),
        };
        let out = seen.clone();
        timely::execute_directly(move |worker| {
            let mut input = InputHandle::<Time, CapacityContainerBuilder<Vec<ChunkDelta>>>::new();
            let probe = ProbeHandle::new();
            worker.dataflow::<Time, _, _>(|scope| {
                embed_deltas(input.to_stream(scope), model)
                    .probe_with(&probe)
                    .sink(Pipeline, "Collect", move |(input, frontier)| {
                        input.for_each(|cap, records| {
                            let t = *cap.least().expect("a message has a time");
                            out.lock().unwrap().push((t, records.len()));
                        });
                        if !frontier.less_equal(&0) {
                            past_0.store(true, Ordering::SeqCst);
                        }
                    });
            });
            input.send(leaf("a"));
            input.advance_to(1);
            input.send(leaf("b"));
            input.advance_to(2);
            while probe.less_than(&2) {
                worker.step();
            }
        });
        assert_eq!(*calls.lock().unwrap(), [false, true]);
        assert_eq!(*seen.lock().unwrap(), [(0, 1), (1, 1)]);
    }

    /// With nothing waiting (updates arriving one at a time), a message is embedded in the
    /// step it arrives in, also right after another was embedded.
    #[test]
    fn a_message_alone_is_embedded_at_once() {
        use std::sync::atomic::AtomicBool;
        use std::sync::{Arc, Mutex};
        use timely::container::CapacityContainerBuilder;
        use timely::dataflow::operators::Probe;
        use timely::dataflow::{InputHandle, ProbeHandle};

        let calls: Arc<Mutex<Vec<bool>>> = Arc::default();
        let model = Noting {
            downstream_past_0: Arc::new(AtomicBool::new(false)),
            calls: calls.clone(),
        };
        let counted = calls.clone();
        timely::execute_directly(move |worker| {
            let mut input = InputHandle::<Time, CapacityContainerBuilder<Vec<ChunkDelta>>>::new();
            let probe = ProbeHandle::new();
            worker.dataflow::<Time, _, _>(|scope| {
                embed_deltas(input.to_stream(scope), model).probe_with(&probe);
            });
            for t in 0..3 {
                input.send(leaf("a"));
                input.advance_to(t + 1);
                worker.step();
                assert_eq!(counted.lock().unwrap().len(), t as usize + 1);
                while probe.less_than(&(t + 1)) {
                    worker.step();
                }
            }
        });
        assert_eq!(calls.lock().unwrap().len(), 3);
    }

    #[test]
    fn only_leaf_upserts_are_embedded_in_one_call() {
        let deltas = vec![
            leaf("a"),
            ChunkDelta::Upsert {
                chunk: chunk(ChunkKind::Parent, "p"),
                change: ChunkChange::NEW,
            },
            ChunkDelta::Delete {
                chunk_id: "x".into(),
                doc_id: "d".into(),
            },
            ChunkDelta::Upsert {
                chunk: chunk(ChunkKind::Leaf, "b"),
                change: ChunkChange::default(),
            },
        ];
        let mut model = Fake::default();
        let out = embed_batch(deltas, &mut model);
        assert_eq!(
            model.calls,
            vec![vec!["T\nS\na".to_string(), "T\nS\nb".to_string()]]
        );
        assert_eq!(model.probes, 0);
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

    /// A failure the embedder says is about no text (its cache cannot be written) is not split
    /// down to texts to dead-letter them all: the whole batch fails, once.
    #[test]
    fn a_cache_that_cannot_be_written_fails_the_batch_instead_of_its_texts() {
        let mut model = Fake {
            cache_full: true,
            ..Fake::default()
        };
        let out = embed_batch(
            ["a", "b", "c"].iter().map(|t| leaf(t)).collect(),
            &mut model,
        );
        assert!(
            matches!(&out[..], [SinkRecord::Failed { error }] if error.contains("No space left")),
            "{out:?}"
        );
        assert_eq!((model.calls.len(), model.probes), (1, 0));
    }

    /// Texts the model cannot embed are found by halving the batch; every other text gets its
    /// vector, in place.
    #[test]
    fn texts_the_model_cannot_embed_are_isolated() {
        let texts = ["t0", "t1", "bad2", "t3", "t4", "t5", "bad6", "t7", "t8"];
        let mut model = Fake {
            bad: vec!["bad"],
            ..Fake::default()
        };
        let out = embed_batch(texts.iter().map(|t| leaf(t)).collect(), &mut model);
        assert_eq!(out.len(), texts.len());
        for (t, r) in texts.iter().zip(&out) {
            match r {
                SinkRecord::Upsert {
                    chunk,
                    vector: Some(v),
                    ..
                } => {
                    assert!(!t.starts_with("bad"));
                    assert_eq!(&chunk.text, t);
                    assert_eq!(v, &vec![(t.len() + 4) as f32]);
                }
                SinkRecord::Rejected { chunk, error } => {
                    assert!(t.starts_with("bad"), "{t}");
                    assert_eq!(&chunk.text, t);
                    assert!(
                        error.contains(&format!("cannot embed \"T\\nS\\n{t}\"")),
                        "{error}"
                    );
                }
                other => panic!("{t}: {other:?}"),
            }
        }
        // each failing text was confirmed once against a working model
        assert_eq!(model.probes, 2);
        // halving: far fewer calls than one per text and one per split
        assert!(model.calls.len() <= 13, "{} calls", model.calls.len());
        assert_eq!(model.calls[0].len(), texts.len());
    }

    #[test]
    fn a_non_finite_vector_rejects_its_text_alone() {
        let mut model = Fake {
            nan: Some("b"),
            ..Fake::default()
        };
        let out = embed_batch(vec![leaf("a"), leaf("b"), leaf("c")], &mut model);
        assert_eq!(model.calls.len(), 1);
        assert!(matches!(
            &out[0],
            SinkRecord::Upsert {
                vector: Some(_),
                ..
            }
        ));
        assert!(
            matches!(&out[1], SinkRecord::Rejected { error, .. } if error.contains("NaN")),
            "{:?}",
            out[1]
        );
        assert!(matches!(
            &out[2],
            SinkRecord::Upsert {
                vector: Some(_),
                ..
            }
        ));
    }

    /// A model that embeds nothing is not a bad text: one failure record, nothing rejected.
    #[test]
    fn a_failing_or_short_embedder_yields_a_failure_record_not_a_panic() {
        for n in [1, 5] {
            let mut model = Fake {
                dead: true,
                ..Fake::default()
            };
            let deltas = (0..n).map(|i| leaf(&format!("t{i}"))).collect();
            let out = embed_batch(deltas, &mut model);
            assert_eq!(
                out,
                vec![SinkRecord::Failed {
                    error: "model gone".into()
                }]
            );
            assert_eq!(model.probes, 1);
        }
        let mut model = Fake {
            short: true,
            ..Fake::default()
        };
        let out = embed_batch(vec![leaf("a")], &mut model);
        assert!(matches!(&out[0], SinkRecord::Failed { .. }));
    }
}
