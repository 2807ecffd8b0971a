//! Deletes you can prove, through the real broker, pipeline, Milvus and model: a record delete,
//! a refused record that names an indexed document, and a delete of a document never indexed
//! each get a delete receipt, recorded with the commit that made the removal durable, which the
//! query node serves at `GET /v1/deletes` to admin keys only. Each receipt names the record
//! (topic, partition, offset), the commit (opstamp, epoch) and the chunks removed; at that
//! commit neither index holds the document. A restart keeps the receipts, none twice, and a
//! document indexed again after its receipt shows in `chunks_now`.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use freshet_tantivy::ChunkIndexReader;
use freshet_tests::query::QueryNode;
use freshet_tests::Case;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
const ADMIN: &str = "admin-key";
const USER: &str = "user-key";

fn doc(text: &str) -> Value {
    json!({"title": "Note", "text": text, "content_type": "text/markdown"})
}

fn receipts(node: &QueryNode, query: &str, key: Option<&str>) -> Result<(u16, String)> {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    let r = freshet_tests::query::request(
        &node.addr,
        "GET",
        &format!("/v1/deletes{query}"),
        &headers,
        b"",
    )?;
    Ok((r.status, r.body))
}

/// Waits until the node serves `n` receipts (it reloads the index on its own schedule).
fn wait_receipts(node: &QueryNode, n: usize) -> Result<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, body) = receipts(node, "", Some(ADMIN))?;
        ensure!(status == 200, "{status}: {body}");
        let v: Value = serde_json::from_str(&body)?;
        let got = v["receipts"].as_array().map_or(0, Vec::len);
        if got == n {
            return Ok(v);
        }
        if got > n || Instant::now() > deadline {
            bail!("{got} receipts, expected {n}: {body}\n{}", node.log_tail());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn by_doc<'a>(v: &'a Value, doc: &str) -> Result<&'a Value> {
    v["receipts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["doc_id"] == doc)
        .with_context(|| format!("no receipt for {doc}: {v}"))
}

#[test]
fn deletes_refusals_and_unknown_ids_have_receipts_served_to_admins_only() -> Result<()> {
    let mut case = Case::new("deletes", 1)?;
    let long = "Rivers carry sediment to the sea. ".repeat(40);
    case.send_json("gone.md", &doc(&long))?;
    case.send_json(
        "refused.md",
        &doc("Estuaries mix fresh water and salt water."),
    )?;
    case.send_json("kept.md", &doc("Deltas form where rivers slow down."))?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    let chunks = case.tantivy_chunks()?;
    let held = |d: &str| chunks.iter().filter(|c| c.doc_id == d).count() as u64;
    let (gone_chunks, refused_chunks) = (held("gone.md"), held("refused.md"));
    ensure!(gone_chunks >= 1 && refused_chunks >= 1, "{chunks:?}");
    let ids_of = |d: &str| -> Vec<String> {
        chunks
            .iter()
            .filter(|c| c.doc_id == d)
            .map(|c| c.chunk_id.clone())
            .collect()
    };
    let doomed: Vec<String> = [ids_of("gone.md"), ids_of("refused.md")].concat();
    let milvus = case.milvus_ids()?;
    ensure!(
        doomed.iter().any(|id| milvus.contains(id)),
        "in Milvus first"
    );

    // A tombstone, a record that cannot be decoded naming an indexed document, and a delete of
    // a document the index never held.
    let (p_gone, o_gone) = case.send_at("gone.md", None)?;
    let (p_bad, o_bad) = case.send_at("refused.md", Some(b"{not json"))?;
    let (p_never, o_never) = case.send_at("never.md", None)?;
    case.wait_indexed(WAIT)?;

    let keys = ("FRESHET_QUERY_API_KEYS", format!(r#"["{USER}"]"#));
    let admin = ("FRESHET_QUERY_ADMIN_KEYS", format!(r#"["{ADMIN}"]"#));
    let node = case.start_query(&[keys.clone(), admin.clone()])?;
    node.wait_ready(WAIT)?;
    let v = wait_receipts(&node, 3)?;
    let topic = case.kafka.topic.clone();
    for (d, cause, class, p, o, removed) in [
        ("gone.md", "delete", None, p_gone, o_gone, gone_chunks),
        (
            "refused.md",
            "refused",
            Some("malformed_json"),
            p_bad,
            o_bad,
            refused_chunks,
        ),
        ("never.md", "delete", None, p_never, o_never, 0),
    ] {
        let r = by_doc(&v, d)?;
        ensure!(r["cause"] == cause, "{r}");
        ensure!(r["class"].as_str() == class, "{r}");
        ensure!(
            r["source"] == json!({"topic": topic, "partition": p, "offset": o}),
            "{r}"
        );
        ensure!(r["chunks_removed"] == removed, "{r}");
        ensure!(r["chunks_now"] == 0, "{r}");
        ensure!(r["commit"]["opstamp"].as_u64().unwrap_or(0) > 0, "{r}");
        let (done, asked) = (
            r["completed_at_ms"].as_i64(),
            r["source_timestamp_ms"].as_i64(),
        );
        ensure!(matches!((done, asked), (Some(d), Some(a)) if d >= a), "{r}");
    }

    // Neither index holds the removed documents: the commit the receipts name (or a later one)
    // holds none of their chunks, and Milvus none of their rows.
    let reader = ChunkIndexReader::open_manual(case.tantivy_path())?;
    let snapshot = reader.reload()?;
    let served = snapshot
        .payload()
        .and_then(|p| p.opstamp)
        .context("opstamp")?;
    for d in ["gone.md", "refused.md", "never.md"] {
        let r = by_doc(&v, d)?;
        ensure!(r["commit"]["opstamp"].as_u64().unwrap_or(u64::MAX) <= served);
        ensure!(
            snapshot.chunks_of_doc(d)?.is_empty(),
            "{d} still in tantivy"
        );
    }
    let milvus = case.milvus_ids()?;
    let left: Vec<&String> = doomed.iter().filter(|id| milvus.contains(id)).collect();
    ensure!(left.is_empty(), "still in Milvus: {left:?}");
    ensure!(!snapshot.chunks_of_doc("kept.md")?.is_empty());

    // Filters and pages.
    let (s, body) = receipts(&node, "?doc_id=gone.md", Some(ADMIN))?;
    let one: Value = serde_json::from_str(&body)?;
    ensure!(
        s == 200 && one["receipts"].as_array().map(Vec::len) == Some(1),
        "{body}"
    );
    let (_, body) = receipts(&node, "?limit=2", Some(ADMIN))?;
    let page: Value = serde_json::from_str(&body)?;
    let next = page["next_after"]
        .as_u64()
        .context("a full page has next_after")?;
    let (_, body) = receipts(&node, &format!("?after={next}"), Some(ADMIN))?;
    let rest: Value = serde_json::from_str(&body)?;
    ensure!(
        rest["receipts"].as_array().map(Vec::len) == Some(1),
        "{body}"
    );

    // Admin keys only: an ordinary key is refused (403), no key or a wrong one is not known
    // (401), and no answer but the admin's names a document.
    for (key, want) in [(Some(USER), 403), (None, 401), (Some("nope"), 401)] {
        let (s, body) = receipts(&node, "", key)?;
        ensure!(s == want, "{key:?}: {s} {body}");
        ensure!(
            !body.contains("gone.md") && !body.contains("never.md"),
            "{body}"
        );
    }
    drop(node);
    // A node without admin keys refuses the route to everyone.
    let open = case.start_query(std::slice::from_ref(&keys))?;
    let (s, body) = receipts(&open, "", Some(USER))?;
    ensure!(s == 403 && !body.contains("gone.md"), "{s} {body}");
    drop(open);

    // Delete to gone: one observation per receipt whose record had a timestamp.
    let m = case.metrics()?;
    let count = m
        .get("freshet_pipeline_delete_to_gone_seconds_count")
        .copied();
    ensure!(count == Some(3.0), "{count:?}");
    let cause = |c: &str| {
        m.get(&format!(
            "freshet_pipeline_delete_receipts_total{{cause=\"{c}\"}}"
        ))
        .copied()
    };
    ensure!(
        cause("delete") == Some(2.0) && cause("refused") == Some(1.0),
        "{m:?}"
    );

    // A restart keeps every receipt, none twice; the deleted document indexed again shows in
    // its receipt's chunks_now.
    case.stop_pipeline()?;
    case.start_pipeline()?;
    case.send_json("gone.md", &doc("Back again, shorter."))?;
    case.wait_indexed(WAIT)?;
    let node = case.start_query(&[keys, admin])?;
    node.wait_ready(WAIT)?;
    let deadline = Instant::now() + WAIT;
    loop {
        let v = wait_receipts(&node, 3)?;
        if by_doc(&v, "gone.md")?["chunks_now"].as_u64() > Some(0) {
            ensure!(by_doc(&v, "never.md")?["chunks_now"] == 0);
            break;
        }
        ensure!(Instant::now() < deadline, "gone.md never came back: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}
