//! One record must not stop indexing, end to end with the real broker, Milvus, model and
//! binaries:
//!
//! - a record that kills the process whenever it is prepared (the `FRESHET_ABORT_ON` fault
//!   point aborts on it, as a parser running out of memory would) is quarantined after
//!   `crash_loop_limit` consecutive crashes: it goes to the dead-letter topic as `crash_loop`,
//!   its document leaves both indexes, every other document is indexed, nothing is lost and
//!   nothing is dead-lettered twice;
//! - a PDF whose one page inflates to a gigabyte of drawing operators (a file of about two
//!   megabytes), read by a pipeline whose address space is limited, is refused as `too_large`
//!   without a crash, and the documents sent after it are indexed.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use freshet_kafka::Record;
use freshet_pipeline::faults::{ABORTED_ON_MARK, ABORT_ON_ENV};
use freshet_tests::{expected_chunks, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);

type Log = Vec<(String, Option<Vec<u8>>)>;

fn send(case: &mut Case, log: &mut Log, key: &str, value: &Value) -> Result<()> {
    let bytes = serde_json::to_vec(value)?;
    case.send(key, Some(&bytes))?;
    log.push((key.to_string(), Some(bytes)));
    Ok(())
}

fn doc(topic: &str) -> Value {
    json!({"title": format!("Notes on {topic}"),
           "text": format!("The {topic} log: {topic} readings were taken every morning and \
                            stayed stable through the season."),
           "content_type": "text/markdown", "source": "test://crash-loop"})
}

fn header(rec: &Record, name: &str) -> String {
    rec.header(name)
        .flatten()
        .map(|v| String::from_utf8_lossy(v).to_string())
        .unwrap_or_default()
}

fn pipeline_log(case: &Case) -> String {
    std::fs::read_to_string(case.dir.join("pipeline.log")).unwrap_or_default()
}

#[test]
fn a_record_that_kills_the_pipeline_is_quarantined() -> Result<()> {
    let mut case = Case::new("crash-loop", 1)?;
    case.extra_env
        .push(("FRESHET_PIPELINE_CRASH_LOOP_LIMIT".into(), "3".into()));
    let mut log = Log::new();
    // An older version of the killer's document, indexed before the killer arrives: the
    // quarantined version must take it out of both indexes.
    send(&mut case, &mut log, "killer", &doc("killer-old"))?;
    for i in 0..4 {
        send(
            &mut case,
            &mut log,
            &format!("before-{i}"),
            &doc(&format!("before {i}")),
        )?;
    }
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    case.stop_pipeline()?;
    // From now on, preparing a record with the key `killer` aborts the process.
    case.extra_env.push((ABORT_ON_ENV.into(), "killer".into()));
    case.start_pipeline()?;
    // the killer's new version, then more documents behind it
    let value = serde_json::to_vec(&doc("killer-new"))?;
    case.send("killer", Some(&value))?;
    log.push(("killer".into(), None)); // refused: its document is deleted
    for i in 0..4 {
        send(
            &mut case,
            &mut log,
            &format!("after-{i}"),
            &doc(&format!("after {i}")),
        )?;
    }
    // Three crashes: preparing it in the workers' loop, then twice preparing it alone at start.
    for crash in 1..=3 {
        let status = case.wait_exit(WAIT)?;
        ensure!(
            !status.success(),
            "crash {crash}: the pipeline exited with {status}"
        );
        let aborts = pipeline_log(&case).matches(ABORTED_ON_MARK).count();
        ensure!(aborts == crash, "{aborts} aborts after crash {crash}");
        case.start_pipeline()?;
    }
    // The fourth run quarantines it and goes on.
    case.wait_indexed(WAIT)?;
    case.assert_holds_exactly(&expected_chunks(&log)?)?;
    let dead = case.dlq_records(1, Duration::from_secs(30))?;
    ensure!(dead.len() == 1, "{} dead letters", dead.len());
    let d = &dead[0];
    ensure!(d.key.as_deref() == Some(&b"killer"[..]));
    ensure!(
        d.value.as_deref() == Some(&value[..]),
        "the record as it was sent"
    );
    ensure!(header(d, "freshet.error.class") == "crash_loop");
    ensure!(header(d, "freshet.error.stage") == "prepare");
    ensure!(
        header(d, "freshet.error.message").contains("3 times in a row"),
        "{}",
        header(d, "freshet.error.message")
    );
    ensure!(case.metric("freshet_pipeline_quarantined_records")? == 1.0);
    ensure!(
        case.metric("freshet_pipeline_dlq_records_total{class=\"crash_loop\",stage=\"prepare\"}")?
            == 1.0
    );
    // A clean restart past the quarantined record: nothing is dead-lettered again, it no longer
    // needs holding, and what comes next is indexed.
    case.stop_pipeline()?;
    case.start_pipeline()?;
    send(&mut case, &mut log, "later", &doc("later"))?;
    case.wait_indexed(WAIT)?;
    case.assert_holds_exactly(&expected_chunks(&log)?)?;
    ensure!(case.metric("freshet_pipeline_quarantined_records")? == 0.0);
    let dead = case.dlq_records(2, Duration::from_secs(5))?;
    ensure!(
        dead.len() == 1,
        "{} dead letters after the restart",
        dead.len()
    );
    ensure!(pipeline_log(&case).matches(ABORTED_ON_MARK).count() == 3);
    Ok(())
}

/// Address space of the pipeline under test: what it needs to index ordinary documents (the
/// model, the tokenizer, the broker client, thread stacks and allocator arenas), and far less
/// than the gigabytes the bomb inflates to.
const ADDRESS_SPACE: u64 = 6 << 30;

#[test]
fn an_inflate_bomb_under_a_memory_limit_is_refused() -> Result<()> {
    let mut case = Case::new("inflate-bomb", 1)?;
    case.address_space_limit = Some(ADDRESS_SPACE);
    let bomb = freshet_operators::testing::pdf::inflate_bomb("River survey, a bomb", 1 << 30);
    ensure!(
        (1 << 20..3 << 20).contains(&bomb.len()),
        "the bomb is {} bytes",
        bomb.len()
    );
    let mut log = Log::new();
    for i in 0..3 {
        send(
            &mut case,
            &mut log,
            &format!("before-{i}"),
            &doc(&format!("before {i}")),
        )?;
    }
    use base64::Engine as _;
    let envelope = json!({"title": "Bomb", "content_type": "application/pdf",
        "content_base64": base64::engine::general_purpose::STANDARD.encode(&bomb)});
    send(&mut case, &mut log, "bomb.pdf", &envelope)?;
    for i in 0..3 {
        send(
            &mut case,
            &mut log,
            &format!("after-{i}"),
            &doc(&format!("after {i}")),
        )?;
    }
    let started = Instant::now();
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    let took = started.elapsed();
    case.assert_holds_exactly(&expected_chunks(&log)?)?;
    let dead = case.dlq_records(1, Duration::from_secs(30))?;
    ensure!(dead.len() == 1, "{} dead letters", dead.len());
    let d = &dead[0];
    ensure!(d.key.as_deref() == Some(&b"bomb.pdf"[..]));
    ensure!(
        header(d, "freshet.error.class") == "too_large",
        "{}",
        header(d, "freshet.error.class")
    );
    ensure!(header(d, "freshet.error.stage") == "prepare");
    let message = header(d, "freshet.error.message");
    ensure!(message.contains("more than"), "{message}");
    if case.try_wait_pipeline()?.is_some() {
        bail!("the pipeline exited: {}", case.log_tail());
    }
    eprintln!("indexed past the bomb in {took:?}: {message}");
    Ok(())
}
