//! What `bench-load` measures and prints: one sample per request, the per-phase percentiles,
//! how busy the machine was, and the report.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::Value;

use super::*;

pub(super) type Done = (u8, Instant, f64, Result<(f64, Value)>);

pub(super) fn sample((phase, due, lag_ms, answer): Done, errors: &mut usize) -> Sample {
    match answer {
        Ok((ms, v)) => Sample {
            phase,
            due,
            lag_ms,
            latency_ms: Some(ms),
            server_ms: v["timings_ms"]["total"].as_f64(),
            stages_ms: qb::stage_ms(&v),
            degraded: v["degraded"].as_array().is_some_and(|d| !d.is_empty()),
        },
        Err(e) => {
            *errors += 1;
            if *errors <= 3 {
                eprintln!("request failed: {e:#}");
            }
            Sample {
                phase,
                due,
                lag_ms,
                latency_ms: None,
                server_ms: None,
                stages_ms: [None; qb::STAGES.len()],
                degraded: false,
            }
        }
    }
}

pub(super) fn phase_report(
    name: &'static str,
    samples: &[Sample],
    keep: impl Fn(&Sample) -> bool,
    length: Duration,
    machine_busy: Option<f64>,
) -> PhaseReport {
    let kept: Vec<&Sample> = samples.iter().filter(|s| keep(s)).collect();
    PhaseReport {
        phase: name,
        seconds: length.as_secs_f64(),
        requests: kept.len(),
        errors: kept.iter().filter(|s| s.latency_ms.is_none()).count(),
        degraded: kept.iter().filter(|s| s.degraded).count(),
        latency_ms: Percentiles::of(kept.iter().filter_map(|s| s.latency_ms).collect()),
        server_total_ms: Percentiles::of(kept.iter().filter_map(|s| s.server_ms).collect()),
        server_stages_ms: qb::stage_percentiles(kept.iter().map(|s| &s.stages_ms)),
        send_lag_ms: Percentiles::of(kept.iter().map(|s| s.lag_ms).collect()),
        machine_busy,
    }
}

/// Busy and total CPU time of the machine so far (`/proc/stat`, clock ticks); `None` where
/// unreadable.
pub(super) fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8) // user nice system idle iowait irq softirq steal (guest is inside user)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().sum();
    let idle = fields.get(3)? + fields.get(4)?;
    Some((total - idle, total))
}

/// Busy share of the machine between two readings.
pub(super) fn busy(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<f64> {
    let ((b0, t0), (b1, t1)) = (a?, b?);
    (t1 > t0).then(|| (b1 - b0) as f64 / (t1 - t0) as f64)
}

/// Waits until the machine has been below `QUIET_BUSY` for 5 s in a row (at least 10 s in all,
/// at most `max_secs`); whether it got there.
pub(super) fn wait_quiet(max_secs: f64) -> bool {
    let start = Instant::now();
    let mut quiet_for = 0;
    while start.elapsed().as_secs_f64() < max_secs {
        let a = cpu_times();
        std::thread::sleep(Duration::from_secs(1));
        match busy(a, cpu_times()) {
            Some(b) if b < QUIET_BUSY => quiet_for += 1,
            Some(_) => quiet_for = 0,
            None => return false,
        }
        if quiet_for >= 5 && start.elapsed() >= Duration::from_secs(10) {
            return true;
        }
    }
    false
}

pub(super) fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |b| format!("{:.0}%", b * 100.0))
}

pub(super) fn print_ingest(r: &IngestReport) {
    eprintln!(
        "ingest {} queries: {} documents, {} chunks in {:.1} s ({:.2} docs/s, {:.2} chunks/s)",
        if r.with_queries { "with" } else { "without" },
        r.documents,
        r.chunks,
        r.seconds,
        r.docs_per_s,
        r.chunks_per_s
    );
}

pub(super) fn print_report(r: &LoadReport) {
    println!(
        "| phase ({} req/s) | seconds | requests | errors | degraded | p50 ms | p90 ms | p99 ms | max ms | server p50 / p99 ms | send lag p99 / max ms | machine busy |",
        r.rate
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for p in &r.phases {
        let (l, s, g) = (&p.latency_ms, &p.server_total_ms, &p.send_lag_ms);
        println!(
            "| {} | {:.0} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} / {:.1} | {:.1} / {:.1} | {} |",
            p.phase,
            p.seconds,
            p.requests,
            p.errors,
            p.degraded,
            l.p50,
            l.p90,
            l.p99,
            l.max,
            s.p50,
            s.p99,
            g.p99,
            g.max,
            pct(p.machine_busy)
        );
    }
    println!(
        "\n| phase | server stage p50 / p99 / max ms: {} |",
        qb::STAGES.join(" · ")
    );
    println!("|---|---|");
    for p in &r.phases {
        let cells: Vec<String> = qb::STAGES
            .iter()
            .map(|k| match p.server_stages_ms.get(k) {
                Some(s) => format!("{k} {:.1} / {:.1} / {:.1}", s.p50, s.p99, s.max),
                None => format!("{k} -"),
            })
            .collect();
        println!("| {} | {} |", p.phase, cells.join(" · "));
    }
    println!("\n| ingest | documents | chunks | seconds | docs/s | chunks/s | machine busy |");
    println!("|---|---|---|---|---|---|---|");
    for i in [&r.without_queries, &r.with_queries] {
        println!(
            "| {} queries | {} | {} | {:.1} | {:.2} | {:.2} | {} |",
            if i.with_queries { "with" } else { "without" },
            i.documents,
            i.chunks,
            i.seconds,
            i.docs_per_s,
            i.chunks_per_s,
            pct(i.machine_busy)
        );
    }
    println!(
        "\np99 ingest / idle: {:.2}; throughput with / without queries: {:.3}; settled {:.0} s \
         (quiet: {}); query node in a session {}; {}",
        r.p99_ratio_ingest_to_idle,
        r.throughput_ratio_with_to_without,
        r.settle_s,
        r.settled_quiet,
        match r.node_session {
            NodeSession::Own => "of its own",
            NodeSession::Shared => "shared with the pipeline",
        },
        r.machine
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_count_errors_apart_from_latencies() {
        let t0 = Instant::now();
        let s = |phase, ms: Option<f64>, degraded| Sample {
            phase,
            due: t0,
            lag_ms: 1.0,
            latency_ms: ms,
            server_ms: ms.map(|m| m / 2.0),
            stages_ms: [ms.map(|m| m / 4.0), None, None, None, None],
            degraded,
        };
        let samples = [
            s(WARMUP, Some(900.0), false),
            s(INGEST, Some(10.0), false),
            s(INGEST, None, false),
            s(INGEST, Some(30.0), true),
            s(IDLE, Some(5.0), false),
        ];
        let r = phase_report(
            "ingest",
            &samples,
            |x| x.phase == INGEST,
            Duration::ZERO,
            None,
        );
        assert_eq!((r.requests, r.errors, r.degraded), (3, 1, 1));
        assert_eq!((r.latency_ms.count, r.latency_ms.max), (2, 30.0));
        assert_eq!(r.server_total_ms.max, 15.0);
        assert_eq!(r.server_stages_ms["embed"].max, 7.5);
        assert!(!r.server_stages_ms.contains_key("vector"));
        assert_eq!(busy(Some((10, 100)), Some((40, 200))), Some(0.3));
        assert_eq!(busy(Some((10, 100)), Some((10, 100))), None);
    }
}
