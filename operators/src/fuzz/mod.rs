//! Fuzzing of every decoder, parser, cleaner and chunker: property tests (proptest) over
//! generated inputs, each case run against a deadline, and the seeded robustness tests.
//!
//! - [`decode`]: the envelope and Debezium decoders on arbitrary bytes and near-valid JSON.
//! - [`parse`]: the PDF, DOCX and EPUB parsers (ZIP and XML inside) on arbitrary bytes, damaged
//!   fixtures and generated archives (corrupted entries, false sizes, deep nesting, bombs).
//! - [`chunk`]: cleaning and every chunking strategy with generated texts and settings: chunk
//!   invariants, coverage, deterministic and stable ids.
//! - [`seeded`]: fixed-seed random documents and records, and pathological inputs timed.
//!
//! Case counts: modest by default (CI); `PROPTEST_CASES=n` runs n cases per property and
//! `PROPTEST_RNG_SEED=s` replays a run. `FRESHET_FUZZ_DEADLINE_S` is how long one case may take
//! before it counts as a hang (default 20 s).

mod chunk;
mod decode;
mod parse;
pub(crate) mod seeded;

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::select;

/// The configuration of a property: `default_cases` unless `PROPTEST_CASES` says otherwise;
/// failures are reported (with the input and seed), not persisted to files.
pub(crate) fn config(default_cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig {
        failure_persistence: None,
        max_shrink_iters: 512,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = default_cases;
    }
    c
}

fn deadline() -> Duration {
    let s = std::env::var("FRESHET_FUZZ_DEADLINE_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    Duration::from_secs(s)
}

/// Runs `f` on a thread of its own (default stack) and returns its result; a panic in `f` is
/// re-raised here, and a case that takes longer than the deadline fails as a hang.
pub(crate) fn within_deadline<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(format!("fuzz {what}"))
        .spawn(move || {
            let out = f();
            let _ = tx.send(());
            out
        })
        .expect("spawning a fuzz thread");
    match rx.recv_timeout(deadline()) {
        Ok(()) | Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(RecvTimeoutError::Timeout) => {
            panic!("{what}: no answer within {:?}: a hang", deadline())
        }
    }
}

/// Text built from adversarial pieces (markup, CJK, emoji, controls, separators), words,
/// arbitrary scalar values and long runs.
pub(crate) fn text(max_pieces: usize) -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        8 => select(seeded::PIECES).prop_map(str::to_owned),
        3 => "[a-z]{1,12}",
        1 => any::<char>().prop_map(String::from),
        1 => (1usize..400).prop_map(|n| "x".repeat(n)),
        1 => (1usize..200).prop_map(|n| "中".repeat(n)),
    ];
    proptest::collection::vec(piece, 0..max_pieces).prop_map(|v| v.concat())
}

/// Arbitrary JSON values, nested up to `depth` levels.
pub(crate) fn json_value(depth: u32) -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        text(6).prop_map(Value::String),
    ];
    leaf.prop_recursive(depth, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::btree_map(text(3), inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
