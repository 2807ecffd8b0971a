//! The pipeline and the query node against milvus-lite 3.2.2, whose API follows Milvus 3.x
//! (`deploy/test.sh` starts it next to the standalone Milvus 2.3.5 the other tests use and sets
//! `FRESHET_MILVUS_LITE_URL`). Users run newer servers than the default local one: this keeps
//! the Milvus code honest against both.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;
use freshet_operators::chunk::ChunkKind;
use freshet_tests::{env, expected_chunks, ids, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);

type Log = Vec<(String, Option<Vec<u8>>)>;

fn publish(case: &mut Case, log: &mut Log, id: &str, value: Option<Value>) -> Result<()> {
    let bytes = value.map(|v| serde_json::to_vec(&v)).transpose()?;
    case.send(id, bytes.as_deref())?;
    log.push((id.to_string(), bytes));
    Ok(())
}

fn doc(id: &str, text: &str, lang: &str, acl: &[&str]) -> Value {
    json!({"op": "upsert", "id": id, "title": format!("Title {id}"), "text": text,
           "content_type": "text/plain", "source": format!("test://{id}"),
           "metadata": {"lang": lang}, "acl": acl})
}

/// tantivy holds exactly the expected chunks and lite exactly their leaf ids.
fn assert_exact(case: &Case, log: &Log) -> Result<BTreeSet<String>> {
    let expected = expected_chunks(log)?;
    let in_tantivy = ids(&case.tantivy_chunks()?);
    assert_eq!(
        in_tantivy,
        expected.keys().cloned().collect::<BTreeSet<_>>()
    );
    let leaves: BTreeSet<String> = expected
        .values()
        .filter(|c| c.kind == ChunkKind::Leaf)
        .map(|c| c.chunk_id.clone())
        .collect();
    let in_milvus = case.milvus_ids()?;
    assert_eq!(in_milvus.len(), leaves.len(), "no duplicate ids in lite");
    assert_eq!(in_milvus.into_iter().collect::<BTreeSet<_>>(), leaves);
    Ok(leaves)
}

#[test]
fn pipeline_and_query_node_on_milvus_lite() -> Result<()> {
    let mut case = Case::new("lite", 2)?;
    case.milvus_url = env("FRESHET_MILVUS_LITE_URL");
    let mut log: Log = Vec::new();
    let texts = [
        (
            "glacier",
            "Glaciers retreat as summer melt outpaces winter snowfall.",
            "en",
            vec![],
        ),
        (
            "comet",
            "Comets grow icy tails of gas and dust near the sun.",
            "en",
            vec![],
        ),
        (
            "volcan",
            "Les volcans rejettent de la lave et des cendres.",
            "fr",
            vec![],
        ),
        (
            "secret",
            "Secret glacier survey notes for the survey team.",
            "en",
            vec!["group:survey"],
        ),
    ];
    for (id, text, lang, acl) in &texts {
        publish(&mut case, &mut log, id, Some(doc(id, text, lang, acl)))?;
    }
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    let first = assert_exact(&case, &log)?;

    // The requests name their principals: a node behind an authenticating proxy.
    let node = case.start_query(&[("FRESHET_QUERY_TRUST_REQUEST_PRINCIPALS", "true".into())])?;
    node.wait_ready(Duration::from_secs(60))?;
    for mode in ["vector", "hybrid", "bm25"] {
        let got = node.doc_ids(&json!({"query": "glacier melt", "mode": mode, "k": 4}))?;
        assert_eq!(
            got.first().map(String::as_str),
            Some("glacier"),
            "{mode}: {got:?}"
        );
        assert!(
            !got.contains(&"secret".to_string()),
            "{mode}: no principal, no secret"
        );
        let got = node.doc_ids(&json!({"query": "glacier survey", "mode": mode, "k": 4,
            "principals": ["group:survey"]}))?;
        assert_eq!(
            got.first().map(String::as_str),
            Some("secret"),
            "{mode}: {got:?}"
        );
        // Metadata filters run inside lite's search (equality and `in`).
        let got = node.doc_ids(
            &json!({"query": "volcans lave cendres", "mode": mode, "k": 4,
            "filter": {"lang": "fr"}}),
        )?;
        assert_eq!(got, ["volcan"], "{mode}");
        let got = node.doc_ids(&json!({"query": "icy tails", "mode": mode, "k": 4,
            "filter": {"lang": {"in": ["de", "en"]}}}))?;
        assert!(
            got.contains(&"comet".to_string()) && !got.contains(&"volcan".to_string()),
            "{mode}: {got:?}"
        );
    }

    // Update one document, delete one by tombstone: both indexes follow, and so does the node.
    publish(
        &mut case,
        &mut log,
        "comet",
        Some(doc(
            "comet",
            "Asteroids are rocky bodies of the inner solar system.",
            "en",
            &[],
        )),
    )?;
    publish(&mut case, &mut log, "glacier", None)?;
    case.wait_indexed(WAIT)?;
    let second = assert_exact(&case, &log)?;
    assert!(
        first.difference(&second).count() >= 2,
        "old chunk ids are gone"
    );
    for mode in ["vector", "hybrid"] {
        node.wait_for(
            &json!({"query": "rocky asteroids", "mode": mode, "k": 4}),
            Duration::from_secs(30),
            |ids| ids.first().map(String::as_str) == Some("comet"),
        )?;
        let got = node.doc_ids(&json!({"query": "glacier melt", "mode": mode, "k": 4}))?;
        assert!(
            !got.contains(&"glacier".to_string()),
            "{mode}: deleted: {got:?}"
        );
    }

    // SIGKILL and restart: lite converges with tantivy, nothing duplicated.
    case.kill_pipeline()?;
    publish(
        &mut case,
        &mut log,
        "volcan",
        Some(json!({"op": "delete", "id": "volcan"})),
    )?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    assert_exact(&case, &log)?;
    case.stop_pipeline()?;
    Ok(())
}
