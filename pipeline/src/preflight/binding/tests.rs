use std::path::Path;

use super::*;

const PATH: &str = "/srv/freshet/index/tantivy";

fn new_index() -> IndexState {
    IndexState {
        committed: false,
        chunks: 0,
        index_id: None,
    }
}

fn index(id: Option<&str>, chunks: u64) -> IndexState {
    IndexState {
        committed: true,
        chunks,
        index_id: id.map(str::to_string),
    }
}

fn coll(id: Option<&str>, path: Option<&str>, rows: u64) -> Binding {
    Binding {
        index_id: id.map(str::to_string),
        index_path: path.map(str::to_string),
        rows,
    }
}

fn group() -> Vec<GroupProgress> {
    vec![GroupProgress {
        topic: "documents".into(),
        partition: 2,
        committed: 40,
        low: 0,
    }]
}

const NEW: BindFlags = BindFlags {
    new_index: true,
    adopt_collection: false,
};
const ADOPT: BindFlags = BindFlags {
    new_index: false,
    adopt_collection: true,
};

fn run(
    i: &IndexState,
    c: Option<&Binding>,
    g: &[GroupProgress],
    f: BindFlags,
) -> Result<Decision, String> {
    decide(Path::new(PATH), i, c, g, f, || "fresh".to_string())
}

#[test]
fn a_first_start_creates_a_bound_collection_and_reads_from_the_beginning() {
    let d = run(&new_index(), None, &[], BindFlags::default()).unwrap();
    assert_eq!(
        d,
        Decision {
            index_id: "fresh".into(),
            write_id: true,
            from_beginning: true,
            collection: CollectionStep::Create,
            reconcile_unbounded: false,
        }
    );
    // an empty collection (left by a start that stopped early) is simply bound
    let empty = coll(Some("other"), Some("/elsewhere"), 0);
    let d = run(&new_index(), Some(&empty), &[], BindFlags::default()).unwrap();
    assert_eq!(
        (d.collection, d.from_beginning),
        (CollectionStep::Bind, true)
    );
}

/// The measured incident: an empty index path beside a collection of 25 vectors.
#[test]
fn a_new_index_beside_a_collection_with_vectors_is_refused_with_what_to_do() {
    let full = coll(
        Some("idx-1"),
        Some("/home/u/.freshet/run/index/tantivy"),
        25,
    );
    let e = run(&new_index(), Some(&full), &[], BindFlags::default()).unwrap_err();
    for part in [
        PATH,
        "25 vectors",
        "idx-1",
        "/home/u/.freshet/run/index/tantivy",
        "FRESHET_TANTIVY_PATH",
        "--new-index",
    ] {
        assert!(e.contains(part), "{part:?} missing from: {e}");
    }
    // a collection from before ids existed is no different
    let legacy = coll(None, None, 25);
    let e = run(&new_index(), Some(&legacy), &[], BindFlags::default()).unwrap_err();
    assert!(e.contains("bound to no index"), "{e}");
}

#[test]
fn a_new_index_behind_the_group_is_refused() {
    let e = run(&new_index(), None, &group(), BindFlags::default()).unwrap_err();
    for part in [
        "consumer group",
        "documents: partition 2 at offset 40",
        "--new-index",
    ] {
        assert!(e.contains(part), "{part:?} missing from: {e}");
    }
}

#[test]
fn new_index_on_purpose_takes_the_collection_over_and_reads_everything() {
    let full = coll(Some("idx-1"), Some("/old"), 25);
    let d = run(&new_index(), Some(&full), &group(), NEW).unwrap();
    assert_eq!(
        d,
        Decision {
            index_id: "fresh".into(),
            write_id: true,
            from_beginning: true,
            collection: CollectionStep::Bind,
            reconcile_unbounded: true,
        }
    );
    let d = run(&new_index(), None, &[], NEW).unwrap();
    assert_eq!(d.collection, CollectionStep::Create);
}

#[test]
fn the_flags_are_refused_where_they_do_not_apply() {
    let e = run(&index(Some("idx-1"), 10), None, &[], NEW).unwrap_err();
    assert!(e.contains("not new") && e.contains("10 chunks"), "{e}");
    let e = run(&new_index(), None, &[], ADOPT).unwrap_err();
    assert!(e.contains("--new-index"), "{e}");
}

#[test]
fn a_bound_pair_starts_as_it_is() {
    let c = coll(Some("idx-1"), Some(PATH), 25);
    let d = run(
        &index(Some("idx-1"), 30),
        Some(&c),
        &group(),
        BindFlags::default(),
    )
    .unwrap();
    assert_eq!(
        d,
        Decision {
            index_id: "idx-1".into(),
            write_id: false,
            from_beginning: false,
            collection: CollectionStep::Keep,
            reconcile_unbounded: false,
        }
    );
    // a committed index with no chunks left is not new: its collection is reconciled
    let d = run(
        &index(Some("idx-1"), 0),
        Some(&c),
        &group(),
        BindFlags::default(),
    )
    .unwrap();
    assert_eq!(d.collection, CollectionStep::Keep);
    // a dropped collection is created again and filled from the index
    let d = run(&index(Some("idx-1"), 30), None, &[], BindFlags::default()).unwrap();
    assert_eq!((d.collection, d.write_id), (CollectionStep::Create, false));
}

#[test]
fn a_collection_of_another_index_is_refused_unless_adopted() {
    let other = coll(Some("idx-2"), Some("/elsewhere"), 25);
    let e = run(
        &index(Some("idx-1"), 30),
        Some(&other),
        &[],
        BindFlags::default(),
    )
    .unwrap_err();
    for part in [
        "25 vectors",
        "idx-2",
        "/elsewhere",
        "idx-1",
        "--adopt-collection",
    ] {
        assert!(e.contains(part), "{part:?} missing from: {e}");
    }
    let d = run(&index(Some("idx-1"), 30), Some(&other), &[], ADOPT).unwrap();
    assert_eq!(
        (d.collection, d.reconcile_unbounded, d.index_id.as_str()),
        (CollectionStep::Bind, true, "idx-1")
    );
    // an unbound collection beside a bound index is another collection too
    let unbound = coll(None, None, 25);
    assert!(run(
        &index(Some("idx-1"), 30),
        Some(&unbound),
        &[],
        BindFlags::default()
    )
    .is_err());
    // an empty one has nothing to lose
    let empty = coll(Some("idx-2"), None, 0);
    let d = run(
        &index(Some("idx-1"), 30),
        Some(&empty),
        &[],
        BindFlags::default(),
    )
    .unwrap();
    assert_eq!(d.collection, CollectionStep::Bind);
}

/// Index and collection made before ids existed are bound on their first start.
#[test]
fn an_index_from_before_ids_is_bound() {
    let unbound = coll(None, None, 25);
    let d = run(&index(None, 30), Some(&unbound), &[], BindFlags::default()).unwrap();
    assert_eq!(
        d,
        Decision {
            index_id: "fresh".into(),
            write_id: true,
            from_beginning: false,
            collection: CollectionStep::Bind,
            reconcile_unbounded: false,
        }
    );
    // a start that bound the collection and stopped before writing the index: the index
    // takes the collection's id
    let half = coll(Some("idx-9"), Some(PATH), 25);
    let d = run(&index(None, 30), Some(&half), &[], BindFlags::default()).unwrap();
    assert_eq!(
        (d.index_id.as_str(), d.write_id, d.collection),
        ("idx-9", true, CollectionStep::Keep)
    );
    // bound to an index elsewhere: not this one's
    let elsewhere = coll(Some("idx-9"), Some("/elsewhere"), 25);
    assert!(run(
        &index(None, 30),
        Some(&elsewhere),
        &[],
        BindFlags::default()
    )
    .is_err());
}
