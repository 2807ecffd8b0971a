//! Randomized crash trials against the real broker, Milvus and model (tests/src/chaos,
//! docs/faults.md). CI runs a short series; a long one is
//!
//! ```text
//! FRESHET_CHAOS_TRIALS=100 FRESHET_CHAOS_REPORT=chaos.txt deploy/test.sh -- --test chaos_e2e
//! ```
//!
//! `FRESHET_CHAOS_SEED` fixes the first trial's seed (trial i uses seed + i), which reproduces
//! a failing trial; `FRESHET_CHAOS_CHANGES` sets the changes per trial.

use std::io::Write;

use anyhow::{Context, Result};
use freshet_tests::chaos::{self, Death, Size};

fn var(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
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
    let mut passed = 0;
    let mut failures = Vec::new();
    let mut points = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..trials {
        let seed = first + i;
        let line = match chaos::trial(seed, size) {
            Ok(o) => {
                passed += 1;
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
    let summary = format!("chaos: {passed}/{trials} trials passed; kills: {points:?}");
    eprintln!("{summary}");
    if let Some(f) = report.as_mut() {
        writeln!(f, "{summary}")?;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    Ok(())
}
