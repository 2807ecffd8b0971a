use std::collections::BTreeMap;

use super::assemble::{Assembler, Read, Ready};
use super::*;
use crate::testing::{chunk, random_chunks, Rng};

const FRESH: Read = Read {
    fresh: true,
    last_in_log: false,
};

fn roundtrip(e: &Encoded) -> Result<Entry, ChangelogError> {
    decode(Some(&e.key), e.value.as_deref(), &e.headers)
}

fn marker(epoch: u64, offset: i64) -> Marker {
    Marker {
        epoch,
        source_offsets: BTreeMap::from([("docs".into(), BTreeMap::from([(0, offset)]))]),
        committed_at_ms: 1_700_000_000_000 + epoch,
        index_id: Some("idx".into()),
    }
}

#[test]
fn every_record_round_trips() {
    let mut rng = Rng::new(7);
    for c in random_chunks(&mut rng, 50) {
        let e = encode_upsert(&c, 3);
        assert_eq!(e.key, c.chunk_id.as_bytes());
        assert_eq!(roundtrip(&e), Ok(Entry::Upsert(Box::new(c.clone()))));
        let d = encode_delete(&c.chunk_id, 4);
        assert_eq!(d.value, None);
        assert_eq!(roundtrip(&d), Ok(Entry::Delete(c.chunk_id.clone())));
    }
    let mut m = marker(9, 12);
    assert_eq!(
        roundtrip(&encode_marker(&m, 1)),
        Ok(Entry::Marker(m.clone()))
    );
    m.index_id = None;
    assert_eq!(roundtrip(&encode_marker(&m, 1)), Ok(Entry::Marker(m)));
}

#[test]
fn a_record_that_is_not_what_its_key_says_is_refused() {
    let c = chunk("doc", "some text");
    let mut e = encode_upsert(&c, 1);
    e.key = b"0123".to_vec();
    assert!(matches!(roundtrip(&e), Err(ChangelogError::Chunk { .. })));
    let mut e = encode_upsert(&c, 1);
    e.value = Some(b"{\"not\":\"a chunk\"}".to_vec());
    assert!(matches!(roundtrip(&e), Err(ChangelogError::Chunk { .. })));
    let mut e = encode_upsert(&c, 1);
    e.headers.retain(|(k, _)| k != FORMAT_HEADER);
    assert_eq!(roundtrip(&e), Err(ChangelogError::Format("none".into())));
    e.headers.push((FORMAT_HEADER.into(), Some(b"2".to_vec())));
    assert_eq!(roundtrip(&e), Err(ChangelogError::Format("2".into())));
    let mut m = encode_marker(&marker(1, 1), 1);
    m.value = None;
    assert!(matches!(roundtrip(&m), Err(ChangelogError::Marker(_))));
    let e = encode_upsert(&c, 1);
    assert_eq!(
        decode(None, e.value.as_deref(), &e.headers),
        Err(ChangelogError::NoKey)
    );
}

/// Chunks in chunk id order, as a batch lists them.
fn by_id(mut chunks: Vec<Chunk>) -> Vec<Chunk> {
    chunks.sort_by(|x, y| x.chunk_id.cmp(&y.chunk_id));
    chunks
}

/// An index modelled as chunk id → chunk, with a batch applied as a replica applies it.
fn apply(index: &mut BTreeMap<String, Chunk>, ready: &Ready) {
    apply_changes(index, &ready.upserts, &ready.deletes);
}

fn apply_changes(index: &mut BTreeMap<String, Chunk>, upserts: &[Chunk], deletes: &[String]) {
    for id in deletes {
        index.remove(id);
    }
    for c in upserts {
        index.insert(c.chunk_id.clone(), c.clone());
    }
}

#[test]
fn the_batch_end_and_the_durable_commit_travel_in_headers() {
    let (a, b) = (chunk("d1", "alpha"), chunk("d2", "beta"));
    let mut records = vec![encode_delete(&a.chunk_id, 2), encode_upsert(&b, 2)];
    mark_batch_end(&mut records);
    assert!(!ends_batch(&records[0].headers));
    assert!(ends_batch(&records[1].headers));
    // The header changes nothing in what the record says.
    assert_eq!(roundtrip(&records[1]), Ok(Entry::Upsert(Box::new(b))));
    mark_batch_end(&mut []);

    let m = encode_marker(&marker(2, 7), 1_700_000_000_123);
    assert_eq!(durable_at_ms(&m.headers), Some(1_700_000_000_123));
    assert!(!ends_batch(&m.headers));
    assert_eq!(roundtrip(&m), Ok(Entry::Marker(marker(2, 7))));
    // A marker of a pipeline that did not write it.
    let mut old = m.clone();
    old.headers.retain(|(k, _)| k != DURABLE_AT_HEADER);
    assert_eq!(durable_at_ms(&old.headers), None);
    assert_eq!(roundtrip(&old), Ok(Entry::Marker(marker(2, 7))));
}

/// Changes staged before their marker, at any points, leave the index where applying them all
/// at the marker leaves it; a possibly compacted stretch is never staged, and staged changes
/// count as waiting until their marker.
#[test]
fn staged_changes_end_where_changes_applied_at_the_marker_end() {
    let mut rng = Rng::new(23);
    let pool = random_chunks(&mut rng, 30);
    for run in 0..200u64 {
        let mut rng = Rng::new(1000 + run);
        let (mut whole, mut staged) = (Assembler::new(), Assembler::new());
        let (mut at_marker, mut early) = (BTreeMap::new(), BTreeMap::new());
        for epoch in 1..=8u64 {
            for _ in 0..rng.below(6) {
                let mut c = rng.pick(&pool).clone();
                c.text = format!("{} v{epoch}", c.text);
                let entry = if rng.chance(3) {
                    Entry::Delete(c.chunk_id.clone())
                } else {
                    Entry::Upsert(Box::new(c))
                };
                let read = Read {
                    fresh: !rng.chance(10),
                    last_in_log: false,
                };
                whole.push(entry.clone(), read);
                staged.push(entry, read);
                if rng.chance(3) {
                    let stale = staged.waits_for_the_end();
                    let waiting = staged.pending();
                    match staged.stage() {
                        Some((u, d)) => {
                            assert!(!stale);
                            apply_changes(&mut early, &u, &d);
                        }
                        None => assert!(stale || waiting == 0),
                    }
                    assert_eq!(staged.pending(), waiting);
                }
            }
            let read = Read {
                fresh: true,
                last_in_log: rng.chance(2),
            };
            let a = whole.push(Entry::Marker(marker(epoch, epoch as i64)), read);
            let b = staged.push(Entry::Marker(marker(epoch, epoch as i64)), read);
            assert_eq!(a.is_some(), b.is_some(), "run {run} epoch {epoch}");
            if let (Some(a), Some(b)) = (a, b) {
                apply(&mut at_marker, &a);
                apply(&mut early, &b);
                assert_eq!(at_marker, early, "run {run} epoch {epoch}");
                assert_eq!(staged.pending(), 0);
            }
        }
    }
}

fn entries(records: &[Encoded]) -> Vec<Entry> {
    records.iter().map(|e| roundtrip(e).unwrap()).collect()
}

#[test]
fn a_batch_is_applied_only_when_its_marker_arrives() {
    let (a, b) = (chunk("d1", "alpha"), chunk("d2", "beta"));
    let mut asm = Assembler::new();
    assert_eq!(
        asm.push(roundtrip(&encode_upsert(&a, 1)).unwrap(), FRESH),
        None
    );
    assert_eq!(
        asm.push(roundtrip(&encode_upsert(&b, 1)).unwrap(), FRESH),
        None
    );
    assert_eq!(asm.pending(), 2);
    let ready = asm
        .push(Entry::Marker(marker(1, 2)), FRESH)
        .expect("the marker closes the batch");
    assert_eq!(ready.upserts, by_id(vec![a.clone(), b.clone()]));
    assert!(ready.deletes.is_empty());
    assert_eq!(ready.marker, marker(1, 2));
    assert_eq!(asm.pending(), 0);

    // A delete, then an upsert of the same id in one batch: the last record wins.
    asm.push(Entry::Delete(a.chunk_id.clone()), FRESH);
    asm.push(Entry::Upsert(Box::new(a.clone())), FRESH);
    asm.push(Entry::Delete(b.chunk_id.clone()), FRESH);
    let ready = asm.push(Entry::Marker(marker(2, 3)), FRESH).unwrap();
    assert_eq!(ready.upserts, vec![a]);
    assert_eq!(ready.deletes, vec![b.chunk_id]);
}

#[test]
fn a_batch_published_again_changes_nothing() {
    let mut rng = Rng::new(11);
    let chunks = random_chunks(&mut rng, 20);
    let mut batch: Vec<Encoded> = chunks.iter().map(|c| encode_upsert(c, 5)).collect();
    batch.extend(chunks[..5].iter().map(|c| encode_delete(&c.chunk_id, 5)));
    batch.push(encode_marker(&marker(5, 40), 1));

    let mut once = BTreeMap::new();
    let mut asm = Assembler::new();
    for e in entries(&batch) {
        if let Some(r) = asm.push(e, FRESH) {
            apply(&mut once, &r);
        }
    }
    // A pipeline that crashed after publishing replays the batch and publishes it again.
    let mut twice = once.clone();
    for e in entries(&batch) {
        if let Some(r) = asm.push(e, FRESH) {
            apply(&mut twice, &r);
        }
    }
    assert_eq!(once.len(), 15);
    assert_eq!(once, twice);
}

#[test]
fn a_possibly_compacted_stretch_is_committed_only_at_the_end_of_the_log() {
    let (a, b) = (chunk("d1", "alpha"), chunk("d2", "beta"));
    let old = Read {
        fresh: false,
        last_in_log: false,
    };
    let mut asm = Assembler::new();
    asm.push(Entry::Upsert(Box::new(a.clone())), old);
    // A marker after old records, not the last of the log: the changes wait.
    assert_eq!(asm.push(Entry::Marker(marker(1, 1)), FRESH), None);
    assert!(asm.waits_for_the_end());
    asm.push(Entry::Upsert(Box::new(b.clone())), FRESH);
    assert_eq!(asm.push(Entry::Marker(marker(2, 2)), FRESH), None);
    let end = Read {
        fresh: true,
        last_in_log: true,
    };
    let ready = asm.push(Entry::Marker(marker(3, 3)), end).unwrap();
    assert_eq!(ready.upserts, by_id(vec![a, b]));
    assert_eq!(ready.marker, marker(3, 3));
    assert!(!asm.waits_for_the_end());
    // A whole stretch commits at every marker again.
    assert!(asm.push(Entry::Marker(marker(4, 4)), FRESH).is_some());
}

#[test]
fn offsets_never_go_back() {
    let held = BTreeMap::from([("docs".to_string(), BTreeMap::from([(0, 10_i64), (1, 5)]))]);
    let older = BTreeMap::from([
        ("docs".to_string(), BTreeMap::from([(0, 8_i64), (1, 7)])),
        ("other".to_string(), BTreeMap::from([(0, 2_i64)])),
    ]);
    let got = advance(&held, &older);
    assert_eq!(got["docs"], BTreeMap::from([(0, 10), (1, 7)]));
    assert_eq!(got["other"], BTreeMap::from([(0, 2)]));
}

#[test]
fn replication_settings_are_checked() {
    let mut c = config::ReplicationConfig::default();
    assert!(!c.enabled());
    assert!(c.validate().is_ok());
    c.changelog_topic = "chunks.changelog".into();
    assert!(c.validate().is_ok());
    assert!(c
        .topic_configs()
        .contains(&("cleanup.policy", "compact".to_string())));
    c.min_compaction_lag_ms = 0;
    assert!(c.validate().unwrap_err().contains("min_compaction_lag_ms"));
    c.min_compaction_lag_ms = 10;
    c.delete_retention_ms = 5;
    assert!(c.validate().unwrap_err().contains("delete_retention_ms"));
}
