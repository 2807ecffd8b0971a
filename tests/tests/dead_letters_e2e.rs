//! Records that cannot be indexed, end to end with the real broker, Milvus, model and binaries:
//! each record limit just under and just over, a version Milvus itself refuses, a refused
//! version removing the document's older one, and restarts in the middle. The indexes must
//! always equal a sequential run in which a refused record deletes the document it names, the
//! dead-letter topic must hold every refused record as it was sent, and the pipeline carries on.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{ensure, Result};
use freshet_kafka::{dlq_headers, Record};
use freshet_milvus::schema::FieldLimits;
use freshet_operators::chunk::{ChunkerConfig, HfTokenCounter};
use freshet_operators::intake::{intake, Intake};
use freshet_operators::limits::RecordLimits;
use freshet_tests::query::QueryNode;
use freshet_tests::{env, expected_chunks_with, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);

type Log = Vec<(String, Option<Vec<u8>>)>;

fn send(case: &mut Case, log: &mut Log, key: &str, value: &Value) -> Result<()> {
    let bytes = serde_json::to_vec(value)?;
    case.send(key, Some(&bytes))?;
    log.push((key.to_string(), Some(bytes)));
    Ok(())
}

fn doc(title: &str, text: &str) -> Value {
    json!({"title": title, "text": text, "content_type": "text/markdown",
           "source": "test://doc", "metadata": {"lang": "en"}})
}

/// Exactly `n` bytes of ASCII words.
fn words(n: usize) -> String {
    let mut s = "river delta sediment flow basin channel estuary tide marsh ".repeat(n / 50 + 1);
    s.truncate(n);
    s
}

/// A Markdown document of `n` short sections: one chunk each.
fn sections(n: usize) -> String {
    (0..n)
        .map(|i| format!("# Part {i}\n\nThe levee number {i} holds the floodplain."))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// One distinct, searchable document per name.
fn good(topic: &str) -> Value {
    doc(
        &format!("Notes on {topic}"),
        &format!(
            "The {topic} observation log: {topic} measurements were taken every morning \
             and the {topic} readings stayed stable through the season."
        ),
    )
}

fn header(rec: &Record, name: &str) -> Option<String> {
    rec.header(name)
        .flatten()
        .map(|v| String::from_utf8_lossy(v).to_string())
}

/// The dead-letter records, by document key, once at least `n` arrived.
fn dead_letters(case: &Case, n: usize) -> Result<BTreeMap<String, Vec<Record>>> {
    let all = case.dlq_records(n, Duration::from_secs(60))?;
    ensure!(all.len() >= n, "{} dead letters, expected {n}", all.len());
    let mut by_key: BTreeMap<String, Vec<Record>> = BTreeMap::new();
    for r in all {
        let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).to_string();
        by_key.entry(key).or_default().push(r);
    }
    Ok(by_key)
}

/// `doc_id` is among the top 3 of both the BM25 and the vector route for `query`.
fn found_by_both_routes(node: &QueryNode, doc_id: &str, query: &str) -> Result<()> {
    for mode in ["bm25", "vector"] {
        let body = json!({"query": query, "k": 3, "mode": mode});
        node.wait_for(&body, WAIT, |ids| ids.iter().any(|i| i == doc_id))?;
    }
    Ok(())
}

/// For every record limit: a record at the limit is indexed, one just over it is dead-lettered
/// with the limit's class and stage, and a good record sent after it is searchable by both
/// routes. The limits the sinks impose (id, source, metadata, ACL entries, principal) run at
/// their defaults, so real Milvus and tantivy take the records at the limit; text size and
/// chunks per document are set low to keep the records small. A document whose new version is
/// over a limit leaves both indexes.
#[test]
fn each_limit_at_and_over() -> Result<()> {
    let limits = RecordLimits {
        max_text_bytes: 1500,
        max_chunks_per_document: 3,
        ..RecordLimits::default()
    };
    let mut case = Case::new("limits", 2)?;
    case.extra_env.extend([
        (
            "FRESHET_LIMITS_MAX_TEXT_BYTES".to_string(),
            "1500".to_string(),
        ),
        (
            "FRESHET_LIMITS_MAX_CHUNKS_PER_DOCUMENT".to_string(),
            "3".to_string(),
        ),
    ]);
    let mut log: Log = Vec::new();

    // A document indexed first, whose next version will be over a limit.
    send(&mut case, &mut log, "victim", &good("victim glacier"))?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    case.assert_holds_exactly(&expected_chunks_with(&log, &limits)?)?;
    ensure!(case.tantivy_chunks()?.iter().any(|c| c.doc_id == "victim"));

    let with = |f: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut v = doc("A title", "A short text about a river.");
        if let Value::Object(m) = &mut v {
            f(m);
        }
        v
    };
    let principals = |n: usize| (0..n).map(|i| format!("group:{i}")).collect::<Vec<_>>();
    let meta = |n: usize| json!({ "blob": "m".repeat(n) });
    // (name, class, stage, key and value at the limit, just over it)
    type Pair = ((String, Value), (String, Value));
    let base = || with(&|_| {});
    let cases: Vec<(&str, &str, &str, Pair)> = vec![
        (
            "id",
            "field_too_large",
            "decode",
            (("i".repeat(1024), base()), ("j".repeat(1025), base())),
        ),
        (
            "title",
            "field_too_large",
            "decode",
            (
                (
                    "title-at".into(),
                    with(&|m| {
                        m.insert("title".into(), json!("t".repeat(4096)));
                    }),
                ),
                (
                    "title-over".into(),
                    with(&|m| {
                        m.insert("title".into(), json!("t".repeat(4097)));
                    }),
                ),
            ),
        ),
        (
            "text",
            "field_too_large",
            "decode",
            (
                (
                    "text-at".into(),
                    with(&|m| {
                        m.insert("text".into(), json!(words(1500)));
                    }),
                ),
                (
                    "text-over".into(),
                    with(&|m| {
                        m.insert("text".into(), json!(words(1501)));
                    }),
                ),
            ),
        ),
        (
            "source",
            "field_too_large",
            "decode",
            (
                (
                    "source-at".into(),
                    with(&|m| {
                        m.insert("source".into(), json!("s".repeat(65_530)));
                    }),
                ),
                (
                    "source-over".into(),
                    with(&|m| {
                        m.insert("source".into(), json!("s".repeat(65_531)));
                    }),
                ),
            ),
        ),
        (
            // {"blob":"m…"} is 11 bytes more than the string
            "metadata",
            "field_too_large",
            "decode",
            (
                (
                    "meta-at".into(),
                    with(&|m| {
                        m.insert("metadata".into(), meta(65_519));
                    }),
                ),
                (
                    "meta-over".into(),
                    with(&|m| {
                        m.insert("metadata".into(), meta(65_520));
                    }),
                ),
            ),
        ),
        (
            "acl entries",
            "too_many_acl_entries",
            "decode",
            (
                (
                    "acl-at".into(),
                    with(&|m| {
                        m.insert("acl".into(), json!(principals(4096)));
                    }),
                ),
                (
                    "acl-over".into(),
                    with(&|m| {
                        m.insert("acl".into(), json!(principals(4097)));
                    }),
                ),
            ),
        ),
        (
            "principal",
            "field_too_large",
            "decode",
            (
                (
                    "principal-at".into(),
                    with(&|m| {
                        m.insert("acl".into(), json!(["p".repeat(1024)]));
                    }),
                ),
                (
                    "principal-over".into(),
                    with(&|m| {
                        m.insert("acl".into(), json!(["p".repeat(1025)]));
                    }),
                ),
            ),
        ),
        (
            "chunks",
            "too_many_chunks",
            "prepare",
            (
                (
                    "chunks-at".into(),
                    with(&|m| {
                        m.insert("text".into(), json!(sections(3)));
                    }),
                ),
                (
                    "chunks-over".into(),
                    with(&|m| {
                        m.insert("text".into(), json!(sections(4)));
                    }),
                ),
            ),
        ),
        (
            "metadata key",
            "invalid_field",
            "decode",
            (
                (
                    "key-ok".into(),
                    with(&|m| {
                        m.insert("metadata".into(), json!({"a b": 1}));
                    }),
                ),
                (
                    "key-nul".into(),
                    with(&|m| {
                        m.insert("metadata".into(), json!({"a\u{0}b": 1}));
                    }),
                ),
            ),
        ),
    ];
    // The chunk counts are what the test says they are.
    let tokens = HfTokenCounter::from_file(
        std::path::Path::new(&env("FRESHET_MODEL_DIR")).join("tokenizer.json"),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (key, n) in [("chunks-at", 3), ("text-at", 0)] {
        let value = &cases
            .iter()
            .find(|c| c.3 .0 .0 == key)
            .expect("case")
            .3
             .0
             .1;
        let bytes = serde_json::to_vec(value)?;
        match intake(
            Some(key.as_bytes()),
            Some(&bytes),
            &limits,
            &ChunkerConfig::default(),
            &tokens,
        ) {
            Intake::Upsert { chunks, .. } if n == 0 || chunks.len() == n => {}
            other => anyhow::bail!("{key}: {other:?}"),
        }
    }

    let topics = [
        "alder",
        "basalt",
        "cormorant",
        "dunlin",
        "eelgrass",
        "fjord",
        "gannet",
        "heron",
        "ibis",
    ];
    for ((_, _, _, ((at_key, at), (over_key, over))), topic) in cases.iter().zip(topics) {
        send(&mut case, &mut log, at_key, at)?;
        send(&mut case, &mut log, over_key, over)?;
        send(&mut case, &mut log, &format!("good-{topic}"), &good(topic))?;
    }
    // The indexed document's next version is over a limit: it leaves both indexes.
    let victim_over = with(&|m| {
        m.insert("source".into(), json!("s".repeat(70_000)));
    });
    send(&mut case, &mut log, "victim", &victim_over)?;
    send(&mut case, &mut log, "good-after-victim", &good("kittiwake"))?;
    case.wait_indexed(WAIT)?;

    let expected = expected_chunks_with(&log, &limits)?;
    case.assert_holds_exactly(&expected)?;
    let docs: std::collections::BTreeSet<&str> =
        expected.values().map(|c| c.doc_id.as_str()).collect();
    for (name, _, _, ((at_key, _), (over_key, _))) in &cases {
        ensure!(
            docs.contains(at_key.as_str()),
            "{name}: the record at the limit is indexed"
        );
        ensure!(
            !docs.contains(over_key.as_str()),
            "{name}: the record over it is not"
        );
    }
    ensure!(
        !docs.contains("victim"),
        "the refused version removed the older one"
    );

    // One dead letter per record over a limit, as sent, with its class and stage.
    let sent: BTreeMap<&str, &Option<Vec<u8>>> = log.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let dlq = dead_letters(&case, cases.len() + 1)?;
    let mut refused: Vec<(&str, &str, &str)> = cases
        .iter()
        .map(|(_, class, stage, (_, (key, _)))| (key.as_str(), *class, *stage))
        .collect();
    refused.push(("victim", "field_too_large", "decode"));
    for (key, class, stage) in refused {
        let recs = dlq.get(key).map(Vec::as_slice).unwrap_or_default();
        ensure!(recs.len() == 1, "{key}: {} dead letters", recs.len());
        let r = &recs[0];
        ensure!(
            header(r, dlq_headers::ERROR_CLASS).as_deref() == Some(class),
            "{key}: class {:?}",
            header(r, dlq_headers::ERROR_CLASS)
        );
        ensure!(
            header(r, dlq_headers::ERROR_STAGE).as_deref() == Some(stage),
            "{key}: stage"
        );
        if key != "victim" {
            ensure!(&r.value == sent[key], "{key}: the value as sent");
        }
    }
    ensure!(
        dlq.len() == cases.len() + 1,
        "nothing else is dead-lettered: {:?}",
        dlq.keys()
    );
    let metrics = case.metrics()?;
    let count = |class: &str, stage: &str| {
        metrics
            .get(&format!(
                "freshet_pipeline_dlq_records_total{{class=\"{class}\",stage=\"{stage}\"}}"
            ))
            .copied()
            .unwrap_or(0.0)
    };
    ensure!(count("field_too_large", "decode") == 7.0, "{metrics:?}");
    ensure!(count("too_many_chunks", "prepare") == 1.0);
    ensure!(count("too_many_acl_entries", "decode") == 1.0);
    // The connector timed each dead letter until the broker acknowledged it.
    let acked = metrics
        .get("freshet_pipeline_kafka_dead_letter_records_total")
        .copied();
    ensure!(
        acked == Some(dlq.len() as f64),
        "dead letters acknowledged: {acked:?}"
    );
    let timed = metrics
        .get("freshet_pipeline_kafka_dead_letter_seconds_count")
        .copied()
        .unwrap_or(0.0);
    ensure!(
        timed >= dlq.len() as f64,
        "dead-letter calls timed: {timed}"
    );

    // The good records after each refused one are searchable by both routes.
    let node = case.start_query(&[])?;
    node.wait_ready(WAIT)?;
    for topic in topics.iter().chain(["kittiwake"].iter()) {
        let id = if *topic == "kittiwake" {
            "good-after-victim".to_string()
        } else {
            format!("good-{topic}")
        };
        found_by_both_routes(&node, &id, &format!("{topic} observation log readings"))?;
    }

    // The refused document comes back with its next good version.
    send(&mut case, &mut log, "victim", &good("victim glacier"))?;
    case.wait_indexed(WAIT)?;
    case.assert_holds_exactly(&expected_chunks_with(&log, &limits)?)?;
    found_by_both_routes(&node, "victim", "victim glacier observation log readings")?;
    Ok(())
}

/// The reference of a run against a collection whose `source` holds at most `max` bytes: a
/// record whose source is longer cannot be indexed, so it deletes its document.
fn refused_over(log: &Log, max: usize) -> Log {
    log.iter()
        .map(|(k, v)| {
            let long = v
                .as_deref()
                .and_then(|b| serde_json::from_slice::<Value>(b).ok())
                .and_then(|j| j["source"].as_str().map(|s| s.len() > max))
                .unwrap_or(false);
            let unindexable = br#"{"op":"refused by Milvus"}"#.to_vec();
            (k.clone(), if long { Some(unindexable) } else { v.clone() })
        })
        .collect()
}

fn sourced(topic: &str, source_len: usize) -> Value {
    let mut v = good(topic);
    v["source"] = json!("s".repeat(source_len));
    v
}

/// A row Milvus refuses that the pipeline's checks let through (the collection's `source` is
/// narrower than freshet's layout): the batch is split until the refused rows stand alone, their
/// records are dead-lettered as `milvus_refused` at the `sink` stage, the rest of the batch is
/// written, the offsets move on, and a refused version removes the document's older one. A
/// SIGKILL in the middle of such a batch, and changes while the pipeline is down, converge.
#[test]
fn versions_milvus_refuses_are_isolated_and_a_restart_converges() -> Result<()> {
    const NARROW: usize = 100;
    let limits = RecordLimits::default();
    let mut case = Case::new("refused", 2)?;
    case.create_collection_with(FieldLimits {
        source_max_len: NARROW,
        ..FieldLimits::LAYOUT
    })?;
    let mut log: Log = Vec::new();
    send(&mut case, &mut log, "g0", &sourced("alder", 20))?;
    send(&mut case, &mut log, "victim", &sourced("basalt", 20))?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    case.assert_holds_exactly(&expected_chunks_with(&refused_over(&log, NARROW), &limits)?)?;

    // One burst, read as one batch: two refused versions amid good ones.
    send(&mut case, &mut log, "g1", &sourced("cormorant", 50))?;
    send(&mut case, &mut log, "r1", &sourced("dunlin", NARROW + 1))?;
    send(&mut case, &mut log, "g2", &sourced("eelgrass", NARROW))?;
    send(&mut case, &mut log, "victim", &sourced("fjord", 500))?;
    send(&mut case, &mut log, "g3", &sourced("gannet", 10))?;
    case.wait_indexed(WAIT)?;
    let expected = expected_chunks_with(&refused_over(&log, NARROW), &limits)?;
    case.assert_holds_exactly(&expected)?;
    let docs: std::collections::BTreeSet<&str> =
        expected.values().map(|c| c.doc_id.as_str()).collect();
    ensure!(docs.contains("g2") && docs.contains("g3") && !docs.contains("r1"));
    ensure!(
        !docs.contains("victim"),
        "the refused version removed the older one"
    );
    let dlq = dead_letters(&case, 2)?;
    for (key, sent) in [("r1", &log[3].1), ("victim", &log[5].1)] {
        let recs = dlq.get(key).map(Vec::as_slice).unwrap_or_default();
        ensure!(recs.len() == 1, "{key}: {} dead letters", recs.len());
        let r = &recs[0];
        ensure!(header(r, dlq_headers::ERROR_CLASS).as_deref() == Some("milvus_refused"));
        ensure!(header(r, dlq_headers::ERROR_STAGE).as_deref() == Some("sink"));
        ensure!(&r.value == sent, "{key}: the value as sent");
        ensure!(header(r, dlq_headers::SOURCE_TOPIC).as_deref() == Some(case.kafka.topic.as_str()));
    }
    let metric = "freshet_pipeline_dlq_records_total{class=\"milvus_refused\",stage=\"sink\"}";
    ensure!(case.metric(metric)? == 2.0);
    let node = case.start_query(&[])?;
    node.wait_ready(WAIT)?;
    found_by_both_routes(&node, "g3", "gannet observation log readings")?;

    // A SIGKILL while the next burst is being written, and more changes while it is down.
    send(&mut case, &mut log, "r2", &sourced("heron", 300))?;
    send(&mut case, &mut log, "victim", &sourced("ibis", 30))?;
    send(&mut case, &mut log, "r1", &sourced("jacana", 40))?;
    send(&mut case, &mut log, "g4", &sourced("kittiwake", 40))?;
    std::thread::sleep(Duration::from_millis(700));
    case.kill_pipeline()?;
    send(&mut case, &mut log, "g1", &sourced("loon", NARROW + 5))?;
    send(&mut case, &mut log, "g5", &sourced("merganser", 5))?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    let expected = expected_chunks_with(&refused_over(&log, NARROW), &limits)?;
    case.assert_holds_exactly(&expected)?;
    let docs: std::collections::BTreeSet<&str> =
        expected.values().map(|c| c.doc_id.as_str()).collect();
    ensure!(docs.contains("victim") && docs.contains("r1") && !docs.contains("g1"));
    // Every refused record is dead-lettered (a record replayed after the kill may be twice).
    let dlq = dead_letters(&case, 4)?;
    for key in ["r1", "victim", "r2", "g1"] {
        ensure!(
            dlq.contains_key(key),
            "{key} dead-lettered: {:?}",
            dlq.keys()
        );
    }
    found_by_both_routes(&node, "r1", "jacana observation log readings")?;
    Ok(())
}

/// The reference of a run whose model cannot embed `word`: a record holding it cannot be
/// indexed, so it deletes its document.
fn refused_with(log: &Log, word: &str) -> Log {
    log.iter()
        .map(|(k, v)| {
            let poisoned = v
                .as_deref()
                .is_some_and(|b| String::from_utf8_lossy(b).contains(word));
            let unindexable = br#"{"op":"refused by the model"}"#.to_vec();
            (
                k.clone(),
                if poisoned {
                    Some(unindexable)
                } else {
                    v.clone()
                },
            )
        })
        .collect()
}

/// A text the model cannot embed (a generated stand-in model,
/// `tests/fixtures/make_standin_embedder.py`, returns NaN for one word and ordinary vectors
/// otherwise): the failing batch is split until the text stands alone, its document's version is
/// dead-lettered as `embedding_failed` at the `embed` stage and removed from both indexes (older
/// version included), everything else is written, and the document's next version without the
/// word is indexed again, across a restart.
#[test]
fn a_text_the_model_cannot_embed_is_isolated() -> Result<()> {
    const WORD: &str = "volcano";
    let limits = RecordLimits::default();
    let mut case = Case::new("unembeddable", 2)?;
    let model = case.dir.join("standin-model");
    let status = std::process::Command::new(env("FRESHET_PYTHON"))
        .arg(freshet_tests::workspace_root().join("tests/fixtures/make_standin_embedder.py"))
        .arg(&model)
        .arg("--tokenizer-from")
        .arg(env("FRESHET_MODEL_DIR"))
        .args(["--poison", WORD])
        .status()?;
    ensure!(status.success(), "make_standin_embedder.py: {status}");
    case.extra_env.push((
        "FRESHET_EMBEDDING_MODEL_DIR".into(),
        model.display().to_string(),
    ));
    let paragraphs = |topic: &str, middle: &str| {
        doc(
            &format!("Field notes {topic}"),
            &format!(
                "# {topic}\n\nThe {topic} survey began at dawn.\n\n## Middle\n\n{middle}\n\n\
                 ## End\n\nThe {topic} survey ended at dusk."
            ),
        )
    };
    let mut log: Log = Vec::new();
    send(&mut case, &mut log, "g0", &good("alder"))?;
    send(
        &mut case,
        &mut log,
        "victim",
        &paragraphs("basalt", "Quiet rivers."),
    )?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    case.assert_holds_exactly(&expected_chunks_with(&refused_with(&log, WORD), &limits)?)?;

    // One burst: one paragraph of two documents holds the word.
    send(&mut case, &mut log, "g1", &good("cormorant"))?;
    let bad_middle = format!("The old {WORD} slept under the snow.");
    send(
        &mut case,
        &mut log,
        "p1",
        &paragraphs("dunlin", &bad_middle),
    )?;
    send(
        &mut case,
        &mut log,
        "victim",
        &paragraphs("basalt", &bad_middle),
    )?;
    send(&mut case, &mut log, "g2", &good("eelgrass"))?;
    case.wait_indexed(WAIT)?;
    let expected = expected_chunks_with(&refused_with(&log, WORD), &limits)?;
    case.assert_holds_exactly(&expected)?;
    let docs: std::collections::BTreeSet<&str> =
        expected.values().map(|c| c.doc_id.as_str()).collect();
    ensure!(docs.contains("g1") && docs.contains("g2"));
    ensure!(!docs.contains("p1") && !docs.contains("victim"));
    let dlq = dead_letters(&case, 2)?;
    for (key, sent) in [("p1", &log[3].1), ("victim", &log[4].1)] {
        let recs = dlq.get(key).map(Vec::as_slice).unwrap_or_default();
        ensure!(recs.len() == 1, "{key}: {} dead letters", recs.len());
        let r = &recs[0];
        ensure!(header(r, dlq_headers::ERROR_CLASS).as_deref() == Some("embedding_failed"));
        ensure!(header(r, dlq_headers::ERROR_STAGE).as_deref() == Some("embed"));
        let message = header(r, dlq_headers::ERROR_MESSAGE).unwrap_or_default();
        ensure!(message.contains("NaN"), "{key}: {message}");
        ensure!(&r.value == sent, "{key}: the value as sent");
    }
    let metric = "freshet_pipeline_dlq_records_total{class=\"embedding_failed\",stage=\"embed\"}";
    ensure!(case.metric(metric)? == 2.0);

    // Fixed versions, one of them written while the pipeline is down.
    send(
        &mut case,
        &mut log,
        "p1",
        &paragraphs("dunlin", "The old hill slept."),
    )?;
    case.kill_pipeline()?;
    send(
        &mut case,
        &mut log,
        "victim",
        &paragraphs("basalt", "Quiet lakes."),
    )?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    let expected = expected_chunks_with(&refused_with(&log, WORD), &limits)?;
    case.assert_holds_exactly(&expected)?;
    let docs: std::collections::BTreeSet<&str> =
        expected.values().map(|c| c.doc_id.as_str()).collect();
    ensure!(docs.contains("p1") && docs.contains("victim"));
    Ok(())
}
