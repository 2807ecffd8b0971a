//! The tantivy index and the Milvus collection belong together (docs/faults.md, "Wrong paths
//! and foreign collections"): an empty index path, an index of another collection or a consumer
//! group ahead of a new index stops the pipeline before it writes anything, a new index on
//! purpose reads the topics from the beginning, and the start-up reconcile deletes no more
//! than a small share of the collection unless told to. Real broker, Milvus, model and binary.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use freshet_tantivy::ChunkIndexWriter;
use freshet_tests::{
    env, expected_chunks, free_port, freshet_bin, workspace_root, Case, RIVER_WORDS,
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(180);

type Log = Vec<(String, Option<Vec<u8>>)>;

/// `n` Markdown documents of a few chunks each, published and logged.
fn publish_docs(case: &mut Case, log: &mut Log, prefix: &str, n: usize) -> Result<()> {
    for i in 0..n {
        let id = format!("{prefix}-{i}");
        let mut text = format!("# Note {i}\n\n");
        for p in 0..3 {
            let words: Vec<&str> = (0..60)
                .map(|w| RIVER_WORDS[(i * 5 + p * 11 + w * 3) % RIVER_WORDS.len()])
                .collect();
            text.push_str(&format!("## Part {p}\n\n{}.\n\n", words.join(" ")));
        }
        let v = json!({"id": id, "title": id, "text": text, "content_type": "text/markdown"});
        let bytes = serde_json::to_vec(&v)?;
        case.send(&id, Some(&bytes))?;
        log.push((id, Some(bytes)));
    }
    Ok(())
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// Starts the pipeline and expects it to stop by itself with an error whose log says `says`.
fn refused(case: &mut Case, says: &[&str]) -> Result<String> {
    case.start_pipeline()?;
    let status = case.wait_exit(WAIT)?;
    ensure!(
        !status.success(),
        "the pipeline started: {}",
        case.log_tail()
    );
    let log = case.log_tail();
    for s in says {
        ensure!(log.contains(s), "{s:?} is not in the log:\n{log}");
    }
    Ok(log)
}

fn index_id(case: &Case) -> Result<Option<String>> {
    let w = freshet_tantivy::ChunkIndexReader::open(case.tantivy_path())?;
    Ok(w.last_payload()?.and_then(|p| p.index_id))
}

/// The measured incident: after `run-local.sh`, a pipeline started in a shell without its
/// variables opened an empty index at another path, resumed from the group's offsets and
/// deleted every vector of the collection.
#[test]
fn a_wrong_index_path_never_empties_the_collection() -> Result<()> {
    let mut case = Case::new("wrongpath", 2)?;
    let mut log = Log::new();
    publish_docs(&mut case, &mut log, "doc", 8)?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    case.stop_pipeline()?;
    let vectors = sorted(case.milvus_ids()?);
    ensure!(!vectors.is_empty(), "nothing indexed");
    let first_id = index_id(&case)?.context("the index has no id")?;
    ensure!(
        case.milvus_index_id()? == Some(Some(first_id.clone())),
        "the collection is not bound to the index {first_id}"
    );

    // An empty path beside the collection: refused, nothing deleted.
    let right = case.tantivy_path();
    case.tantivy = case.dir.join("typo").join("tantivy");
    let right_canonical = std::fs::canonicalize(&right)?;
    refused(
        &mut case,
        &[
            "is new",
            &format!("holds {} vectors", vectors.len()),
            &right_canonical.display().to_string(),
            "--new-index",
        ],
    )?;
    ensure!(sorted(case.milvus_ids()?) == vectors, "Milvus changed");

    // A new index on purpose: every topic read from the beginning, the collection taken over.
    case.run_args = vec!["--new-index".into()];
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    case.stop_pipeline()?;
    case.assert_holds_exactly(&expected_chunks(&log)?)?;
    let second_id = index_id(&case)?.context("the new index has no id")?;
    ensure!(second_id != first_id, "the new index kept the old id");
    ensure!(case.milvus_index_id()? == Some(Some(second_id.clone())));
    // It is new no more: the flag is refused now.
    refused(&mut case, &["--new-index: the tantivy index", "is not new"])?;

    // The first index is not the collection's any more.
    case.run_args.clear();
    case.tantivy = right.clone();
    refused(&mut case, &[&first_id, &second_id, "--adopt-collection"])?;
    ensure!(case.milvus_index_id()? == Some(Some(second_id.clone())));
    // A query node on it serves BM25 but no vector hits from the other index's collection.
    let node = case.start_query(&[])?;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let r = node.get("/readyz")?;
        if r.status != 200 && r.body.contains("belongs to index") {
            ensure!(
                r.body.contains(&second_id) && r.body.contains(&first_id),
                "{}",
                r.body
            );
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "readyz: {} {}",
            r.status,
            r.body
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let q = "river delta sediment";
    let r = node.post("/v1/retrieve", &json!({"query": q, "mode": "vector"}))?;
    ensure!(
        r.status == 503 && r.body.contains("belongs to index"),
        "{} {}",
        r.status,
        r.body
    );
    ensure!(!node
        .doc_ids(&json!({"query": q, "mode": "bm25"}))?
        .is_empty());
    drop(node);

    // Without a collection, a new index behind the consumer group is refused too.
    case.drop_milvus_collection()?;
    case.tantivy = case.dir.join("typo2").join("tantivy");
    let topic = case.kafka.topic.clone();
    refused(&mut case, &["consumer group", &topic, "--new-index"])?;
    ensure!(
        case.milvus_index_id()?.is_none(),
        "a collection was created"
    );
    Ok(())
}

/// Chunks deleted from tantivy behind the pipeline's back stand for an index that holds much
/// less than its collection (restored from an old backup, say): the reconcile stops and says
/// what it would delete, and deletes it only when allowed.
#[test]
fn the_reconcile_deletes_a_large_share_only_when_allowed() -> Result<()> {
    let mut case = Case::new("reconcilecap", 1)?;
    let mut log = Log::new();
    publish_docs(&mut case, &mut log, "doc", 6)?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    case.stop_pipeline()?;
    let vectors = sorted(case.milvus_ids()?);

    // Two documents' chunks leave tantivy (a commit that keeps the payload).
    let gone: Vec<String> = case
        .tantivy_chunks()?
        .into_iter()
        .filter(|c| c.doc_id == "doc-0" || c.doc_id == "doc-1")
        .map(|c| c.chunk_id)
        .collect();
    ensure!(gone.len() >= 4, "{gone:?}");
    {
        let mut w = ChunkIndexWriter::open_or_create(case.tantivy_path(), 50_000_000)?;
        let payload = w.last_payload()?.context("no commit")?;
        w.apply(&[], &gone)?;
        w.commit(&payload)?;
        w.close()?;
    }
    let log_text = refused(
        &mut case,
        &[
            "would delete",
            "reconcile_max_delete_share",
            "--allow-reconcile-deletes",
            "Nothing was deleted",
        ],
    )?;
    ensure!(
        log_text.contains(&gone[0]) || log_text.contains(&gone[1]),
        "{log_text}"
    );
    ensure!(sorted(case.milvus_ids()?) == vectors, "Milvus changed");

    case.run_args = vec!["--allow-reconcile-deletes".into()];
    case.start_pipeline()?;
    let deadline = std::time::Instant::now() + WAIT;
    let want: BTreeSet<String> = case
        .tantivy_chunks()?
        .into_iter()
        .filter(|c| c.kind == freshet_operators::chunk::ChunkKind::Leaf)
        .map(|c| c.chunk_id)
        .collect();
    loop {
        // While the pipeline deletes, a listing can disagree with its count (a concurrent
        // write): that is "not yet", like a listing that still holds the strays.
        let have = case.milvus_ids();
        if have
            .as_ref()
            .is_ok_and(|ids| ids.iter().cloned().collect::<BTreeSet<_>>() == want)
        {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "not reconciled ({:?}): {}",
            have.map(|ids| ids.len()),
            case.log_tail()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    case.stop_pipeline()?;
    Ok(())
}

/// A crash between the Milvus write and the tantivy commit of the first batch leaves Milvus
/// holding the whole collection's rows with none in tantivy: those rows were noted before the
/// write, so the restart deletes them without asking and converges.
#[test]
fn a_crash_between_the_two_writes_is_reconciled_without_asking() -> Result<()> {
    let mut case = Case::new("crashnote", 1)?;
    let mut log = Log::new();
    publish_docs(&mut case, &mut log, "doc", 5)?;
    case.extra_env
        .push(("FRESHET_KILL_AT".into(), "sink.after_milvus:1".into()));
    case.start_pipeline()?;
    let status = case.wait_exit(WAIT)?;
    ensure!(!status.success(), "not killed: {}", case.log_tail());
    ensure!(
        case.tantivy_chunks()?.is_empty() && !case.milvus_ids()?.is_empty(),
        "the kill did not fall between the two writes"
    );
    case.extra_env.retain(|(k, _)| k != "FRESHET_KILL_AT");
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    case.stop_pipeline()?;
    case.assert_holds_exactly(&expected_chunks(&log)?)?;
    Ok(())
}

/// `deploy/start-pipeline.sh` keeps the index where the binaries look by default: a command run
/// afterwards in a new shell (no variable exported by the scripts) sees the stack's index.
#[test]
fn a_new_shell_sees_the_index_the_scripts_keep() -> Result<()> {
    let mut case = Case::new("newshell", 1)?;
    let home = case.dir.join("home");
    let deploy = workspace_root().join("deploy");
    // What both shells share: the user's own settings, none of the scripts' exports.
    let settings = [
        ("FRESHET_HOME", home.display().to_string()),
        ("FRESHET_KAFKA_BROKERS", case.kafka.brokers.clone()),
        ("FRESHET_KAFKA_TOPIC", case.kafka.topic.clone()),
        ("FRESHET_KAFKA_DLQ_TOPIC", case.kafka.dlq_topic.clone()),
        ("FRESHET_KAFKA_GROUP_ID", case.kafka.group_id.clone()),
        ("FRESHET_MILVUS_URL", case.milvus_url.clone()),
        ("FRESHET_MILVUS_COLLECTION", case.collection.clone()),
        ("FRESHET_EMBEDDING_MODEL_DIR", env("FRESHET_MODEL_DIR")),
        // The Japanese dictionary install.sh built, as the model: not under this home.
        (
            "FRESHET_TANTIVY_JA_DICTIONARY",
            Path::new(&env("FRESHET_HOME"))
                .join("dict")
                .join("ipadic")
                .display()
                .to_string(),
        ),
    ];
    let shell = |cmd: &mut Command| {
        cmd.env_remove("FRESHET_RUN_DIR")
            .env_remove("FRESHET_TANTIVY_PATH")
            .envs(settings.iter().map(|(k, v)| (k, v)));
    };
    let listen = format!("127.0.0.1:{}", free_port());
    let mut start = Command::new(deploy.join("start-pipeline.sh"));
    shell(&mut start);
    start
        .env("FRESHET_BIN", freshet_bin())
        .env("FRESHET_METRICS_LISTEN", &listen);
    let out = start.output()?;
    let stop = || {
        let mut stop = Command::new(deploy.join("stop-pipeline.sh"));
        shell(&mut stop);
        stop.output()
    };
    let checked = (|| {
        ensure!(out.status.success(), "start-pipeline.sh: {out:?}");
        let mut log = Log::new();
        publish_docs(&mut case, &mut log, "doc", 3)?;
        let tools = freshet_bin().with_file_name("freshet-tools");
        let mut status = Command::new(&tools);
        shell(&mut status);
        let out = status.args(["status", "--wait-secs", "120"]).output()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        ensure!(out.status.success(), "freshet-tools status: {out:?}");
        let index = home.join("run").join("index").join("tantivy");
        let line = text
            .lines()
            .find(|l| l.starts_with("tantivy "))
            .context("no tantivy line")?;
        ensure!(
            line.starts_with(&format!("tantivy {}: ", index.display())),
            "{text}"
        );
        let chunks: u64 = line
            .split(": ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .context("no chunk count")?;
        ensure!(chunks >= 3 && text.contains("caught up"), "{text}");
        // The collection's vector index (the default type) and its build progress.
        ensure!(
            text.lines()
                .any(|l| l.starts_with("milvus ") && l.contains("; HNSW index: ")),
            "{text}"
        );
        Ok(())
    })();
    let stopped = stop()?;
    checked?;
    ensure!(stopped.status.success(), "stop-pipeline.sh: {stopped:?}");
    Ok(())
}
