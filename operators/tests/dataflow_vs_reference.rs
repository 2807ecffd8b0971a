//! The chunk-delta dataflow, run on several workers, must produce exactly the deltas of the
//! sequential reference for every time, on random sequences of upserts, edits and deletes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use freshet_operators::chunk::{chunk_id, Chunk, ChunkChange, ChunkKind};
use freshet_operators::dataflow::{chunk_deltas, reference_deltas, ChunkDelta, DocUpdate, Time};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::Probe;
use timely::dataflow::{InputHandle, ProbeHandle};

/// A tiny deterministic PRNG (xorshift), so the test needs no extra crate.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn make_chunks(doc: &str, texts: &[String], title: &str) -> Vec<Chunk> {
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    let mut pos = 0u32;
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let occ = seen.entry(t.as_str()).or_insert(0);
            let id = chunk_id(doc, ChunkKind::Leaf, t, *occ);
            *occ += 1;
            let len = t.chars().count() as u32;
            let c = Chunk {
                chunk_id: id,
                index: i as u32,
                char_start: pos,
                char_end: pos + len,
                token_count: len,
                title: title.to_string(),
                ..freshet_operators::testing::chunk(doc, t)
            };
            pos += len + 2;
            c
        })
        .collect()
}

/// Rounds of updates: each round maps doc id -> Some(chunks) / None.
type Rounds = Vec<BTreeMap<String, Option<Vec<Chunk>>>>;

fn scenario(seed: u64, docs: usize, rounds: usize) -> Rounds {
    let mut rng = Rng(seed);
    let pool: Vec<String> = (0..12).map(|i| format!("paragraph {i}")).collect();
    let mut out = Vec::new();
    for _ in 0..rounds {
        let mut round = BTreeMap::new();
        for _ in 0..rng.below(docs as u64 + 1) {
            let doc = format!("doc-{}", rng.below(docs as u64));
            let update = if rng.below(5) == 0 {
                None
            } else {
                let n = rng.below(5) as usize;
                let texts: Vec<String> = (0..n)
                    .map(|_| pool[rng.below(12) as usize].clone())
                    .collect();
                let title = if rng.below(4) == 0 { "edited" } else { "title" };
                Some(make_chunks(&doc, &texts, title))
            };
            round.insert(doc, update);
        }
        out.push(round);
    }
    out
}

fn expected(rounds: &Rounds) -> BTreeMap<Time, Vec<ChunkDelta>> {
    let mut state: BTreeMap<String, Vec<Chunk>> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for (i, round) in rounds.iter().enumerate() {
        let before = state.clone();
        for (doc, update) in round {
            match update {
                Some(chunks) => {
                    state.insert(doc.clone(), chunks.clone());
                }
                None => {
                    state.remove(doc);
                }
            }
        }
        let deltas = reference_deltas(&before, &state);
        if !deltas.is_empty() {
            out.insert(i as Time + 1, deltas);
        }
    }
    out
}

fn run_dataflow(rounds: Rounds, workers: usize) -> BTreeMap<Time, Vec<ChunkDelta>> {
    let seen: Arc<Mutex<Vec<(Time, ChunkDelta)>>> = Arc::default();
    let sink = seen.clone();
    let rounds = Arc::new(rounds);
    timely::execute(timely::Config::process(workers), move |worker| {
        let index = worker.index();
        let peers = worker.peers();
        let sink = sink.clone();
        let mut input = InputHandle::<Time, CapacityContainerBuilder<Vec<DocUpdate>>>::new();
        let probe = ProbeHandle::new();
        worker.dataflow::<Time, _, _>(|scope| {
            chunk_deltas(input.to_stream(scope))
                .probe_with(&probe)
                .sink(Pipeline, "Collect", move |(input, _frontier)| {
                    input.for_each(|cap, data| {
                        let t = *cap.least().expect("a message has a time");
                        sink.lock().unwrap().extend(data.drain(..).map(|d| (t, d)));
                    });
                });
        });
        input.advance_to(1);
        for (i, round) in rounds.iter().enumerate() {
            let t = i as Time + 1;
            for (n, (doc, update)) in round.iter().enumerate() {
                // A document always enters through the same worker, as a Kafka key does.
                let owner = doc.bytes().map(|b| b as usize).sum::<usize>() % peers;
                if owner == index {
                    let _ = n;
                    input.send((doc.clone(), update.clone(), t));
                }
            }
            input.advance_to(t + 1);
            while probe.less_than(input.time()) {
                worker.step();
            }
        }
    })
    .expect("timely runs");
    let mut out: BTreeMap<Time, Vec<ChunkDelta>> = BTreeMap::new();
    for (t, d) in seen.lock().unwrap().drain(..) {
        out.entry(t).or_default().push(d);
    }
    for v in out.values_mut() {
        v.sort_by(|a, b| a.chunk_id().cmp(b.chunk_id()));
    }
    out
}

#[test]
fn matches_reference_on_one_worker() {
    for seed in 1..6 {
        let rounds = scenario(seed * 7919, 6, 12);
        assert_eq!(
            run_dataflow(rounds.clone(), 1),
            expected(&rounds),
            "seed {seed}"
        );
    }
}

#[test]
fn matches_reference_on_three_workers() {
    for seed in 1..6 {
        let rounds = scenario(seed * 104729, 9, 15);
        assert_eq!(
            run_dataflow(rounds.clone(), 3),
            expected(&rounds),
            "seed {seed}"
        );
    }
}

#[test]
fn identical_resend_produces_no_delta_and_edit_touches_one_chunk() {
    let texts: Vec<String> = (0..5).map(|i| format!("para {i}")).collect();
    let v1 = make_chunks("d", &texts, "t");
    let mut edited = texts.clone();
    edited[2] = "para two, edited".into();
    let v2 = make_chunks("d", &edited, "t");
    let rounds: Rounds = vec![
        BTreeMap::from([("d".to_string(), Some(v1.clone()))]),
        BTreeMap::from([("d".to_string(), Some(v1.clone()))]),
        BTreeMap::from([("d".to_string(), Some(v2.clone()))]),
        BTreeMap::from([("d".to_string(), None)]),
    ];
    let got = run_dataflow(rounds, 2);
    assert_eq!(got[&1].len(), 5);
    assert!(
        !got.contains_key(&2),
        "identical re-send must produce no delta: {:?}",
        got.get(&2)
    );
    // The edit: one new chunk, one removed chunk; spans of later chunks moved (records upserted,
    // text unchanged so no re-embedding is needed).
    let inserted_text: Vec<_> = got[&3]
        .iter()
        .filter_map(|d| match d {
            ChunkDelta::Upsert { chunk, change } if change.embedded => Some(chunk.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(inserted_text, vec!["para two, edited".to_string()]);
    // the later chunks moved: their placement alone is to write again
    let moved: Vec<_> = got[&3]
        .iter()
        .filter_map(|d| match d {
            ChunkDelta::Upsert { chunk, change } if !change.embedded => {
                assert_eq!(
                    *change,
                    ChunkChange {
                        placement: true,
                        ..ChunkChange::default()
                    }
                );
                Some(chunk.text.clone())
            }
            _ => None,
        })
        .collect();
    let mut moved = moved;
    moved.sort();
    assert_eq!(moved, vec!["para 3".to_string(), "para 4".to_string()]);
    let deleted: Vec<_> = got[&3]
        .iter()
        .filter(|d| matches!(d, ChunkDelta::Delete { .. }))
        .map(|d| d.chunk_id().to_string())
        .collect();
    assert_eq!(deleted, vec![v1[2].chunk_id.clone()]);
    assert_eq!(got[&4].len(), 5);
    assert!(got[&4]
        .iter()
        .all(|d| matches!(d, ChunkDelta::Delete { .. })));
}

/// A new version that keeps a chunk as it was restamps it (every chunk record carries its
/// version's hash) but changes nothing an index stores: an upsert with nothing to write.
#[test]
fn a_new_version_restamps_kept_chunks_without_changes() {
    let texts: Vec<String> = (0..3).map(|i| format!("para {i}")).collect();
    let v1 = make_chunks("d", &texts, "t");
    let mut edited = texts.clone();
    edited[2] = "para two, edited".into();
    let stamp = |chunks: Vec<Chunk>, h: &str| -> Vec<Chunk> {
        chunks
            .into_iter()
            .map(|c| Chunk {
                doc_hash: h.into(),
                ..c
            })
            .collect()
    };
    let rounds: Rounds = vec![
        BTreeMap::from([("d".to_string(), Some(stamp(v1.clone(), "h1")))]),
        BTreeMap::from([(
            "d".to_string(),
            Some(stamp(make_chunks("d", &edited, "t"), "h2")),
        )]),
    ];
    let got = run_dataflow(rounds.clone(), 2);
    assert_eq!(got, expected(&rounds));
    let changes: BTreeMap<String, ChunkChange> = got[&2]
        .iter()
        .filter_map(|d| match d {
            ChunkDelta::Upsert { chunk, change } => Some((chunk.text.clone(), *change)),
            ChunkDelta::Delete { .. } => None,
        })
        .collect();
    assert_eq!(
        changes,
        BTreeMap::from([
            ("para 0".to_string(), ChunkChange::default()),
            ("para 1".to_string(), ChunkChange::default()),
            ("para two, edited".to_string(), ChunkChange::NEW),
        ]),
        "kept chunks restamped with nothing to write, the edited one new"
    );
    assert_eq!(
        got[&2]
            .iter()
            .filter(|d| matches!(d, ChunkDelta::Delete { .. }))
            .count(),
        1
    );
}
