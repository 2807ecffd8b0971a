//! Resource faults (docs/faults.md): Milvus timing out, a full disk under the tantivy index, a
//! full disk under the embedding cache, an embedding cache that cannot be created. For each
//! fault the running pipeline stalls with a clear error (`/readyz` 503 with the cause, the
//! `stalled` gauge, an error in the log) and commits no offset past unapplied work: the tantivy
//! commit that carries the offsets holds exactly the records below them, the Kafka group
//! offsets are not ahead of it, neither moves while the fault lasts, and nothing reaches the
//! dead-letter topic. Once the fault is removed the same process resumes and both indexes
//! converge to the sequential reference. Each case has one partition, so a committed offset is
//! a prefix of the history. The small file systems are tmpfs mounts ([`SmallDisk`]), which
//! needs root.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use freshet_kafka::PartitionReader;
use freshet_tantivy::{ChunkIndexReader, CommitPayload};
use freshet_tests::disk::SmallDisk;
use freshet_tests::proxy::{host_port, TcpProxy};
use freshet_tests::{expected_chunks, Case, RIVER_WORDS};

const WAIT: Duration = Duration::from_secs(180);
/// How long a stall is watched for anything committed.
const WATCH: Duration = Duration::from_secs(4);

type Log = Vec<(String, Option<Vec<u8>>)>;

/// A document whose text no other test has (so that it is embedded, not found in a cache).
fn publish(case: &mut Case, log: &mut Log, id: &str, n: usize) -> Result<()> {
    let words: Vec<&str> = (0..40)
        .map(|i| RIVER_WORDS[(n * 7 + i * 3) % RIVER_WORDS.len()])
        .collect();
    let text = format!("{} {} {id} {n}", case.name, words.join(" "));
    let value = serde_json::to_vec(&serde_json::json!({"title": id, "text": text}))?;
    case.send(id, Some(&value))?;
    log.push((id.to_string(), Some(value)));
    Ok(())
}

fn delete(case: &mut Case, log: &mut Log, id: &str) -> Result<()> {
    case.send(id, None)?;
    log.push((id.to_string(), None));
    Ok(())
}

/// What is durable: the last tantivy commit and the group's committed Kafka offsets. The group
/// offsets are read first: both only move forward and the group commit follows the tantivy
/// commit it covers, so read in this order the group is never ahead of the commit unless the
/// pipeline committed it ahead.
fn durable(case: &Case) -> Result<(Option<CommitPayload>, BTreeMap<i32, i64>)> {
    let partitions: Vec<i32> = (0..case.partitions).collect();
    let start = partitions.iter().map(|p| (*p, 0)).collect();
    let reader = PartitionReader::new(&case.kafka, &case.kafka.topic, &partitions, &start)?;
    let committed = reader.committed()?;
    let payload = ChunkIndexReader::open(case.tantivy_path())?.last_payload()?;
    Ok((payload, committed))
}

/// [`durable`] once it stops moving. A stall holds back the epoch it is in and every later one;
/// an epoch that was complete before it may still be in the sink's hands when the stall is
/// reported, and becomes durable shortly after.
fn settled(case: &Case) -> Result<(Option<CommitPayload>, BTreeMap<i32, i64>)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = durable(case)?;
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = durable(case)?;
        if now == last {
            return Ok(now);
        }
        ensure!(
            Instant::now() < deadline,
            "still committing 30 s into a stall: {last:?} → {now:?}"
        );
        last = now;
    }
}

/// Waits until the pipeline reports a stall at `at` (`stall_retries_total`, the gauge and
/// `/readyz`); returns `/readyz`'s body.
fn wait_stalled(case: &mut Case, at: &str) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let retries = format!("freshet_pipeline_stall_retries_total{{at=\"{at}\"}}");
    loop {
        if let Some(status) = case.try_wait_pipeline()? {
            bail!(
                "the pipeline exited ({status}) instead of stalling; log:\n{}",
                case.log_tail()
            );
        }
        let m = case.metrics()?;
        let stalled = m.get("freshet_pipeline_stalled").copied().unwrap_or(0.0);
        if stalled >= 1.0 && m.get(&retries).copied().unwrap_or(0.0) >= 1.0 {
            let (status, body) = case.endpoint("/readyz")?;
            ensure!(
                status == 503,
                "/readyz answered {status} while stalled: {body}"
            );
            return Ok(body);
        }
        if Instant::now() > deadline {
            bail!("no stall at {at} reported; log:\n{}", case.log_tail());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// While stalled, once what was complete before the stall has settled ([`settled`]): what is
/// durable is exactly a prefix of the history that stops before the last record (tantivy holds
/// exactly the reference of the records below its committed offset, the group offset is not
/// ahead of it), and for [`WATCH`] nothing more becomes durable while the process stays alive.
fn assert_nothing_committed_past_the_stall(case: &mut Case, log: &Log) -> Result<()> {
    let before = settled(case)?;
    let topic = &case.kafka.topic;
    let next = before
        .0
        .as_ref()
        .and_then(|p| p.offsets.get(topic))
        .and_then(|o| o.get(&0))
        .copied()
        .unwrap_or(0);
    ensure!(
        (next as usize) < log.len(),
        "all {} records are durable although a write stalls",
        log.len()
    );
    ensure!(
        before.1.get(&0).is_none_or(|g| *g <= next),
        "the group offsets {:?} are ahead of the tantivy commit ({next})",
        before.1
    );
    case.assert_tantivy_holds_exactly(&expected_chunks(&log[..next as usize])?)?;
    let until = Instant::now() + WATCH;
    while Instant::now() < until {
        ensure!(
            case.try_wait_pipeline()?.is_none(),
            "the pipeline exited while stalled; log:\n{}",
            case.log_tail()
        );
        let now = durable(case)?;
        ensure!(
            now == before,
            "committed while stalled: {before:?} → {now:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(())
}

/// After the fault: the same process resumes, both indexes hold the reference, the pipeline is
/// ready again and nothing went to the dead-letter topic.
fn assert_resumed(case: &mut Case, log: &Log) -> Result<()> {
    case.wait_indexed(WAIT)?;
    case.assert_holds_exactly(&expected_chunks(log)?)?;
    ensure!(case.metric("freshet_pipeline_stalled")? == 0.0);
    let (status, body) = case.endpoint("/readyz")?;
    ensure!(status == 200, "/readyz after the fault: {status} {body}");
    let dlq = case.dlq_records(0, Duration::from_secs(2))?;
    ensure!(
        dlq.is_empty(),
        "{} dead letters for a fault that is no record's",
        dlq.len()
    );
    let log_text = std::fs::read_to_string(case.dir.join("pipeline.log"))?;
    ensure!(
        log_text.contains("succeeded again"),
        "the log says the stall ended; log:\n{}",
        case.log_tail()
    );
    case.stop_pipeline()
}

/// The start of every test: documents indexed by a running pipeline, the group offsets caught
/// up with the tantivy commit.
fn indexed(case: &mut Case, log: &mut Log, n: usize) -> Result<()> {
    for i in 0..n {
        publish(case, log, &format!("d{i}"), i)?;
    }
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    // the group offsets follow the commit in the background
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let d = durable(case)?;
        let committed_all = d.0.as_ref().is_some_and(|p| {
            p.offsets
                .get(&case.kafka.topic)
                .is_some_and(|o| o.iter().all(|(part, next)| d.1.get(part) == Some(next)))
        });
        if committed_all {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "group offsets never caught up: {d:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A new document, an edit and a delete (work for every index), and `more` new documents.
fn changes(case: &mut Case, log: &mut Log, more: usize) -> Result<()> {
    publish(case, log, "new", 100)?;
    publish(case, log, "d0", 101)?;
    delete(case, log, "d1")?;
    for i in 0..more {
        publish(case, log, &format!("more{i}"), 200 + i)?;
    }
    Ok(())
}

#[test]
fn milvus_timing_out_stalls_the_sink_and_the_same_process_resumes() -> Result<()> {
    let mut case = Case::new("fault-milvus-timeout", 1)?;
    let proxy = TcpProxy::start(&host_port(&freshet_tests::env("FRESHET_MILVUS_URL"))?)?;
    case.extra_env.extend([
        (
            "FRESHET_MILVUS_URL".into(),
            format!("http://{}", proxy.addr),
        ),
        // Short enough for a quick stall, long enough to load a new collection while other
        // tests run.
        ("FRESHET_MILVUS_TIMEOUT".into(), "15s".into()),
    ]);
    let mut log = Log::new();
    indexed(&mut case, &mut log, 4)?;

    proxy.hold();
    changes(&mut case, &mut log, 0)?;
    let why = wait_stalled(&mut case, "milvus")?;
    ensure!(why.contains("Milvus"), "/readyz names the cause: {why}");
    assert_nothing_committed_past_the_stall(&mut case, &log)?;

    proxy.release();
    assert_resumed(&mut case, &log)
}

#[test]
fn a_full_disk_under_tantivy_stalls_the_sink_until_space_is_freed() -> Result<()> {
    let mut case = Case::new("fault-tantivy-full", 1)?;
    let disk = SmallDisk::mount(&case.tantivy_path(), 32 << 20, false)?;
    let mut log = Log::new();
    indexed(&mut case, &mut log, 4)?;

    disk.fill()?;
    ensure!(disk.available()? < 4096, "the disk is full");
    changes(&mut case, &mut log, 0)?;
    let why = wait_stalled(&mut case, "tantivy")?;
    ensure!(why.contains("tantivy"), "/readyz names the cause: {why}");
    assert_nothing_committed_past_the_stall(&mut case, &log)?;

    disk.free()?;
    assert_resumed(&mut case, &log)
}

#[test]
fn a_full_disk_under_the_embedding_cache_stalls_instead_of_refusing_the_texts() -> Result<()> {
    let mut case = Case::new("fault-cache-full", 1)?;
    let disk = SmallDisk::mount(&case.dir.join("cachefs"), 8 << 20, false)?;
    case.extra_env.push((
        "FRESHET_PIPELINE_EMBEDDING_CACHE_PATH".into(),
        disk.path.join("cache.log").display().to_string(),
    ));
    let mut log = Log::new();
    indexed(&mut case, &mut log, 3)?;

    disk.fill()?;
    // More vectors than the free end of the cache file's last page holds.
    changes(&mut case, &mut log, 12)?;
    let why = wait_stalled(&mut case, "embedding_cache")?;
    ensure!(
        why.contains("No space left on device"),
        "/readyz names the cause: {why}"
    );
    assert_nothing_committed_past_the_stall(&mut case, &log)?;

    disk.free()?;
    assert_resumed(&mut case, &log)
}

#[test]
fn an_embedding_cache_that_cannot_be_created_stops_the_start_with_its_path() -> Result<()> {
    let mut case = Case::new("fault-cache-readonly", 1)?;
    let disk = SmallDisk::mount(&case.dir.join("cachefs"), 1 << 20, true)?;
    let path = disk.path.join("cache.log");
    case.extra_env.push((
        "FRESHET_PIPELINE_EMBEDDING_CACHE_PATH".into(),
        path.display().to_string(),
    ));
    let mut log = Log::new();
    publish(&mut case, &mut log, "a", 0)?;
    case.start_pipeline()?;
    let status = case.wait_exit(Duration::from_secs(120))?;
    ensure!(!status.success(), "started without a cache: {status}");
    let tail = case.log_tail();
    ensure!(
        tail.contains(&path.display().to_string()) && tail.contains("Read-only file system"),
        "the error names the cache and why; log:\n{tail}"
    );
    Ok(())
}
