//! `freshet dlq list|show|replay` end to end with the real broker, Milvus, model and binaries:
//! records the pipeline refuses (a misspelt ACL key, a value that is not JSON) are listed by
//! class, key and time, shown whole, and a corrected one replayed makes its document indexed
//! in both indexes; the replay names its dead letter in a header, and a second replay writes
//! nothing. A dead letter whose key has a newer record is not replayed over it unless asked.
//! Bad filters, an empty match and an unreachable broker are errors.

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use freshet_kafka::{dlq_headers, PartitionReader};
use freshet_tests::{expected_chunks, freshet_bin, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);

/// `freshet dlq ARGS` against the case's topics.
fn dlq(case: &Case, args: &[&str]) -> Result<Output> {
    dlq_on(case, &case.kafka.brokers, args)
}

fn dlq_on(case: &Case, brokers: &str, args: &[&str]) -> Result<Output> {
    Command::new(freshet_bin())
        .arg("dlq")
        .args(args)
        .env_remove("FRESHET_CONFIG")
        .env("FRESHET_KAFKA_BROKERS", brokers)
        .env("FRESHET_KAFKA_TOPIC", &case.kafka.topic)
        .env("FRESHET_KAFKA_DLQ_TOPIC", &case.kafka.dlq_topic)
        .env("FRESHET_KAFKA_GROUP_ID", &case.kafka.group_id)
        .env("FRESHET_LOG", "warn")
        .output()
        .context("running freshet dlq")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Its stdout, when it exits 0.
fn ok(out: Output) -> Result<String> {
    ensure!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    Ok(text(&out.stdout))
}

/// Its stderr, when it fails with exit code 1 and writes no table.
fn fails(out: Output) -> Result<String> {
    ensure!(
        out.status.code() == Some(1),
        "expected exit 1, got {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    Ok(text(&out.stderr))
}

/// `list --json` lines, by key.
fn listed(case: &Case, args: &[&str]) -> Result<BTreeMap<String, Value>> {
    let mut all = vec!["list", "--json"];
    all.extend(args);
    let stdout = ok(dlq(case, &all)?)?;
    let mut out = BTreeMap::new();
    for line in stdout.lines() {
        let v: Value = serde_json::from_str(line).with_context(|| line.to_string())?;
        out.insert(v["key"].as_str().unwrap_or_default().to_string(), v);
    }
    Ok(out)
}

/// The high watermark of every partition of the document topic.
fn ends(case: &Case) -> Result<BTreeMap<i32, i64>> {
    let parts: Vec<i32> = (0..case.partitions).collect();
    let reader = PartitionReader::new(&case.kafka, &case.kafka.topic, &parts, &BTreeMap::new())?;
    Ok(reader.high_watermarks()?)
}

#[test]
fn list_show_and_replay_once() -> Result<()> {
    let mut case = Case::new("dlq_commands", 2)?;
    let mut log: Vec<(String, Option<Vec<u8>>)> = Vec::new();
    let mut send = |case: &mut Case, key: &str, value: &[u8]| -> Result<()> {
        case.send(key, Some(value))?;
        log.push((key.to_string(), Some(value.to_vec())));
        Ok(())
    };
    let doc = |text: &str, acl_key: &str| {
        serde_json::to_vec(&json!({
            "title": "Flood report", "text": text, "content_type": "text/plain",
            "source": "test://dlq", acl_key: ["group:hr"]
        }))
    };
    let good = doc("The levee held through the spring freshet.", "acl")?;
    let misspelt = doc(
        "Sediment gauges along the estuary recorded the marsh tide.",
        "ACL",
    )?;
    let chinese = doc("河流三角洲的沉积物报告。", "acls")?;
    send(&mut case, "good", &good)?;
    send(&mut case, "acl-typo", &misspelt)?;
    send(&mut case, "broken", b"{not json")?;
    send(&mut case, "报告/水文.md", &chinese)?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    ensure!(case.dlq_records(3, Duration::from_secs(60))?.len() == 3);

    // list: the table, by class, with the counts.
    let table = ok(dlq(&case, &["list"])?)?;
    ensure!(table.starts_with("AT "), "{table}");
    ensure!(
        table.contains("3 dead letters match: invalid_field 2, malformed_json 1"),
        "{table}"
    );
    ensure!(table.contains("报告/水文.md"), "{table}");
    let all = listed(&case, &[])?;
    ensure!(all.len() == 3, "{all:?}");
    for (key, class) in [
        ("acl-typo", "invalid_field"),
        ("broken", "malformed_json"),
        ("报告/水文.md", "invalid_field"),
    ] {
        let l = &all[key];
        ensure!(l["class"] == class && l["stage"] == "decode", "{l}");
        ensure!(l["source"]["topic"] == case.kafka.topic.as_str(), "{l}");
        ensure!(l["replayed_as"].is_null(), "{l}");
    }
    let by_class = listed(&case, &["--class", "malformed_json"])?;
    ensure!(
        by_class.keys().collect::<Vec<_>>() == ["broken"],
        "{by_class:?}"
    );
    let by_prefix = listed(&case, &["--key-prefix", "报告/", "--since", "1h"])?;
    ensure!(by_prefix.len() == 1, "{by_prefix:?}");
    let newest = listed(&case, &["--limit", "1"])?;
    ensure!(newest.len() == 1, "{newest:?}");

    // Bad filters and an empty match fail with what is wrong.
    let e = fails(dlq(&case, &["list", "--class", "invalid_acl"])?)?;
    ensure!(
        e.contains("unknown dead-letter class \"invalid_acl\""),
        "{e}"
    );
    let e = fails(dlq(&case, &["list", "--since", "last week"])?)?;
    ensure!(e.contains("is not a time"), "{e}");
    let e = fails(dlq(&case, &["list", "--key", "nobody"])?)?;
    ensure!(e.contains("no dead letters"), "{e}");
    let e = fails(dlq(&case, &["list", "--until", "2000-01-01"])?)?;
    ensure!(e.contains("no dead letters"), "{e}");

    // show: the dead letter whole; --raw its bytes.
    let typo_at = all["acl-typo"]["at"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let shown = ok(dlq(&case, &["show", &typo_at])?)?;
    for want in [
        "class      invalid_field",
        "stage      decode",
        "replayed   no",
        "key        acl-typo",
        "JSON",
        "\"ACL\"",
    ] {
        ensure!(shown.contains(want), "{want:?} not in\n{shown}");
    }
    let raw = dlq(&case, &["show", "--key", "broken", "--raw"])?;
    ensure!(
        raw.status.success() && raw.stdout == b"{not json",
        "{raw:?}"
    );
    let e = fails(dlq(&case, &["show", "0:999"])?)?;
    ensure!(e.contains("no dead letter at 0:999"), "{e}");

    // A dead letter whose key has a newer record is not replayed over it unless asked.
    let newer = doc(
        "The broken gauge was repaired and reads the tide again.",
        "acl",
    )?;
    send(&mut case, "broken", &newer)?;
    case.wait_indexed(WAIT)?;
    let ends_now = ends(&case)?;
    let out = ok(dlq(&case, &["replay", "--key", "broken", "--yes"])?)?;
    ensure!(
        out.contains("superseded by")
            && out.contains("nothing to replay: 0 replayed before, 1 left out"),
        "{out}"
    );
    ensure!(
        ends(&case)? == ends_now,
        "a superseded dead letter was replayed"
    );
    let dry = ok(dlq(
        &case,
        &["replay", "--key", "broken", "--even-if-superseded"],
    )?)?;
    ensure!(dry.contains("dry run: would replay 1"), "{dry}");

    // replay --fix: a dry run first, which writes nothing.
    let fixed = doc(
        "Sediment gauges along the estuary recorded the marsh tide.",
        "acl",
    )?;
    let fix = case.dir.join("fixed.json");
    std::fs::write(&fix, &fixed)?;
    let fix = fix.to_string_lossy().to_string();
    let before = ends(&case)?;
    let dry = ok(dlq(&case, &["replay", &typo_at, "--fix", &fix])?)?;
    ensure!(dry.contains("dry run: would replay 1"), "{dry}");
    ensure!(ends(&case)? == before, "a dry run wrote to the topic");
    // A fix that would be refused again is refused before anything is written.
    let still_bad = case.dir.join("still-bad.json");
    std::fs::write(&still_bad, &misspelt)?;
    let e = fails(dlq(
        &case,
        &[
            "replay",
            &typo_at,
            "--fix",
            &still_bad.to_string_lossy(),
            "--yes",
        ],
    )?)?;
    ensure!(e.contains("refused again (invalid_field)"), "{e}");
    // --fix takes one dead letter.
    let e = fails(dlq(&case, &["replay", "--fix", &fix, "--yes"])?)?;
    ensure!(e.contains("--fix replays one dead letter"), "{e}");

    let done = ok(dlq(&case, &["replay", &typo_at, "--fix", &fix, "--yes"])?)?;
    ensure!(done.contains(&format!("replayed {typo_at} to")), "{done}");
    let after = ends(&case)?;
    let grown: Vec<(i32, i64)> = after
        .iter()
        .filter(|(p, o)| before.get(p) != Some(o))
        .map(|(p, o)| (*p, *o - 1))
        .collect();
    let [(partition, offset)] = grown.as_slice() else {
        bail!("one record should have been written: {before:?} → {after:?}");
    };
    let source = &all["acl-typo"]["source"];
    ensure!(
        source["partition"] == *partition,
        "replayed to another partition"
    );

    // The replay carries its key, the fixed value and its origin.
    let record = PartitionReader::read_one(
        &case.kafka,
        &case.kafka.topic,
        *partition,
        *offset,
        Duration::from_secs(30),
    )?
    .context("the replayed record")?;
    ensure!(record.key.as_deref() == Some(&b"acl-typo"[..]));
    ensure!(record.value.as_deref() == Some(fixed.as_slice()));
    let origin = format!("{}/{}", case.kafka.dlq_topic, typo_at.replace(':', "/"));
    ensure!(
        record.header(dlq_headers::REPLAY_OF) == Some(Some(origin.as_bytes())),
        "{:?}",
        record.headers
    );

    // The document is indexed, in both indexes, as a sequential run with the fix appended.
    log.push(("acl-typo".into(), Some(fixed.clone())));
    let expected = expected_chunks(&log)?;
    let deadline = Instant::now() + WAIT;
    while !case
        .tantivy_chunks()?
        .iter()
        .any(|c| c.doc_id == "acl-typo")
    {
        ensure!(
            Instant::now() < deadline,
            "not indexed:\n{}",
            case.log_tail()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    case.assert_holds_exactly(&expected)?;

    // Listed as replayed, where it went.
    let again = listed(&case, &["--key", "acl-typo"])?;
    ensure!(
        again["acl-typo"]["replayed_as"]["offset"] == *offset,
        "{again:?}"
    );
    let shown = ok(dlq(&case, &["show", &typo_at])?)?;
    ensure!(shown.contains("replayed   yes, as"), "{shown}");

    // A second replay, with the fix or without, writes nothing.
    for args in [
        vec!["replay", typo_at.as_str(), "--fix", fix.as_str(), "--yes"],
        vec!["replay", "--key", "acl-typo", "--yes"],
    ] {
        let second = ok(dlq(&case, &args)?)?;
        ensure!(
            second.contains("nothing to replay: 1 replayed before"),
            "{second}"
        );
        ensure!(ends(&case)? == after, "a second replay wrote to the topic");
    }
    // The pipeline took no new dead letter.
    ensure!(case.dlq_records(4, Duration::from_secs(5))?.len() == 3);

    // The broker away: an error, nothing listed.
    let e = fails(dlq_on(&case, "127.0.0.1:1", &["list"])?)?;
    ensure!(e.contains("dead-letter topic"), "{e}");
    Ok(())
}
