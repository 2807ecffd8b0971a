//! An idle pipeline sleeps. Its workers park between polls (until a record is fetched, another
//! worker sends them data or progress, the sink's writer finishes, or time has to move on) and
//! nothing spins: with nothing to read, the whole process uses a small share of one core. A
//! record published after a quiet spell still wakes the worker that reads it, and the idle
//! worker beside it moves time past the record at once, not at its next tick.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use freshet_tests::{cpu_seconds, Case};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(180);
/// A spinning worker takes a whole core. The idle debug pipeline (two workers moving time on
/// every 100 ms, librdkafka's fetches, the metrics server) took 2.4% of one; with its workers
/// moving time on every 5 ms, 39% (docs/benchmarks.md, "Freshness budget").
const MAX_IDLE_SHARE: f64 = 0.25;
/// An idle worker's tick in the last phase: far longer than a record takes to be indexed, so a
/// record that waited for the tick of the worker that did not read it would miss [`PROMPT`].
const LONG_TICK_MS: u64 = 120_000;
const PROMPT: Duration = Duration::from_secs(30);

fn doc(id: &str, text: &str) -> serde_json::Value {
    json!({"op": "upsert", "id": id, "title": "Idle", "text": text, "acl": "public"})
}

#[test]
fn an_idle_pipeline_sleeps_and_wakes_for_a_record() -> Result<()> {
    let mut case = Case::new("idle", 2)?;
    case.send_json("first", &doc("first", "A weir holds the river back."))?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    let pid = case.pipeline_pid().context("the pipeline is not running")?;

    // Let the start-up work (the first commit, the model's warm-up) finish, then measure.
    std::thread::sleep(Duration::from_secs(5));
    let before = cpu_seconds(pid)?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    let used = cpu_seconds(pid)? - before;
    let share = used / started.elapsed().as_secs_f64();
    eprintln!(
        "idle pipeline: {used:.2} CPU s in {:?} ({:.1}% of a core)",
        started.elapsed(),
        share * 100.0
    );
    anyhow::ensure!(
        share < MAX_IDLE_SHARE,
        "the idle pipeline used {:.0}% of a core (at most {:.0}% expected): something spins",
        share * 100.0,
        MAX_IDLE_SHARE * 100.0
    );

    case.send_json("second", &doc("second", "A sluice lets the water through."))?;
    case.wait_indexed(WAIT)?;

    // Idle workers that move time on only every two minutes: records read by either worker
    // (each reads one of the two partitions) are still indexed promptly, because the other
    // moves past them as soon as it hears of the read.
    case.stop_pipeline()?;
    case.extra_env.push((
        "FRESHET_PIPELINE_BATCH_MAX_WAIT_MS".into(),
        LONG_TICK_MS.to_string(),
    ));
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    for (i, text) in [
        "A leat feeds the mill.",
        "A flume carries it over the road.",
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("late-{i}");
        let sent = Instant::now();
        case.send_json(&key, &doc(&key, text))?;
        case.wait_indexed(PROMPT).with_context(|| {
            format!("{key}: not indexed within {PROMPT:?} (the idle worker waited for its tick?)")
        })?;
        eprintln!("{key}: indexed {:?} after it was sent", sent.elapsed());
    }
    Ok(())
}
