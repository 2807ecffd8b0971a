//! Randomized crash trials (docs/faults.md): a seeded history of document changes streamed into
//! a case's topic while the real pipeline runs and is SIGKILLed several times (at a named kill
//! point, `freshet_pipeline::faults`, or at a random moment), with more changes arriving while
//! it is down; then a clean run catches up and the trial checks that
//!
//! - both indexes equal the sequential reference exactly ([`Case::assert_holds_exactly`]: chunk
//!   ids, texts, metadata, ACLs, a Milvus row for every leaf and nothing else),
//! - the dead-letter topic holds exactly the refused records, once each, with their class,
//! - every document removed last has a delete receipt, none has two for one removal, and no
//!   receipt outlives a commit that never happened ([`receipts`]),
//! - no text was embedded twice across the restarts (the texts the model embedded, summed over
//!   every run from the pipeline's log, are at most the vectors in the embedding cache).
//!
//! With outages ([`outages`]), the trial also SIGKILLs and restarts its own broker, its own
//! Milvus and a query node that a thread asks continuously ([`queries`]); no answer may hold a
//! deleted document, one its principals may not see, or one its filter excludes.
//!
//! The seed alone reproduces a trial's history, its kill plan and its outage plan.

pub mod history;
pub mod outages;
pub mod queries;
pub mod receipts;
pub mod stack;

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use freshet_kafka::dlq_headers;
use freshet_operators::chunk::{ChunkerConfig, HfTokenCounter};
use freshet_operators::intake::{intake, Intake};
use freshet_operators::limits::RecordLimits;
use freshet_pipeline::faults::{KILLED_AT_MARK, KILL_AT_ENV, POINTS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{env, expected_chunks, Case};
use outages::Outages;
use queries::{Querier, QueryStats};
use stack::Services;

/// How long a clean run may take to catch up, and a life to reach its kill point.
pub(crate) const CATCH_UP: Duration = Duration::from_secs(180);
const POINT_WAIT: Duration = Duration::from_secs(20);
/// The log line the pipeline's embedder writes per batch at debug level.
const EMBED_LINE: &str = "embedding batch embedded=";

/// How one run of the pipeline ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Death {
    /// SIGKILLed by itself at this kill point.
    Point(&'static str),
    /// Armed at a point it did not reach within [`POINT_WAIT`]: SIGKILLed from outside.
    PointMissed(&'static str),
    /// SIGKILLed from outside after this many milliseconds.
    Timer(u64),
}

/// What a trial did and found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub seed: u64,
    pub partitions: i32,
    pub batch_max_records: usize,
    pub changes: usize,
    pub deaths: Vec<Death>,
    pub dead_letters: usize,
    pub embedded: u64,
    pub cached_vectors: u64,
    pub chunks: usize,
    pub outages: outages::Report,
    pub queries: QueryStats,
    /// Commits the pipeline found wrong and wrote again ([`freshet_pipeline::sink::verify`]).
    pub repairs: usize,
}

impl Outcome {
    /// One line for the test output and the report.
    pub fn line(&self) -> String {
        let deaths: Vec<String> = self
            .deaths
            .iter()
            .map(|d| match d {
                Death::Point(p) => format!("at {p}"),
                Death::PointMissed(p) => format!("missed {p}"),
                Death::Timer(ms) => format!("after {ms} ms"),
            })
            .collect();
        let o = &self.outages;
        let q = &self.queries;
        format!(
            "seed={} partitions={} batch={} changes={} chunks={} dead_letters={} embedded={} \
             cached={} kills=[{}] outages: broker={} milvus={} (down {} ms, restart {} ms) \
             query_node={} pipeline_exits={} resumed={} [{}] queries: answers={} hits={} wrong={} \
             degraded={} 5xx={} unanswered={} repaired_commits={}",
            self.seed,
            self.partitions,
            self.batch_max_records,
            self.changes,
            self.chunks,
            self.dead_letters,
            self.embedded,
            self.cached_vectors,
            deaths.join(", "),
            o.broker,
            o.milvus,
            o.milvus_down_ms,
            o.milvus_start_ms,
            o.query,
            o.pipeline_exits.len(),
            o.resumed,
            o.placed.join("; "),
            q.answers,
            q.hits,
            q.wrong_count,
            q.degraded,
            q.five_xx(),
            q.unanswered,
            self.repairs,
        )
    }
}

/// The size of a trial.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    pub changes: usize,
    pub documents: usize,
    pub kills: usize,
}

/// Runs the trial of `seed`, with the outages `cfg` asks for on `services` (the trials' own
/// broker and Milvus; `None`: the shared ones, no broker or Milvus outage); an error names the
/// seed. A failed assertion (a panic) is such an error too, so that a series goes on.
pub fn trial(
    seed: u64,
    size: Size,
    cfg: &outages::Config,
    services: Option<&Services>,
) -> Result<Outcome> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(seed, size, cfg, services)
    }))
    .unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic without a message");
        Err(anyhow!("{msg}"))
    })
    .with_context(|| {
        format!(
            "chaos trial seed {seed} failed; reproduce with FRESHET_CHAOS_SEED={seed} \
             FRESHET_CHAOS_TRIALS=1 FRESHET_CHAOS_CHANGES={} FRESHET_CHAOS_OUTAGES={} \
             FRESHET_CHAOS_MILVUS_DOWN_MAX_S={} deploy/test.sh -- --test chaos_e2e",
            size.changes,
            cfg.names(),
            cfg.milvus_down_max.as_secs()
        )
    })
}

fn run(
    seed: u64,
    size: Size,
    cfg: &outages::Config,
    services: Option<&Services>,
) -> Result<Outcome> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_c4a0_5f00_d5e1);
    let ops = history::generate(seed, size.changes, size.documents);
    let partitions = rng.gen_range(1..=3);
    let batch_max_records = rng.gen_range(2..=24);
    let name = format!("chaos{}", seed % 100_000);
    let mut case = match services {
        Some(s) => Case::new_on(&name, partitions, &s.brokers(), &s.milvus_url())?,
        None => Case::new(&name, partitions)?,
    };
    // Kept (directory, collection, `sent.jsonl`) unless the trial gets to its end.
    case.keep = true;
    case.extra_env.extend([
        (
            "FRESHET_PIPELINE_BATCH_MAX_RECORDS".to_string(),
            batch_max_records.to_string(),
        ),
        (
            "FRESHET_LOG".to_string(),
            "info,freshet_pipeline::embedder=debug,freshet_pipeline::sink::apply=trace".to_string(),
        ),
    ]);
    // Slices: sent while running, then while down, for each kill; the last one during the clean run.
    let slices = split(&mut rng, ops.len(), 2 * size.kills + 1);
    let mut sent = 0usize;
    let mut log: Vec<(String, Option<Vec<u8>>)> = Vec::new();
    let running: Vec<usize> = (0..=size.kills).map(|k| slices[2 * k]).collect();
    let mut outages = Outages::new(outages::Plan::new(seed, &running, cfg), services.cloned());
    let querier = if cfg.query {
        Some(start_queries(
            &mut case,
            seed,
            &ops,
            &mut log,
            &mut outages,
        )?)
    } else {
        None
    };
    let mut deaths = Vec::new();
    for k in 0..size.kills {
        let armed = rng.gen_bool(0.75).then(|| {
            let point = POINTS[rng.gen_range(0..POINTS.len())];
            (point, rng.gen_range(1..=4u32))
        });
        // A run that hosts an outage dies at a random moment after it.
        let armed = armed.filter(|_| !outages.plan.hosts(k));
        let timer_ms = rng.gen_range(300..4000u64);
        if let Some((point, nth)) = armed {
            case.extra_env
                .push((KILL_AT_ENV.to_string(), format!("{point}:{nth}")));
        }
        let life_from = log_len(&case);
        case.start_pipeline()?;
        case.extra_env.retain(|(k, _)| k != KILL_AT_ENV);
        let started = Instant::now();
        let end = sent + slices[2 * k];
        send_paced(
            &mut case,
            &mut rng,
            &ops[sent..end],
            &mut log,
            (k, &mut outages),
        )?;
        outages.after(&mut case, k)?;
        sent = end;
        let death = match armed {
            Some((point, _)) => match wait_death(&mut case, POINT_WAIT)? {
                Some(status) => {
                    ensure!(
                        status.signal() == Some(SIGKILL),
                        "run {k} armed at {point} ended with {status}, not SIGKILL; log:\n{}",
                        case.log_tail()
                    );
                    ensure!(
                        log_since(&case, life_from).contains(&format!("{KILLED_AT_MARK} {point}")),
                        "run {k} was SIGKILLed but not at {point}; log:\n{}",
                        case.log_tail()
                    );
                    Death::Point(point)
                }
                None => {
                    case.kill_pipeline()?;
                    Death::PointMissed(point)
                }
            },
            None => {
                let at = Duration::from_millis(timer_ms);
                if let Some(left) = at.checked_sub(started.elapsed()) {
                    std::thread::sleep(left);
                }
                if let Some(status) = wait_death(&mut case, Duration::ZERO)? {
                    bail!(
                        "run {k} exited by itself with {status}; log:\n{}",
                        case.log_tail()
                    );
                }
                case.kill_pipeline()?;
                Death::Timer(started.elapsed().as_millis() as u64)
            }
        };
        deaths.push(death);
        // Changes while it is down.
        let end = sent + slices[2 * k + 1];
        for op in &ops[sent..end] {
            send(&mut case, op, &mut log)?;
        }
        sent = end;
    }

    // The clean run: the rest of the history, then catch up and stop cleanly.
    let log_path = case.dir.join("pipeline.log");
    let clean_from = log_len(&case);
    case.start_pipeline()?;
    send_paced(
        &mut case,
        &mut rng,
        &ops[sent..],
        &mut log,
        (size.kills, &mut outages),
    )?;
    outages.after(&mut case, size.kills)?;
    case.wait_indexed(CATCH_UP)?;
    outages.node_serves_vectors()?;
    let queries = match querier {
        Some(q) => q.stop()?,
        None => QueryStats::default(),
    };
    drop(outages.node.take());
    ensure!(
        queries.wrong_count == 0 && queries.unexpected.is_empty(),
        "{} wrong answers, e.g. {:#?}; unexpected statuses: {:#?}",
        queries.wrong_count,
        queries.wrong,
        queries.unexpected
    );

    let expected = expected_chunks(&log)?;
    case.assert_holds_exactly(&expected)?;
    let dead_letters = check_dead_letters(&case, &log)?;
    receipts::check(&case, &log)?;
    let clean_metric =
        case.metric("freshet_pipeline_embedding_texts_total{outcome=\"embedded\"}")?;
    case.stop_pipeline()?;

    let (embedded, clean_embedded) = embedded_in_log(&log_path, clean_from)?;
    // The log is a faithful count: the clean run's lines add up to its own counter.
    ensure!(
        clean_embedded == clean_metric as u64,
        "the clean run logged {clean_embedded} embedded texts, its counter says {clean_metric}"
    );
    let cache = freshet_embedding::DiskCache::open(case.dir.join("cache.log"))
        .map_err(|e| anyhow!("opening the embedding cache: {e}"))?;
    let cached_vectors = cache.len();
    ensure!(
        embedded <= cached_vectors,
        "texts were embedded twice across restarts: {embedded} embedded in all runs, \
         {cached_vectors} distinct vectors cached"
    );
    // A repaired commit passes, but is a defect to trace: its directory and collection stay.
    let repairs = repairs_in_log(&log_path)?;
    case.keep = repairs > 0;
    Ok(Outcome {
        seed,
        partitions,
        batch_max_records,
        changes: ops.len(),
        deaths,
        dead_letters,
        embedded,
        cached_vectors,
        chunks: expected.len(),
        outages: outages.report,
        queries,
        repairs,
    })
}

/// Sends the sentinel documents of [`queries`] and their deletes, has a pipeline run index
/// them and stop, then starts the query node and the query thread.
fn start_queries(
    case: &mut Case,
    seed: u64,
    ops: &[history::Op],
    log: &mut Vec<(String, Option<Vec<u8>>)>,
    outages: &mut Outages,
) -> Result<Querier> {
    for (key, value) in queries::sentinels(seed) {
        send_record(case, key, value, log)?;
    }
    case.start_pipeline()?;
    case.wait_indexed(CATCH_UP)?;
    case.stop_pipeline()?;
    outages.start_node(case)?;
    Ok(Querier::start(seed, ops, outages.addr.clone()))
}

/// SIGKILL's number on Linux.
const SIGKILL: i32 = 9;

/// The pipeline's log from byte `from` on.
fn log_since(case: &Case, from: u64) -> String {
    let Ok(mut f) = std::fs::File::open(case.dir.join("pipeline.log")) else {
        return String::new();
    };
    let mut s = String::new();
    let _ = f
        .seek(SeekFrom::Start(from))
        .and_then(|_| f.read_to_string(&mut s));
    s
}

fn log_len(case: &Case) -> u64 {
    std::fs::metadata(case.dir.join("pipeline.log")).map_or(0, |m| m.len())
}

/// `n` slice lengths summing to `total`, each at least 1 when `total` allows.
fn split(rng: &mut StdRng, total: usize, n: usize) -> Vec<usize> {
    let mut cuts: Vec<usize> = (0..n - 1).map(|_| rng.gen_range(0..=total)).collect();
    cuts.sort_unstable();
    let mut out = Vec::with_capacity(n);
    let mut prev = 0;
    for c in cuts.into_iter().chain([total]) {
        out.push(c - prev);
        prev = c;
    }
    out
}

fn send(case: &mut Case, op: &history::Op, log: &mut Vec<(String, Option<Vec<u8>>)>) -> Result<()> {
    send_record(case, op.key.clone(), op.value.clone(), log)
}

/// Sends one record, logs it for the reference, and appends it with its partition and offset
/// to `sent.jsonl` in the case's directory, which a failed trial keeps: the history as the
/// pipeline read it, even once the trials' broker is gone.
fn send_record(
    case: &mut Case,
    key: String,
    value: Option<Vec<u8>>,
    log: &mut Vec<(String, Option<Vec<u8>>)>,
) -> Result<()> {
    let (partition, offset) = case.send_at(&key, value.as_deref())?;
    let mut line = serde_json::json!({ "partition": partition, "offset": offset, "key": key });
    match value.as_deref() {
        None => line["tombstone"] = true.into(),
        Some(v) => {
            let field = if std::str::from_utf8(v).is_ok() {
                "value"
            } else {
                "value_lossy"
            };
            line[field] = String::from_utf8_lossy(v).into();
        }
    }
    let path = case.dir.join("sent.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{line}").with_context(|| format!("writing {}", path.display()))?;
    log.push((key, value));
    Ok(())
}

/// Sends `ops` in bursts of 1–12 records with pauses of up to 80 ms, as run `life` of the
/// trial: the outages planned in it start before their record.
fn send_paced(
    case: &mut Case,
    rng: &mut StdRng,
    ops: &[history::Op],
    log: &mut Vec<(String, Option<Vec<u8>>)>,
    (life, outages): (usize, &mut Outages),
) -> Result<()> {
    let mut i = 0;
    while i < ops.len() {
        let burst = rng.gen_range(1..=12).min(ops.len() - i);
        for (j, op) in ops[i..i + burst].iter().enumerate() {
            outages.before(case, life, i + j)?;
            send(case, op, log)?;
        }
        i += burst;
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..80)));
    }
    outages.before(case, life, ops.len())
}

/// The pipeline's exit status once it has exited, waiting up to `timeout`; `None` if it still
/// runs.
fn wait_death(case: &mut Case, timeout: Duration) -> Result<Option<std::process::ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = case.try_wait_pipeline()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The dead-letter topic holds exactly the records the reference refuses, once each, with the
/// reference's class. Returns their number.
fn check_dead_letters(case: &Case, log: &[(String, Option<Vec<u8>>)]) -> Result<usize> {
    let tokens = HfTokenCounter::from_file(
        std::path::Path::new(&env("FRESHET_MODEL_DIR")).join("tokenizer.json"),
    )
    .map_err(|e| anyhow!("{e}"))?;
    let cfg = ChunkerConfig::default();
    let limits = RecordLimits::default();
    let mut want: BTreeMap<(Vec<u8>, Vec<u8>), Vec<&'static str>> = BTreeMap::new();
    for (key, value) in log {
        if let Intake::Rejected(r) = intake(
            Some(key.as_bytes()),
            value.as_deref(),
            &limits,
            &cfg,
            &tokens,
        ) {
            want.entry((key.clone().into_bytes(), value.clone().unwrap_or_default()))
                .or_default()
                .push(r.class);
        }
    }
    let expected: usize = want.values().map(Vec::len).sum();
    // Everything up to the last commit is on the topic; wait a little longer for extras.
    let records = case.dlq_records(expected + 1, Duration::from_secs(4))?;
    let mut got: BTreeMap<(Vec<u8>, Vec<u8>), Vec<String>> = BTreeMap::new();
    for r in &records {
        let class = r
            .header(dlq_headers::ERROR_CLASS)
            .flatten()
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .unwrap_or_default();
        got.entry((
            r.key.clone().unwrap_or_default(),
            r.value.clone().unwrap_or_default(),
        ))
        .or_default()
        .push(class);
    }
    for (k, classes) in want.iter_mut() {
        classes.sort_unstable();
        let mut have = got.remove(k).unwrap_or_default();
        have.sort_unstable();
        ensure!(
            have == *classes,
            "dead letters of key {:?}: expected classes {classes:?}, found {have:?}",
            String::from_utf8_lossy(&k.0)
        );
    }
    ensure!(
        got.is_empty(),
        "dead letters of records that were not refused: {:?}",
        got.keys()
            .map(|k| String::from_utf8_lossy(&k.0).into_owned())
            .collect::<Vec<_>>()
    );
    ensure!(
        records.len() == expected,
        "{} dead letters, expected {expected}",
        records.len()
    );
    Ok(expected)
}

/// Texts embedded according to the pipeline's log: in every run, and in the run that starts at
/// byte `clean_from`.
fn embedded_in_log(path: &std::path::Path, clean_from: u64) -> Result<(u64, u64)> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut all = String::new();
    f.read_to_string(&mut all)?;
    let mut clean = String::new();
    f.seek(SeekFrom::Start(clean_from))?;
    f.read_to_string(&mut clean)?;
    let sum = |text: &str| -> Result<u64> {
        let mut n = 0;
        for line in text.lines() {
            if let Some(rest) = line.split(EMBED_LINE).nth(1) {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                n += digits
                    .parse::<u64>()
                    .with_context(|| format!("reading {line:?}"))?;
            }
        }
        Ok(n)
    };
    Ok((sum(&all)?, sum(&clean)?))
}

/// How many commits the pipeline's runs found wrong and wrote again.
fn repairs_in_log(path: &std::path::Path) -> Result<usize> {
    let log =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(log
        .lines()
        .filter(|l| l.contains(freshet_pipeline::sink::verify::REPAIRING))
        .count())
}
