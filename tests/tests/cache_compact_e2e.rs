//! The embedding cache compacted to the texts the index holds, through the real broker,
//! pipeline, Milvus and model: `freshet cache compact` is refused while the pipeline holds the
//! cache, reports without writing under `--dry-run`, and once the pipeline is stopped keeps the
//! entries of indexed texts only: after it, a document with an indexed text is a cache hit (no
//! text embedded) and one with the text of a replaced version is embedded again. Past
//! `[embedding] cache_max_bytes` the pipeline compacts at start, and, still over, warns and
//! keeps every live entry.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use freshet_tests::{freshet_bin, Case};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(180);

fn doc(text: &str) -> serde_json::Value {
    json!({"title": "Note", "text": text, "content_type": "text/markdown"})
}

/// `freshet cache ARGS` with the case's settings.
fn cache(case: &Case, args: &[&str]) -> Result<Output> {
    Command::new(freshet_bin())
        .arg("cache")
        .args(args)
        .env_remove("FRESHET_CONFIG")
        .env("FRESHET_TANTIVY_PATH", case.tantivy_path())
        .env(
            "FRESHET_PIPELINE_EMBEDDING_CACHE_PATH",
            case.dir.join("cache.log"),
        )
        .env("FRESHET_LOG", "warn")
        .output()
        .context("running freshet cache")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn cache_bytes(case: &Case) -> Result<u64> {
    Ok(std::fs::metadata(case.dir.join("cache.log"))?.len())
}

/// Waits until the pipeline's `name` reaches `at_least`.
fn wait_metric(case: &Case, name: &str, at_least: f64) -> Result<f64> {
    let deadline = Instant::now() + WAIT;
    loop {
        // A pipeline just started may not listen yet.
        let v = case.metric(name);
        if let Ok(v) = v {
            if v >= at_least {
                return Ok(v);
            }
        }
        if Instant::now() > deadline {
            bail!(
                "{name}: {v:?}, waited for {at_least}; log:\n{}",
                case.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

const EMBEDDED: &str = "freshet_pipeline_embedding_texts_total{outcome=\"embedded\"}";
const HIT: &str = "freshet_pipeline_embedding_texts_total{outcome=\"cache_hit\"}";

#[test]
fn compaction_keeps_indexed_texts_and_drops_replaced_ones() -> Result<()> {
    let mut case = Case::new("cachecompact", 1)?;
    let kept = "Kingfishers dive for fish from a perch over the river.";
    let (old, new) = (
        "Herons wait at the estuary when the tide turns.",
        "Herons nest in colonies high in the alder trees.",
    );
    case.send_json("kept.md", &doc(kept))?;
    case.send_json("edited.md", &doc(old))?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    case.send_json("edited.md", &doc(new))?;
    case.wait_indexed(WAIT)?;

    // While the pipeline holds the cache: refused, the file untouched.
    let before = cache_bytes(&case)?;
    let out = cache(&case, &["compact"])?;
    ensure!(!out.status.success(), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    ensure!(err.contains("held by a running pipeline"), "{err}");
    ensure!(cache_bytes(&case)? == before);

    case.stop_pipeline()?;
    let out = cache(&case, &["compact", "--dry-run"])?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    let dry = text(&out.stdout);
    ensure!(
        dry.contains("would compact") && dry.contains("(1 dropped)"),
        "{dry}"
    );
    ensure!(cache_bytes(&case)? == before, "a dry run writes nothing");

    let out = cache(&case, &["compact"])?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    ensure!(
        report.contains("compacted") && report.contains("entries 3 -> 2 (1 dropped)"),
        "{report}"
    );
    let after = cache_bytes(&case)?;
    ensure!(after < before, "{before} -> {after}");
    ensure!(
        report.contains(&format!("bytes {before} -> {after}")),
        "{report}"
    );

    // After it, an indexed text is a cache hit, the replaced one is embedded again.
    case.start_pipeline()?;
    case.send_json("copy.md", &doc(kept))?;
    case.wait_indexed(WAIT)?;
    wait_metric(&case, HIT, 1.0)?;
    ensure!(
        case.metric(EMBEDDED)? == 0.0,
        "an indexed text embedded again"
    );
    case.send_json("old.md", &doc(old))?;
    case.wait_indexed(WAIT)?;
    ensure!(wait_metric(&case, EMBEDDED, 1.0)? == 1.0);
    let m = case.metrics()?;
    ensure!(
        m.get("freshet_pipeline_embedding_cache_entries") == Some(&3.0),
        "{m:?}"
    );
    ensure!(
        m.get("freshet_pipeline_embedding_cache_bytes").copied()
            == Some(cache_bytes(&case)? as f64)
    );

    // By size at start: a replaced text dropped, then still over a 1-byte limit with only live
    // entries: a warning, nothing live dropped.
    case.send_json(
        "old.md",
        &doc("Otters slide down the muddy bank into the water."),
    )?;
    case.wait_indexed(WAIT)?;
    case.stop_pipeline()?;
    case.extra_env
        .push(("FRESHET_EMBEDDING_CACHE_MAX_BYTES".into(), "1".into()));
    case.start_pipeline()?;
    wait_metric(
        &case,
        "freshet_pipeline_embedding_cache_compactions_total",
        1.0,
    )?;
    let m = case.metrics()?;
    ensure!(
        m.get("freshet_pipeline_embedding_cache_dropped_entries_total") == Some(&1.0),
        "{m:?}"
    );
    ensure!(
        m.get("freshet_pipeline_embedding_cache_entries") == Some(&3.0),
        "{m:?}"
    );
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_to_string(case.dir.join("pipeline.log"))?.contains("still over") {
        ensure!(
            Instant::now() < deadline,
            "no warning; log:\n{}",
            case.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}
