//! Randomized crash trials against the real broker, Milvus and model (tests/src/chaos,
//! docs/faults.md). CI runs a short series; a long one is
//!
//! ```text
//! FRESHET_CHAOS_TRIALS=100 FRESHET_CHAOS_REPORT=chaos.txt deploy/test.sh -- --test chaos_e2e
//! ```
//!
//! `FRESHET_CHAOS_SEED` fixes the first trial's seed (trial i uses seed + i), which reproduces
//! a failing trial; `FRESHET_CHAOS_CHANGES` sets the changes per trial;
//! `FRESHET_CHAOS_OUTAGES` the outages of each trial (`broker,milvus,query`, the default, or
//! `none`) and `FRESHET_CHAOS_MILVUS_DOWN_MAX_S` how long Milvus stays down at most (default 5;
//! 60 in the long series of docs/faults.md).

use std::io::Write;

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use freshet_pipeline::faults::{KILLED_AT_MARK, KILL_AT_ENV};
use freshet_tests::chaos::outages::Config;
use freshet_tests::chaos::queries::QueryStats;
use freshet_tests::chaos::stack::Stack;
use freshet_tests::chaos::{self, Death, Size};
use freshet_tests::{expected_chunks, Case};

fn var(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The outages `FRESHET_CHAOS_OUTAGES` and `FRESHET_CHAOS_MILVUS_DOWN_MAX_S` ask for.
fn outage_config() -> Result<Config> {
    let mut cfg = Config::none();
    cfg.milvus_down_max = Duration::from_secs(var("FRESHET_CHAOS_MILVUS_DOWN_MAX_S").unwrap_or(5));
    let list = std::env::var("FRESHET_CHAOS_OUTAGES").unwrap_or("broker,milvus,query".into());
    for kind in list.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        match kind {
            "broker" => cfg.broker = true,
            "milvus" => cfg.milvus = true,
            "query" => cfg.query = true,
            "none" => {}
            other => anyhow::bail!("FRESHET_CHAOS_OUTAGES: unknown outage {other:?}"),
        }
    }
    Ok(cfg)
}

#[test]
fn randomized_kills_converge_to_the_sequential_reference() -> Result<()> {
    let trials = var("FRESHET_CHAOS_TRIALS").unwrap_or(3);
    let first = var("FRESHET_CHAOS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let size = Size {
        changes: var("FRESHET_CHAOS_CHANGES").unwrap_or(400) as usize,
        documents: 200,
        kills: 4,
    };
    let mut report = match std::env::var("FRESHET_CHAOS_REPORT") {
        Ok(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .with_context(|| format!("opening {path}"))?,
        ),
        Err(_) => None,
    };
    let cfg = outage_config()?;
    // Broker and Milvus outages kill services: the trials' own.
    let stack = if cfg.broker || cfg.milvus {
        Some(Stack::start_from_env()?)
    } else {
        None
    };
    let (mut brokers, mut milvuses, mut nodes, mut exits, mut resumed) = (0, 0, 0, 0, 0);
    let mut repaired = Vec::new();
    let mut queries = QueryStats::default();
    let mut passed = 0;
    let mut failures = Vec::new();
    let mut points = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..trials {
        let seed = first + i;
        let line = match chaos::trial(seed, size, &cfg, stack.as_deref()) {
            Ok(o) => {
                passed += 1;
                brokers += o.outages.broker;
                milvuses += o.outages.milvus;
                nodes += o.outages.query;
                exits += o.outages.pipeline_exits.len();
                resumed += o.outages.resumed;
                queries.add(&o.queries);
                if o.repairs > 0 {
                    repaired.push(seed);
                }
                for e in &o.outages.pipeline_exits {
                    eprintln!("seed {seed}: the pipeline stopped during an outage: {e}");
                }
                for d in &o.deaths {
                    let key = match d {
                        Death::Point(p) => p.to_string(),
                        Death::PointMissed(_) => "missed (killed from outside)".into(),
                        Death::Timer(_) => "random moment".into(),
                    };
                    *points.entry(key).or_default() += 1;
                }
                format!("ok {}", o.line())
            }
            Err(e) => {
                let line = format!("FAILED seed={seed}: {e:#}");
                failures.push(line.clone());
                line
            }
        };
        eprintln!("chaos trial {}/{trials}: {line}", i + 1);
        if let Some(f) = report.as_mut() {
            writeln!(f, "{line}")?;
        }
    }
    let summary = format!(
        "chaos: {passed}/{trials} trials passed; kills: {points:?}; outages survived: \
         broker {brokers}, milvus {milvuses}, query node {nodes} (pipeline runs stopped by an \
         outage and restarted: {exits}; runs caught up after an outage with Milvus equal to \
         tantivy: {resumed}); queries: {} answers checked ({} hits), {} wrong, \
         {} degraded, 5xx {:?}, {} unanswered; trials with a repaired tantivy commit (kept, \
         see the pipeline log): {repaired:?}",
        queries.answers,
        queries.hits,
        queries.wrong_count,
        queries.degraded,
        queries.server_errors,
        queries.unanswered
    );
    eprintln!("{summary}");
    if let Some(f) = report.as_mut() {
        writeln!(f, "{summary}")?;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    Ok(())
}

/// A dead letter written just before a kill (its record not yet covered by a commit) is not
/// written again when the restarted pipeline reads that record a second time; later refusals
/// still are.
#[test]
fn a_dead_letter_written_before_a_kill_is_not_written_again() -> Result<()> {
    let mut case = Case::new("dlq_once", 1)?;
    let mut log: Vec<(String, Option<Vec<u8>>)> = Vec::new();
    let mut send = |case: &mut Case, key: &str, value: &[u8]| -> Result<()> {
        case.send(key, Some(value))?;
        log.push((key.to_string(), Some(value.to_vec())));
        Ok(())
    };
    // The refused record first: the first batch the sink applies holds it.
    send(&mut case, "b", br#"{"op":"upsert","id":"b","text":"#)?;
    send(
        &mut case,
        "a",
        br#"{"title":"A","text":"alpha river delta"}"#,
    )?;
    case.extra_env
        .push((KILL_AT_ENV.into(), "sink.after_dead_letters:1".into()));
    case.start_pipeline()?;
    let status = case.wait_exit(Duration::from_secs(60))?;
    case.extra_env.clear();
    ensure!(
        case.log_tail().contains(KILLED_AT_MARK),
        "not killed at the point ({status}); log:\n{}",
        case.log_tail()
    );
    // The dead letter is out; the commit covering its record is not.
    ensure!(case.dlq_records(1, Duration::from_secs(10))?.len() == 1);
    send(&mut case, "c", b"\xff not json")?;
    case.start_pipeline()?;
    case.wait_indexed(Duration::from_secs(120))?;
    case.assert_holds_exactly(&expected_chunks(&log)?)?;
    let dlq = case.dlq_records(3, Duration::from_secs(4))?;
    let keys: Vec<String> = dlq
        .iter()
        .map(|r| String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(keys, ["b", "c"], "each refused record once, in order");
    let full_log = std::fs::read_to_string(case.dir.join("pipeline.log"))?;
    assert!(
        full_log.contains("already on the dead-letter topic"),
        "the restart found the dead letter; log:\n{}",
        case.log_tail()
    );
    case.stop_pipeline()?;
    Ok(())
}
