//! Every chunk returned passes the ACL, while ACL edits land: two documents flip between public
//! and restricted (each version's text marked as its own) through the real pipeline, Milvus and
//! query node, while a few threads query them with `expand` and `parents` as a caller without
//! the restricted principal. No answer may carry, anywhere (results, merged passages, parents,
//! matched children, packed context), a chunk of a restricted version.
//!
//! `FRESHET_ACL_RACE_VERSIONS` (default 160) sets the number of versions published.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure, Result};
use freshet_operators::chunk::{ChunkStrategy, ChunkerConfig, HfTokenCounter};
use freshet_operators::intake::intake;
use freshet_operators::limits::RecordLimits;
use freshet_tests::{env, Case, RIVER_WORDS};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(240);
const SECRET: &str = "group:secret";
/// Markdown (heading-aware chunks: expansion) and plain text (parent-child: parents).
const DOCS: [(&str, &str); 2] = [("notes", "text/markdown"), ("manual", "text/plain")];

/// Version `v` of document `id`: every paragraph names the version, so every chunk (parents
/// included) of one version differs from those of every other. Restricted versions are
/// shorter, by a varying number of paragraphs, so that a hit's neighbours in the next version
/// may or may not include its own position.
fn version(id: &str, content_type: &str, v: usize) -> Value {
    let restricted = !v.is_multiple_of(2);
    let marker = if restricted {
        format!("secret{v}")
    } else {
        format!("open{v}")
    };
    let paragraphs = if restricted { 4 + (v / 2) % 5 } else { 9 };
    let mut text = String::new();
    for p in 0..paragraphs {
        if content_type == "text/markdown" && p % 3 == 0 {
            text.push_str(&format!("## Part {}\n\n", p / 3));
        }
        let filler: Vec<&str> = (0..60)
            .map(|i| RIVER_WORDS[(p * 7 + i * 3) % RIVER_WORDS.len()])
            .collect();
        text.push_str(&format!(
            "Heron report {marker} paragraph {p}: herons wait at the estuary when the tide \
             turns, {marker}. {}.\n\n",
            filler.join(" ")
        ));
    }
    let acl = if restricted {
        json!([SECRET])
    } else {
        json!("public")
    };
    json!({"op": "upsert", "id": id, "title": format!("Heron {id}"), "text": text,
           "content_type": content_type, "source": format!("test://{id}"), "acl": acl})
}

/// The chunk ids a version indexes, with the pipeline's chunking of this case.
fn chunk_ids(id: &str, value: &Value, tokens: &HfTokenCounter) -> Result<BTreeSet<String>> {
    let cfg = ChunkerConfig {
        strategy: ChunkStrategy::ParentChild,
        ..ChunkerConfig::default()
    };
    let bytes = serde_json::to_vec(value)?;
    match intake(
        Some(id.as_bytes()),
        Some(&bytes),
        &RecordLimits::default(),
        &cfg,
        tokens,
    )
    .update()
    {
        Some((_, Some(chunks))) => Ok(chunks.into_iter().map(|c| c.chunk_id).collect()),
        other => Err(anyhow!("version of {id} not indexable: {other:?}")),
    }
}

/// The version markers (`open12`, `secret13`) in a text.
fn markers(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| {
            ["open", "secret"].iter().any(|p| {
                w.strip_prefix(p)
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .map(str::to_owned)
        .collect()
}

/// What one answer carries that a public-only caller may not see (chunk ids of restricted
/// versions, texts naming one), and chunks of two versions of one document in one answer (an
/// answer made of two commits).
fn violations(answer: &Value, restricted: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    let results = answer["results"].as_array().cloned().unwrap_or_default();
    let mut versions: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for h in &results {
        let doc = h["doc_id"].as_str().unwrap_or_default();
        versions
            .entry(doc)
            .or_default()
            .extend(markers(h["text"].as_str().unwrap_or_default()));
        let mut ids: Vec<&str> = vec![h["chunk_id"].as_str().unwrap_or_default()];
        ids.extend(h["parent_id"].as_str());
        for list in ["passage_chunk_ids", "matched_children"] {
            ids.extend(
                h[list]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str),
            );
        }
        for id in ids {
            if restricted.contains(id) {
                out.push(format!("chunk {id} of a restricted version in {h}"));
            }
        }
        let text = h["text"].as_str().unwrap_or_default();
        if text.contains("secret") {
            out.push(format!("restricted text in result {}", h["chunk_id"]));
        }
    }
    if answer["context"]
        .as_str()
        .unwrap_or_default()
        .contains("secret")
    {
        out.push("restricted text in the packed context".into());
    }
    for (doc, seen) in versions {
        if seen.len() > 1 {
            out.push(format!("{doc} in versions {seen:?} in one answer"));
        }
    }
    out
}

#[derive(Default)]
struct Tally {
    answers: usize,
    with_flipping_docs: usize,
    /// Non-200 answers by status.
    errors: BTreeMap<u16, usize>,
    /// Requests the node dropped without an answer (a crashed handler).
    dropped: Vec<String>,
    violations: Vec<String>,
}

#[test]
fn no_restricted_chunk_is_returned_while_acls_flip() -> Result<()> {
    let versions: usize = std::env::var("FRESHET_ACL_RACE_VERSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(160);
    let mut case = Case::new("acl_race", 1)?;
    case.extra_env.push((
        "FRESHET_CHUNKING_PER_CONTENT_TYPE".into(),
        r#"{"text/plain" = "parent_child", "text/markdown" = "markdown"}"#.into(),
    ));
    let tokens =
        HfTokenCounter::from_file(Path::new(&env("FRESHET_MODEL_DIR")).join("tokenizer.json"))
            .map_err(|e| anyhow!("{e}"))?;
    // The ids of every restricted version (and, to be sure the check can tell, of the public
    // ones: they must not overlap).
    let (mut restricted, mut public) = (BTreeSet::new(), BTreeSet::new());
    for v in 0..versions {
        for (id, ct) in DOCS {
            let ids = chunk_ids(id, &version(id, ct, v), &tokens)?;
            if !v.is_multiple_of(2) {
                restricted.extend(ids);
            } else {
                public.extend(ids);
            }
        }
    }
    ensure!(restricted.is_disjoint(&public), "versions share chunk ids");
    // a public neighbour that never changes
    case.send_json(
        "steady",
        &json!({"op": "upsert", "id": "steady", "text": "Herons and the tide at the estuary.",
                "acl": "public"}),
    )?;
    for (id, ct) in DOCS {
        case.send_json(id, &version(id, ct, 0))?;
    }
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    // The requests name their principals (a node behind an authenticating proxy); no query
    // vector cache, so that every hybrid request embeds its query between its two searches.
    let node = Arc::new(case.start_query(&[
        ("FRESHET_QUERY_TRUST_REQUEST_PRINCIPALS", "true".into()),
        ("FRESHET_QUERY_QUERY_CACHE_ENTRIES", "0".into()),
    ])?);
    node.wait_ready(Duration::from_secs(60))?;
    node.wait_for(
        &json!({"query": "heron estuary tide", "mode": "vector", "k": 10, "principals": []}),
        WAIT,
        |ids| ids.iter().any(|d| d == "notes") && ids.iter().any(|d| d == "manual"),
    )?;

    let restricted = Arc::new(restricted);
    let done = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let bodies = [
        json!({"mode": "hybrid", "expand": {"top_m": 5, "window": 2}}),
        json!({"mode": "hybrid", "parents": true}),
        json!({"mode": "bm25", "expand": {"top_m": 5, "window": 2},
               "pack": {"budget_tokens": 4000}}),
        json!({"mode": "vector", "parents": true}),
        json!({"mode": "vector", "expand": {"top_m": 5, "window": 2}}),
    ];
    let queries = [
        "heron estuary tide",
        "herons wait when the tide turns",
        "estuary report",
    ];
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let (node, done, tally, restricted) = (
                node.clone(),
                done.clone(),
                tally.clone(),
                restricted.clone(),
            );
            let bodies = bodies.clone();
            std::thread::spawn(move || {
                let mut i = w;
                while !done.load(Ordering::Relaxed) {
                    let mut body = bodies[i % bodies.len()].clone();
                    body["query"] = json!(queries[i % queries.len()]);
                    body["k"] = json!(10);
                    body["principals"] = json!([]);
                    i += 1;
                    let reply = match node.post("/v1/retrieve", &body) {
                        Ok(r) => r,
                        Err(e) => {
                            tally.lock().unwrap().dropped.push(format!("{body}: {e}"));
                            continue;
                        }
                    };
                    let mut t = tally.lock().unwrap();
                    if reply.status != 200 {
                        *t.errors.entry(reply.status).or_default() += 1;
                        continue;
                    }
                    let Ok(answer) = reply.json() else {
                        t.violations.push(format!("not JSON: {}", reply.body));
                        continue;
                    };
                    t.answers += 1;
                    if answer["results"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|h| h["doc_id"] == "notes" || h["doc_id"] == "manual")
                    {
                        t.with_flipping_docs += 1;
                    }
                    for v in violations(&answer, &restricted) {
                        t.violations.push(format!("{body}: {v}"));
                    }
                }
            })
        })
        .collect();

    // Flip: public, restricted, public, ... as fast as the pipeline takes them.
    let started = Instant::now();
    for v in 1..versions {
        for (id, ct) in DOCS {
            case.send_json(id, &version(id, ct, v))?;
        }
        std::thread::sleep(Duration::from_millis(120));
    }
    case.wait_indexed(WAIT)?;
    std::thread::sleep(Duration::from_millis(500));
    done.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().map_err(|_| anyhow!("a query thread panicked"))?;
    }
    let t = tally.lock().unwrap();
    eprintln!(
        "{versions} versions in {:?}: {} answers ({} with a flipping document), errors {:?}, \
         {} dropped, {} violations",
        started.elapsed(),
        t.answers,
        t.with_flipping_docs,
        t.errors,
        t.dropped.len(),
        t.violations.len()
    );
    for v in t.violations.iter().take(5) {
        eprintln!("violation: {v}");
    }
    for d in t.dropped.iter().take(3) {
        eprintln!("dropped: {d}");
    }
    case.keep = !(t.violations.is_empty() && t.dropped.is_empty());
    ensure!(
        t.violations.is_empty(),
        "{} answers carried restricted chunks; first: {}",
        t.violations.len(),
        t.violations[0]
    );
    ensure!(
        t.dropped.is_empty(),
        "{} requests got no answer (see the node's log in {}); first: {}",
        t.dropped.len(),
        case.dir.display(),
        t.dropped[0]
    );
    ensure!(t.answers >= 200, "too few answers to tell: {}", t.answers);
    ensure!(
        t.with_flipping_docs >= 50,
        "the flipping documents were rarely returned: {}",
        t.with_flipping_docs
    );
    let errors: usize = t.errors.values().sum();
    ensure!(
        errors * 20 <= t.answers,
        "too many failed requests: {:?}",
        t.errors
    );
    // The last version (public when `versions` is odd) is what a caller sees now.
    let last = versions - 1;
    let expect_visible = last.is_multiple_of(2);
    let ids = node.doc_ids(
        &json!({"query": "heron estuary tide", "mode": "bm25", "k": 10, "principals": []}),
    )?;
    ensure!(
        ids.contains(&"notes".to_string()) == expect_visible,
        "after the last version ({last}): {ids:?}"
    );
    case.stop_pipeline()?;
    Ok(())
}
