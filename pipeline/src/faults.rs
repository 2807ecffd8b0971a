//! Kill points for the crash trials (`tests/tests/chaos_e2e.rs`, docs/faults.md).
//!
//! `FRESHET_KILL_AT=POINT:N` makes `freshet run` SIGKILL itself the N-th time it passes the
//! named point, so that a trial can die exactly inside the Milvus write, between the Milvus
//! write and the tantivy commit, during the tantivy commit or around the Kafka offset commit:
//! moments a kill from outside hits only by luck.
//!
//! `FRESHET_ABORT_ON=KEY` makes the process abort (as it would on running out of memory in a
//! parser) whenever it prepares a record whose key is `KEY`, at start and after every restart:
//! a record that kills the pipeline, for the crash-loop quarantine's tests
//! (`tests/tests/crash_loop_e2e.rs`).
//!
//! The points are `fail` crate fail points; they exist only in a binary built with the
//! `failpoints` feature (the test builds enable it through `freshet-tests`), and a binary
//! without them refuses `FRESHET_KILL_AT` and `FRESHET_ABORT_ON` instead of running without the
//! fault it was asked for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};

/// The environment variable naming the kill point and the hit to die at.
pub const KILL_AT_ENV: &str = "FRESHET_KILL_AT";

/// What a process writes to stderr just before it kills itself at a point.
pub const KILLED_AT_MARK: &str = "freshet: fault injection: SIGKILL at";

/// The environment variable naming the key of the record to abort on.
pub const ABORT_ON_ENV: &str = "FRESHET_ABORT_ON";

/// What a process writes to stderr just before it aborts on the chosen record.
pub const ABORTED_ON_MARK: &str = "freshet: fault injection: abort while preparing";

/// The fail point passed just before a record is prepared.
const PREPARE_POINT: &str = "prepare.record";

/// The key [`ABORT_ON_ENV`] names, once armed.
static ABORT_ON: OnceLock<Vec<u8>> = OnceLock::new();

/// Every kill point, in the order a batch passes them.
pub const POINTS: &[&str] = &[
    // connectors/milvus: the batch's old rows deleted, its new rows not inserted yet
    "milvus.after_delete",
    // pipeline sink: Milvus written, dead letters not sent, tantivy untouched
    "sink.after_milvus",
    // pipeline sink: dead letters sent, tantivy not written
    "sink.after_dead_letters",
    // connectors/tantivy: commit prepared with its payload, not committed
    "tantivy.commit_prepared",
    // pipeline sink: tantivy committed (offsets durable in the index), group offsets not
    "sink.after_commit",
    // worker: about to commit the Kafka group offsets of durable epochs
    "offsets.before_commit",
    // worker: group offsets committed
    "offsets.after_commit",
];

/// Arms the kill point named by [`KILL_AT_ENV`] and the abort named by [`ABORT_ON_ENV`], if
/// set. Call once at start, before the pipeline runs.
pub fn install() -> Result<()> {
    if let Ok(key) = std::env::var(ABORT_ON_ENV) {
        if !fail::has_failpoints() {
            bail!(
                "{ABORT_ON_ENV} is set but this binary has no fault points: build it with \
                 `--features freshet-pipeline/failpoints`"
            );
        }
        let _ = ABORT_ON.set(key.into_bytes());
        fail::cfg(PREPARE_POINT, "return").map_err(|e| anyhow::anyhow!("arming: {e}"))?;
        tracing::warn!(
            key = ABORT_ON_ENV,
            "fault injection armed: abort on preparing a record"
        );
    }
    let Ok(spec) = std::env::var(KILL_AT_ENV) else {
        return Ok(());
    };
    let (point, nth) = parse(&spec)?;
    if !fail::has_failpoints() {
        bail!(
            "{KILL_AT_ENV} is set but this binary has no fault points: build it with \
             `--features freshet-pipeline/failpoints`"
        );
    }
    let hits = AtomicU64::new(0);
    fail::cfg_callback(point, move || {
        if hits.fetch_add(1, Ordering::SeqCst) + 1 == nth {
            kill_self(point, nth);
        }
    })
    .map_err(|e| anyhow::anyhow!("arming {point}: {e}"))?;
    tracing::warn!(
        point,
        hit = nth,
        "fault injection armed: SIGKILL at this point"
    );
    Ok(())
}

/// `POINT:N` → the point (one of [`POINTS`]) and N ≥ 1.
fn parse(spec: &str) -> Result<(&'static str, u64)> {
    let (name, n) = spec
        .rsplit_once(':')
        .with_context(|| format!("{KILL_AT_ENV}={spec:?}: expected POINT:N"))?;
    let point = POINTS
        .iter()
        .copied()
        .find(|p| *p == name)
        .with_context(|| format!("{KILL_AT_ENV}: unknown point {name:?}; known: {POINTS:?}"))?;
    let nth: u64 = n
        .parse()
        .ok()
        .filter(|n| *n >= 1)
        .with_context(|| format!("{KILL_AT_ENV}={spec:?}: N must be a whole number ≥ 1"))?;
    Ok((point, nth))
}

/// The fail point passed just before the record with `key` is prepared: aborts the process when
/// `key` is the one [`ABORT_ON_ENV`] names.
pub fn before_prepare(key: Option<&[u8]>) {
    fail::fail_point!(PREPARE_POINT, is_chosen(key), |_| abort_on(key));
    let _ = key;
}

#[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
fn is_chosen(key: Option<&[u8]>) -> bool {
    ABORT_ON.get().is_some_and(|k| key == Some(k.as_slice()))
}

#[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
fn abort_on(key: Option<&[u8]>) -> ! {
    eprintln!(
        "{ABORTED_ON_MARK} {}",
        String::from_utf8_lossy(key.unwrap_or_default())
    );
    std::process::abort()
}

fn kill_self(point: &str, nth: u64) -> ! {
    eprintln!("{KILLED_AT_MARK} {point} (hit {nth})");
    // SAFETY: kill(2) on our own pid with a constant signal has no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // SIGKILL cannot be caught; should the call fail, die all the same without unwinding.
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_points_and_refuses_the_rest() {
        assert_eq!(
            parse("sink.after_milvus:3").unwrap(),
            ("sink.after_milvus", 3)
        );
        assert!(parse("sink.after_milvus:0").is_err());
        assert!(parse("sink.after_milvus").is_err());
        assert!(parse("nowhere:1")
            .unwrap_err()
            .to_string()
            .contains("unknown point"));
        assert!(parse("sink.after_milvus:x").is_err());
    }
}
