//! End to end: real tansu broker, real Milvus, real model, the real `freshet` binary.
//! Every test owns its topics, collection and index (see `freshet_tests::Case`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Result;
use freshet_operators::chunk::{Chunk, ChunkChange, ChunkKind};
use freshet_operators::embed::embed_input;
use freshet_tests::proxy::{host_port, TcpProxy};
use freshet_tests::{expected_chunks, Case, RIVER_WORDS};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(180);

/// A long Markdown document: each paragraph is about 120 tokens, so each chunk holds about
/// one paragraph (plus overlap from the previous one).
fn long_doc(seed: usize, paragraphs: usize) -> String {
    let words = RIVER_WORDS;
    let mut out = format!("# Report {seed}\n\n");
    for p in 0..paragraphs {
        if p % 3 == 0 {
            out.push_str(&format!("## Section {p}\n\n"));
        }
        let sentence: Vec<&str> = (0..100)
            .map(|i| words[(seed * 7 + p * 13 + i * 3) % words.len()])
            .collect();
        out.push_str(&format!(
            "Paragraph {p} of report {seed}. {}.\n\n",
            sentence.join(" ")
        ));
    }
    out
}

/// The upsert of a Markdown document titled after its id.
fn titled_markdown(id: &str, text: &str) -> serde_json::Value {
    upsert(id, &format!("Title {id}"), text, "text/markdown", &[])
}

fn upsert(
    id: &str,
    title: &str,
    text: &str,
    content_type: &str,
    acl: &[&str],
) -> serde_json::Value {
    json!({"op": "upsert", "id": id, "title": title, "text": text, "content_type": content_type,
           "source": format!("test://{id}"), "metadata": {"lang": "en", "n": 1}, "acl": acl})
}

/// Both indexes hold exactly the reference chunks of `log`.
fn assert_indexes_match(
    case: &Case,
    log: &[(String, Option<Vec<u8>>)],
) -> Result<BTreeMap<String, Chunk>> {
    let expected = expected_chunks(log)?;
    case.assert_holds_exactly(&expected)?;
    Ok(expected)
}

type Log = Vec<(String, Option<Vec<u8>>)>;

fn publish(
    case: &mut Case,
    log: &mut Log,
    key: &str,
    value: Option<serde_json::Value>,
) -> Result<()> {
    let bytes = value.map(|v| serde_json::to_vec(&v)).transpose()?;
    case.send(key, bytes.as_deref())?;
    log.push((key.to_string(), bytes));
    Ok(())
}

/// Deletes one document by a delete envelope and another by a tombstone, waits until both are
/// durable and checks both indexes against the reference.
fn delete_both_ways(
    case: &mut Case,
    log: &mut Log,
    by_envelope: &str,
    by_tombstone: &str,
) -> Result<BTreeMap<String, Chunk>> {
    let envelope = json!({"op": "delete", "id": by_envelope});
    publish(case, log, by_envelope, Some(envelope))?;
    publish(case, log, by_tombstone, None)?;
    case.wait_indexed(WAIT)?;
    assert_indexes_match(case, log)
}

#[test]
fn publish_edit_resend_delete_keep_both_indexes_exact() -> Result<()> {
    let mut case = Case::new("lifecycle", 3)?;
    let mut log: Log = Vec::new();
    let docs: Vec<(String, String)> = (0..4)
        .map(|i| (format!("doc-{i}"), long_doc(i, 6)))
        .collect();
    for (id, text) in &docs {
        publish(
            &mut case,
            &mut log,
            id,
            Some(upsert(
                id,
                &format!("Title {id}"),
                text,
                "text/markdown",
                &[],
            )),
        )?;
    }
    publish(&mut case, &mut log, "page", Some(upsert("page", "", "<html><head><title>Page</title></head><body><nav>menu</nav><main><h1>Heading</h1><p>Body text about estuaries.</p></main><footer>foot</footer></body></html>", "text/html", &["group:a"])))?;
    publish(
        &mut case,
        &mut log,
        "plain",
        Some(upsert(
            "plain",
            "Plain",
            "Just a short plain note.",
            "text/plain",
            &[],
        )),
    )?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    let first = assert_indexes_match(&case, &log)?;
    assert!(
        first.len() >= 4 * 5,
        "long documents give several chunks each, got {}",
        first.len()
    );
    let embedded_0 = case.metric("freshet_pipeline_embedding_texts_total{outcome=\"embedded\"}")?;
    let distinct: BTreeSet<String> = first
        .values()
        .filter(|c| c.kind == ChunkKind::Leaf)
        .map(embed_input)
        .collect();
    assert_eq!(
        embedded_0 as usize,
        distinct.len(),
        "each distinct leaf text is embedded once"
    );
    // A running pipeline that has indexed is ready, and says so.
    assert_eq!(
        case.endpoint("/readyz")?,
        (200, r#"{"ready":true}"#.to_string())
    );
    assert_eq!(case.endpoint("/healthz")?.0, 200);
    // Stage histograms: every record read and made durable, at least one write per sink and
    // one embedding batch.
    let produced = log.len() as f64;
    for name in [
        "freshet_pipeline_source_to_read_seconds_count",
        "freshet_pipeline_source_to_sink_seconds_count",
        "freshet_pipeline_source_to_durable_seconds_count",
    ] {
        assert_eq!(case.metric(name)?, produced, "{name}");
    }
    for name in [
        "freshet_pipeline_sink_write_seconds_count{sink=\"milvus\"}",
        "freshet_pipeline_sink_write_seconds_count{sink=\"tantivy\"}",
        "freshet_pipeline_embed_batch_seconds_count",
        // The Milvus connector reports the calls of the pipeline's client: the preflight's
        // collection check and the sink's inserts.
        "freshet_pipeline_milvus_requests_total{op=\"has_collection\",outcome=\"ok\"}",
        "freshet_pipeline_milvus_requests_total{op=\"insert\",outcome=\"ok\"}",
        "freshet_pipeline_milvus_request_seconds_count{op=\"insert\"}",
    ] {
        assert!(case.metric(name)? >= 1.0, "{name}");
    }

    // Edit the start of one paragraph in the middle of doc-1.
    let sink_writes = |case: &Case, sink: &str, op: &str| -> Result<f64> {
        let (sink, op) = (format!("sink=\"{sink}\""), format!("op=\"{op}\""));
        Ok(case
            .metrics()?
            .iter()
            .filter(|(k, _)| {
                k.starts_with("freshet_pipeline_sink_writes_total")
                    && k.contains(&sink)
                    && k.contains(&op)
            })
            .map(|(_, v)| v)
            .sum())
    };
    let before_edit: Vec<f64> = [("milvus", "upsert"), ("tantivy", "upsert")]
        .iter()
        .map(|(s, o)| sink_writes(&case, s, o))
        .collect::<Result<_>>()?;
    let (id, text) = &docs[1];
    let edited = text.replacen(
        "Paragraph 3 of report 1.",
        "Paragraph 3 of report 1, revised.",
        1,
    );
    assert_ne!(&edited, text);
    publish(&mut case, &mut log, id, Some(titled_markdown(id, &edited)))?;
    case.wait_indexed(WAIT)?;
    let second = assert_indexes_match(&case, &log)?;
    let embedded_1 = case.metric("freshet_pipeline_embedding_texts_total{outcome=\"embedded\"}")?;
    let new_texts: BTreeSet<String> = second
        .values()
        .filter(|c| c.kind == ChunkKind::Leaf)
        .map(embed_input)
        .filter(|t| !distinct.contains(t))
        .collect();
    assert_eq!(new_texts.len(), 1, "the edit touches one chunk's text");
    assert_eq!(
        embedded_1 - embedded_0,
        1.0,
        "only the edited chunk is re-embedded"
    );
    let gone: Vec<&String> = first.keys().filter(|k| !second.contains_key(*k)).collect();
    assert_eq!(gone.len(), 1, "exactly the old chunk id is gone: {gone:?}");
    // Only what changed is written: Milvus the edited chunk alone; tantivy also the chunks
    // after it, whose character spans moved; the chunks before it nowhere.
    let changes: Vec<ChunkChange> = second
        .iter()
        .filter(|(_, c)| c.doc_id == *id)
        .map(|(k, c)| {
            first
                .get(k)
                .map_or(ChunkChange::NEW, |old| ChunkChange::between(old, c))
        })
        .collect();
    let moved = changes.iter().filter(|c| c.any()).count();
    assert!(
        moved < changes.len(),
        "the chunks before the edit keep their records"
    );
    assert_eq!(
        sink_writes(&case, "milvus", "upsert")? - before_edit[0],
        1.0,
        "Milvus writes the edited chunk alone"
    );
    assert_eq!(
        sink_writes(&case, "tantivy", "upsert")? - before_edit[1],
        moved as f64,
        "tantivy writes the chunks whose stored record changed"
    );

    // Re-send the identical document: no embedding, no sink write.
    let writes = |case: &Case| -> Result<f64> {
        let m = case.metrics()?;
        Ok(m.iter()
            .filter(|(k, _)| k.starts_with("freshet_pipeline_sink_writes_total"))
            .map(|(_, v)| v)
            .sum())
    };
    let writes_before = writes(&case)?;
    publish(&mut case, &mut log, id, Some(titled_markdown(id, &edited)))?;
    case.wait_indexed(WAIT)?;
    assert_indexes_match(&case, &log)?;
    assert_eq!(
        writes(&case)?,
        writes_before,
        "an identical re-send writes nothing"
    );
    assert_eq!(
        case.metric("freshet_pipeline_embedding_texts_total{outcome=\"embedded\"}")?,
        embedded_1
    );

    // Delete one document by envelope, one by tombstone.
    let last = delete_both_ways(&mut case, &mut log, "doc-2", "page")?;
    assert!(last
        .values()
        .all(|c| c.doc_id != "doc-2" && c.doc_id != "page"));
    case.stop_pipeline()?;
    Ok(())
}

#[test]
fn malformed_records_go_to_the_dlq_and_good_ones_are_indexed() -> Result<()> {
    let mut case = Case::new("dlq", 1)?;
    case.extra_env
        .push(("FRESHET_LIMITS_MAX_VALUE_BYTES".into(), "4096".into()));
    case.extra_env
        .push(("FRESHET_CHUNKING_ERROR_ON_EMPTY".into(), "true".into()));
    let good = |id: &str| {
        upsert(
            id,
            id,
            &format!("Good document {id} about rivers."),
            "text/plain",
            &[],
        )
    };
    let mut log = Vec::new();
    let bad: Vec<(&str, Option<Vec<u8>>, &str)> = vec![
        ("bad-json", Some(b"{not json".to_vec()), "malformed_json"),
        ("bad-utf8", Some(vec![0xff, 0xfe, 0x7b]), "invalid_utf8"),
        (
            "",
            Some(br#"{"op":"upsert","text":"no id"}"#.to_vec()),
            "missing_id",
        ),
        (
            "bad-op",
            Some(br#"{"op":"merge","id":"bad-op"}"#.to_vec()),
            "unknown_op",
        ),
        (
            "too-big",
            Some(serde_json::to_vec(&upsert(
                "too-big",
                "t",
                &"x ".repeat(5000),
                "text/plain",
                &[],
            ))?),
            "too_large",
        ),
        (
            "empty",
            Some(br#"{"op":"upsert","id":"empty","text":"   "}"#.to_vec()),
            "no_chunks",
        ),
    ];
    for (i, (key, value, _)) in bad.iter().enumerate() {
        let g = format!("good-{i}");
        case.send_json(&g, &good(&g))?;
        log.push((g.clone(), Some(serde_json::to_vec(&good(&g))?)));
        case.send(key, value.as_deref())?;
    }
    case.send_json("good-last", &good("good-last"))?;
    log.push((
        "good-last".to_string(),
        Some(serde_json::to_vec(&good("good-last"))?),
    ));
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    let expected = assert_indexes_match(&case, &log)?;
    assert_eq!(
        expected
            .values()
            .map(|c| c.doc_id.clone())
            .collect::<BTreeSet<_>>()
            .len(),
        bad.len() + 1
    );

    let dlq = case.dlq_records(bad.len(), Duration::from_secs(30))?;
    assert_eq!(dlq.len(), bad.len(), "one DLQ record per bad input");
    for ((key, value, class), rec) in bad.iter().zip(&dlq) {
        let header = |n: &str| {
            rec.header(n)
                .flatten()
                .map(|v| String::from_utf8_lossy(v).to_string())
        };
        assert_eq!(
            header("freshet.error.class").as_deref(),
            Some(*class),
            "class of {key}"
        );
        assert!(!header("freshet.error.message")
            .unwrap_or_default()
            .is_empty());
        assert_eq!(
            header("freshet.source.topic").as_deref(),
            Some(case.kafka.topic.as_str())
        );
        assert!(header("freshet.source.offset").is_some());
        assert_eq!(
            rec.value.as_deref(),
            value.as_deref(),
            "original value kept for {key}"
        );
    }
    assert_eq!(
        case.metric("freshet_pipeline_documents_total{outcome=\"dlq\"}")?,
        bad.len() as f64
    );
    case.stop_pipeline()?;
    Ok(())
}

/// Milvus unreachable mid-stream for longer than the stall limit: the pipeline stops without
/// committing tantivy (whose commit carries the Kafka offsets) past what reached Milvus, and once
/// Milvus is back a restart converges to exact indexes. (A shorter outage stalls the running
/// pipeline instead: tests/tests/resource_faults_e2e.rs.)
#[test]
fn milvus_outage_stops_before_tantivy_commits_and_a_restart_converges() -> Result<()> {
    let mut case = Case::new("milvus-outage", 2)?;
    let proxy = TcpProxy::start(&host_port(&freshet_tests::env("FRESHET_MILVUS_URL"))?)?;
    // Only the pipeline goes through the proxy; the checks read Milvus directly.
    case.extra_env.push((
        "FRESHET_MILVUS_URL".into(),
        format!("http://{}", proxy.addr),
    ));
    // The default Milvus timeout: with the proxy cut, calls fail at once (connection refused),
    // and loading a new collection can take more than a few seconds while other tests run.
    case.extra_env
        .push(("FRESHET_PIPELINE_STALL_LIMIT_S".into(), "3".into()));
    let mut log = Vec::new();
    for i in 0..6 {
        let id = format!("o-{i}");
        let doc = titled_markdown(&id, &long_doc(i, 2));
        publish(&mut case, &mut log, &id, Some(doc))?;
    }
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    assert_indexes_match(&case, &log)?;
    let before: BTreeMap<String, Chunk> = case
        .tantivy_chunks()?
        .into_iter()
        .map(|c| (c.chunk_id.clone(), c))
        .collect();
    let reader = freshet_tantivy::ChunkIndexReader::open(case.tantivy_path())?;
    let payload_before = reader.last_payload()?;

    proxy.cut();
    // A new document, an edit and a delete while Milvus is unreachable.
    publish(
        &mut case,
        &mut log,
        "o-new",
        Some(titled_markdown("o-new", &long_doc(50, 2))),
    )?;
    publish(
        &mut case,
        &mut log,
        "o-1",
        Some(titled_markdown("o-1", &long_doc(51, 2))),
    )?;
    publish(&mut case, &mut log, "o-2", None)?;
    let status = case.wait_exit(Duration::from_secs(240))?;
    assert!(
        !status.success(),
        "the pipeline must fail, not carry on: {status}"
    );
    assert!(
        case.log_tail().contains("writing to Milvus failed for")
            && case.log_tail().contains("(stall_limit_s = 3)"),
        "the log says why: {}",
        case.log_tail()
    );
    // tantivy holds exactly what it held before the outage, under the same commit.
    reader.reload()?;
    assert_eq!(reader.last_payload()?, payload_before);
    let after: BTreeMap<String, Chunk> = case
        .tantivy_chunks()?
        .into_iter()
        .map(|c| (c.chunk_id.clone(), c))
        .collect();
    assert_eq!(
        after, before,
        "tantivy changed while Milvus was unreachable"
    );

    proxy.restore();
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    let end = assert_indexes_match(&case, &log)?;
    assert!(end.values().any(|c| c.doc_id == "o-new"));
    assert!(end.values().all(|c| c.doc_id != "o-2"));
    case.stop_pipeline()?;
    Ok(())
}

#[test]
fn sigkill_mid_stream_then_restart_converges_without_duplicates() -> Result<()> {
    let mut case = Case::new("sigkill", 4)?;
    case.extra_env
        .push(("FRESHET_PIPELINE_BATCH_MAX_RECORDS".into(), "3".into()));
    // A model copy per worker (the others run the default, one copy the workers share).
    case.extra_env
        .push(("FRESHET_PIPELINE_MODEL_COPIES".into(), "2".into()));
    let mut log = Vec::new();
    for i in 0..40 {
        let id = format!("k-{i}");
        let v = upsert(&id, &id, &long_doc(i, 3), "text/markdown", &[]);
        case.send_json(&id, &v)?;
        log.push((id, Some(serde_json::to_vec(&v)?)));
    }
    case.start_pipeline()?;
    // Kill as soon as a first batch is committed (the commit that binds a new index holds no
    // chunk), while later batches are still in flight.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let committed = freshet_tantivy::ChunkIndexReader::open(case.tantivy_path())
            .ok()
            .is_some_and(|r| r.count() > 0);
        if committed || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    case.kill_pipeline()?;
    let partial = case.tantivy_chunks()?.len();
    let all_first = expected_chunks(&log)?.len();
    assert!(
        partial > 0 && partial < all_first,
        "killed mid-stream: {partial} of {all_first} chunks were durable"
    );
    // More changes while it is down: edits and deletes of documents of either side of the kill.
    for i in (0..40).step_by(5) {
        let id = format!("k-{i}");
        let v = upsert(&id, &id, &long_doc(i + 100, 3), "text/markdown", &[]);
        case.send_json(&id, &v)?;
        log.push((id, Some(serde_json::to_vec(&v)?)));
    }
    for i in (1..40).step_by(7) {
        let id = format!("k-{i}");
        case.send(&id, None)?;
        log.push((id, None));
    }
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    assert_indexes_match(&case, &log)?;
    case.stop_pipeline()?;
    Ok(())
}

#[test]
fn two_process_cluster_keeps_both_indexes_exact_and_recovers() -> Result<()> {
    let mut case = Case::new("cluster", 4)?;
    let mut log = Vec::new();
    for i in 0..12 {
        let id = format!("c-{i}");
        let v = upsert(&id, &id, &long_doc(i, 2), "text/markdown", &[]);
        publish(&mut case, &mut log, &id, Some(v))?;
    }
    // Two processes with one worker each: partitions are spread over both, documents are
    // exchanged by id, and process 0's worker owns the sinks.
    case.start_cluster(2)?;
    case.wait_indexed(WAIT)?;
    assert_indexes_match(&case, &log)?;

    // Edits, deletes and tombstones land in both processes' partitions.
    for i in (0..12).step_by(3) {
        let id = format!("c-{i}");
        let v = upsert(&id, &id, &long_doc(i + 50, 2), "text/markdown", &[]);
        publish(&mut case, &mut log, &id, Some(v))?;
    }
    delete_both_ways(&mut case, &mut log, "c-1", "c-2")?;

    // SIGKILL both processes, change things while they are down, restart: exact again.
    case.kill_pipeline()?;
    for i in [4, 5] {
        let id = format!("c-{i}");
        let v = upsert(&id, &id, &long_doc(i + 90, 2), "text/markdown", &[]);
        publish(&mut case, &mut log, &id, Some(v))?;
    }
    publish(&mut case, &mut log, "c-7", None)?;
    case.start_cluster(2)?;
    case.wait_indexed(WAIT)?;
    assert_indexes_match(&case, &log)?;
    case.stop_pipeline()?;
    Ok(())
}
