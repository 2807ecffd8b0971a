use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::lag::lag;
use super::*;

fn generation(name: &str) -> Generation {
    Generation {
        name: name.into(),
        tantivy_path: PathBuf::from(format!("/data/{name}")),
        milvus_collection: format!("chunks_{name}"),
        index_id: format!("id-{name}"),
        embedding: None,
    }
}

fn candidate(name: &str, lag: u64) -> Candidate {
    Candidate {
        generation: generation(name),
        lag,
        collection_index: Some(Some(format!("id-{name}"))),
    }
}

fn serving(name: &str) -> ServingPointer {
    ServingPointer {
        serving: generation(name),
        switched_at_ms: 1,
        previous: None,
    }
}

#[test]
fn a_generation_caught_up_and_bound_to_its_collection_may_be_switched_to() {
    check_switch(None, &candidate("b", 0), 0).unwrap();
    check_switch(Some(&serving("a")), &candidate("b", 0), 0).unwrap();
    check_switch(Some(&serving("a")), &candidate("b", 5), 5).unwrap();
}

#[test]
fn a_lagging_generation_is_refused_with_what_to_do() {
    let e = check_switch(Some(&serving("a")), &candidate("b", 6), 5).unwrap_err();
    assert!(
        e.contains("lags the topics by 6 record(s)") && e.contains("freshet reindex status"),
        "{e}"
    );
}

#[test]
fn a_generation_not_bound_to_its_collection_is_refused() {
    let mut c = candidate("b", 0);
    c.collection_index = None;
    let e = check_switch(None, &c, 0).unwrap_err();
    assert!(
        e.contains("does not exist") && e.contains("--new-index"),
        "{e}"
    );
    c.collection_index = Some(Some("id-other".into()));
    let e = check_switch(None, &c, 0).unwrap_err();
    assert!(e.contains("belongs to index id-other"), "{e}");
    c.collection_index = Some(None);
    let e = check_switch(None, &c, 0).unwrap_err();
    assert!(e.contains("belongs to index none"), "{e}");
}

#[test]
fn the_generation_served_or_its_name_reused_is_refused() {
    let e = check_switch(Some(&serving("b")), &candidate("b", 0), 0).unwrap_err();
    assert!(e.contains("already served"), "{e}");
    let mut other = candidate("b", 0);
    other.generation.milvus_collection = "chunks_b2".into();
    other.collection_index = Some(Some("id-b".into()));
    let e = check_switch(Some(&serving("b")), &other, 0).unwrap_err();
    assert!(e.contains("another name"), "{e}");
}

#[test]
fn lag_counts_every_record_past_the_commit() {
    let offsets: BTreeMap<String, BTreeMap<i32, i64>> =
        [("docs".to_string(), [(0, 10), (1, 3)].into())].into();
    let ends: BTreeMap<String, BTreeMap<i32, (i64, i64)>> = [
        (
            "docs".to_string(),
            [(0, (0, 10)), (1, (0, 7)), (2, (4, 9))].into(),
        ),
        ("other".to_string(), [(0, (2, 2))].into()),
    ]
    .into();
    // partition 1: 4 records, partition 2 (never read): from its low watermark, 5
    assert_eq!(lag(&offsets, &ends), 9);
    let done: BTreeMap<String, BTreeMap<i32, i64>> =
        [("docs".to_string(), [(0, 10), (1, 7), (2, 9)].into())].into();
    assert_eq!(lag(&done, &ends), 0);
}

#[test]
fn the_history_lies_beside_the_pointer() {
    assert_eq!(
        history_path(Path::new("/srv/freshet/serving.json")),
        Path::new("/srv/freshet/serving.json.history.jsonl")
    );
}

#[test]
fn only_a_passed_verdict_of_the_same_index_opens_the_gate() {
    let passed = serde_json::json!({"passed": true, "index_id": "id-b", "reasons": []});
    gate::check(&passed, "id-b").unwrap();
    let e = gate::check(&passed, "id-c").unwrap_err();
    assert!(
        e.contains("scored index id-b") && e.contains("freshet-tools gate"),
        "{e}"
    );
    let failed = serde_json::json!({"passed": false, "index_id": "id-b",
                                    "reasons": ["nDCG@10 0.3 is below the floor 0.5"]});
    let e = gate::check(&failed, "id-b").unwrap_err();
    assert!(
        e.contains("gate failed") && e.contains("below the floor"),
        "{e}"
    );
    let e = gate::check(&serde_json::json!({}), "id-b").unwrap_err();
    assert!(e.contains("scored index none"), "{e}");
}

#[test]
fn only_a_generation_nothing_can_serve_is_retired() {
    let mut p = serving("b");
    p.previous = Some(generation("a"));
    let e = super::retire::check(None, &generation("c"), None).unwrap_err();
    assert!(e.contains("no serving pointer"), "{e}");
    let e = super::retire::check(Some(&p), &generation("b"), None).unwrap_err();
    assert!(e.contains("which is served"), "{e}");
    let e = super::retire::check(Some(&p), &generation("a"), None).unwrap_err();
    assert!(e.contains("rollback target"), "{e}");
    // The same collection under another path is the same generation.
    let mut c = generation("c");
    c.milvus_collection = "chunks_a".into();
    let e = super::retire::check(Some(&p), &c, None).unwrap_err();
    assert!(e.contains("rollback target"), "{e}");
    let e = super::retire::check(Some(&p), &generation("c"), Some("chunks_c")).unwrap_err();
    assert!(e.contains("alias"), "{e}");
    super::retire::check(Some(&p), &generation("c"), Some("chunks_b")).unwrap();
}

#[test]
fn the_pointer_records_the_query_model_with_absolute_paths_and_no_key() {
    let e = freshet_embedding::EmbeddingConfig {
        model_dir: PathBuf::from("models/e5"),
        api_key_env: "EMBED_KEY".into(),
        threads: Some(3),
        query_prefix: Some("query: ".into()),
        ..freshet_embedding::EmbeddingConfig::default()
    };
    let v = query_model(&e).unwrap();
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(
        v["model_dir"],
        cwd.join("models/e5").display().to_string(),
        "{v}"
    );
    assert_eq!(v["query_prefix"], "query: ");
    // the key's variable, never a key; the node's own threads
    assert_eq!(v["api_key_env"], "EMBED_KEY");
    assert!(v["threads"].is_null(), "{v}");
    // what the node reads back is the pipeline's model
    let back: freshet_embedding::EmbeddingConfig = serde_json::from_value(v).unwrap();
    assert_eq!(back.model_dir, cwd.join("models/e5"));
    assert_eq!(back.query_prefix, e.query_prefix);
}
