//! Folder sync through the real broker, pipeline, Milvus, model and query node: `freshet watch`
//! follows creates, edits, renames, deletes and directory moves in a real directory, and after
//! each step both indexes hold exactly what the directory's files make; killed (SIGKILL) and
//! restarted, the watcher publishes only what changed while it was down (counted in the topic).

use std::fs;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use freshet_tests::query::request;
use freshet_tests::watch::{directory_records, WatchProcess};
use freshet_tests::{expected_chunks, free_port, workspace_root, Case};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

/// Both indexes hold exactly the directory's files.
fn exact(case: &mut Case, dir: &Path, watcher: &mut WatchProcess) -> Result<()> {
    let expected = expected_chunks(&directory_records(dir)?)?;
    case.wait_holds_exactly(&expected, WAIT, watcher)
}

fn md(title: &str, body: &str) -> String {
    format!("# {title}\n\n{body}\n")
}

#[test]
fn watched_directory_changes_reach_both_indexes_exactly() -> Result<()> {
    let mut case = Case::new("watch", 2)?;
    let dir = case.dir.join("docs");
    let state = case.dir.join("watch-state.redb");
    fs::create_dir_all(dir.join("notes"))?;
    fs::write(
        dir.join("a.md"),
        md("Alpha", "The heron waits at the estuary."),
    )?;
    fs::write(
        dir.join("b.md"),
        md("Beta", "Sediment settles in the marsh."),
    )?;
    fs::write(
        dir.join("c.txt"),
        "Plain notes about the levee and the tide.",
    )?;
    fs::write(
        dir.join("notes/d.md"),
        md("Delta", "Meanders cut the floodplain."),
    )?;
    fs::write(
        dir.join("notes/e.md"),
        md("Echo", "Silt from the watershed."),
    )?;
    let fixtures = workspace_root().join("operators/tests/fixtures");
    fs::copy(fixtures.join("parse/report.docx"), dir.join("report.docx"))?;
    fs::copy(fixtures.join("code/engine.rs"), dir.join("engine.rs"))?;
    fs::write(dir.join("bad.txt"), [0xff, 0xfe, 0x00])?;

    case.start_pipeline()?;
    let node = case.start_query(&[])?;
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut watcher = case.start_watch(&dir, &state, &["--metrics-listen", &metrics])?;
    exact(&mut case, &dir, &mut watcher)?;
    // Its endpoint: ready after the start scan, which published seven files and refused one.
    assert_eq!(request(&metrics, "GET", "/readyz", &[], b"")?.status, 200);
    let text = request(&metrics, "GET", "/metrics", &[], b"")?.body;
    for line in [
        "freshet_watch_records_total{op=\"upsert\"} 7",
        "freshet_watch_dead_letters_total 1",
        "freshet_watch_syncs_total{kind=\"scan\"} 1",
        // The Kafka connector's count of the records the broker acknowledged to the watcher.
        "freshet_watch_kafka_produced_records_total 7",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    // The unreadable file is dead-lettered with its path, not published.
    let dlq = case.dlq_records(1, Duration::from_secs(30))?;
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].key.as_deref(), Some(&b"bad.txt"[..]));
    let path = dlq[0]
        .header("freshet.source.path")
        .flatten()
        .unwrap_or_default();
    assert!(String::from_utf8_lossy(path).ends_with("docs/bad.txt"));

    // An edit: the new text is found by both routes.
    fs::write(
        dir.join("a.md"),
        md("Alpha", "A kingfisher dives into the estuary."),
    )?;
    exact(&mut case, &dir, &mut watcher)?;
    for mode in ["bm25", "vector"] {
        let body = json!({"query": "kingfisher dives", "k": 3, "mode": mode});
        node.wait_for(&body, WAIT, |ids| {
            ids.first().map(String::as_str) == Some("a.md")
        })?;
    }
    // A rename, a delete, a directory moved, a new directory with a file.
    fs::rename(dir.join("b.md"), dir.join("beta-renamed.md"))?;
    exact(&mut case, &dir, &mut watcher)?;
    fs::remove_file(dir.join("c.txt"))?;
    exact(&mut case, &dir, &mut watcher)?;
    fs::rename(dir.join("notes"), dir.join("archive"))?;
    exact(&mut case, &dir, &mut watcher)?;
    fs::create_dir_all(dir.join("new/deeper"))?;
    fs::write(
        dir.join("new/deeper/f.md"),
        md("Foxtrot", "Spring freshet."),
    )?;
    exact(&mut case, &dir, &mut watcher)?;
    // A directory moved out of the tree, then one removed.
    fs::rename(dir.join("archive"), case.dir.join("archive-outside"))?;
    exact(&mut case, &dir, &mut watcher)?;
    fs::remove_dir_all(dir.join("new"))?;
    exact(&mut case, &dir, &mut watcher)?;

    // Killed, files changed while it is down, restarted: only those changes are published.
    watcher.kill()?;
    let before = case.topic_records()?;
    fs::write(
        dir.join("a.md"),
        md("Alpha", "Edited while the watcher was down."),
    )?;
    fs::remove_file(dir.join("engine.rs"))?;
    fs::write(
        dir.join("g.md"),
        md("Golf", "Created while the watcher was down."),
    )?;
    // Same bytes, new modification time: not a change.
    let touched = fs::File::options()
        .write(true)
        .open(dir.join("report.docx"))?;
    touched.set_modified(std::time::SystemTime::now() + Duration::from_secs(3))?;
    drop(touched);
    let mut watcher = case.start_watch(&dir, &state, &[])?;
    exact(&mut case, &dir, &mut watcher)?;
    let after = case.topic_records()?;
    assert_eq!(after - before, 3, "one upsert, one tombstone, one new file");
    // Nothing changed: a restart publishes nothing.
    watcher.kill()?;
    let mut watcher = case.start_watch(&dir, &state, &[])?;
    std::thread::sleep(Duration::from_secs(3));
    watcher.check_alive()?;
    assert_eq!(case.topic_records()?, after);
    exact(&mut case, &dir, &mut watcher)?;
    Ok(())
}
