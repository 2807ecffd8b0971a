//! The quarantine's lookup: by place and by bytes.

use super::*;

fn at(offset: i64) -> RecordAt {
    RecordAt {
        topic: "documents".into(),
        partition: 1,
        offset,
    }
}

/// A quarantined record is held by its place and its bytes: the same place with other bytes (a
/// topic deleted and created again) is not.
#[test]
fn held_by_place_and_bytes() {
    let key = Some(&b"doc"[..]);
    let value = Some(&b"{\"text\":\"x\"}"[..]);
    let q = Quarantine {
        held: HashMap::from([
            (at(4), (Some(fingerprint(key, value)), 3)),
            (at(9), (None, 5)),
        ]),
    };
    assert_eq!(q.crashes(&at(4), key, value), Some(3));
    assert_eq!(q.crashes(&at(4), key, Some(&b"{}"[..])), None);
    assert_eq!(q.crashes(&at(5), key, value), None);
    assert_eq!(q.crashes(&at(9), None, None), Some(5));
    // the key and the value are told apart
    assert_ne!(
        fingerprint(Some(b"ab"), Some(b"c")),
        fingerprint(Some(b"a"), Some(b"bc"))
    );
    assert_ne!(fingerprint(None, Some(b"")), fingerprint(Some(b""), None));
}

#[test]
fn files_lie_beside_the_cache() {
    let (slots, ledger) = paths(Path::new("/c/embeddings.p1.log"));
    assert_eq!(slots, Path::new("/c/embeddings.p1.inflight"));
    assert_eq!(ledger, Path::new("/c/embeddings.p1.crashes.json"));
}

/// The bookkeeping over runs, on the files: two workers die with a record each in flight; at the
/// next start both are suspects; the innocent one is prepared alone and comes through (it
/// leaves the ledger), the one at fault is prepared alone (the trial slot) and dies again; a
/// start that dies before its trials counts nothing twice; the third crash quarantines the
/// record at fault, which then stays through clean runs until its offset is durable.
#[test]
fn crashes_are_counted_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (inflight, ledger_path) = paths(&dir.path().join("embeddings.log"));
    let never = |_: &RecordAt| false;
    let count = |durable: &dyn Fn(&RecordAt) -> bool| {
        count_last_run(&inflight, &ledger_path, 3, 3, durable).unwrap()
    };
    let held = |l: &Ledger| -> Vec<(i64, u32)> {
        l.records.iter().map(|e| (e.at.offset, e.crashes)).collect()
    };
    // run 1: worker 1 prepared offset 2; worker 0 prepares offset 7 (the killer) while worker 1
    // prepares offset 3 when the process dies
    let (l, run1) = count(&never);
    assert!(held(&l).is_empty());
    run1.slot(1).mark(&at(2));
    run1.slot(1).clear();
    run1.slot(0).mark(&at(7));
    run1.slot(1).mark(&at(3));
    drop(run1); // nothing is cleared
                // run 2: both suspects; 3 comes through alone and leaves; 7 dies alone in the trial slot
    let (mut l, run2) = count(&never);
    assert_eq!(held(&l), [(3, 1), (7, 1)]);
    l.records.retain(|e| e.at.offset != 3);
    l.save(&ledger_path).unwrap();
    run2.slot(2).mark(&at(7));
    drop(run2);
    let (l, run3) = count(&never);
    assert_eq!(held(&l), [(7, 2)]);
    // a start that dies before its trials: nothing counts twice, nothing is lost
    drop(run3);
    let (l, run4) = count(&never);
    assert_eq!(held(&l), [(7, 2)]);
    run4.slot(2).mark(&at(7));
    drop(run4);
    let (l, run5) = count(&never);
    assert_eq!(held(&l), [(7, 3)]);
    // quarantined: it stays through a clean run and a crash elsewhere
    drop(run5);
    let (_, run6) = count(&never);
    run6.slot(0).mark(&at(12));
    drop(run6);
    let (l, _run7) = count(&never);
    assert_eq!(held(&l), [(7, 3), (12, 1)]);
    // once the durable offsets are past them, they are gone
    let (l, _run8) = count(&|a: &RecordAt| a.offset < 13);
    assert!(held(&l).is_empty());
    assert!(Ledger::load(&ledger_path).unwrap().records.is_empty());
}
