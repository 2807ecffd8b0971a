//! Where a benchmark's CPU time goes: this process's threads (grouped by name) and the rest of
//! the machine (the broker, Milvus, anything else), between two snapshots of `/proc`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// CPU seconds used so far: by the whole machine (busy time of every core), by this process,
/// and by each of its live threads under its name (digits dropped, so a pool adds up).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    machine_busy_s: f64,
    process_s: f64,
    threads: BTreeMap<i32, (String, f64)>,
}

impl Snapshot {
    /// The counters now; zeros where `/proc` cannot be read (a platform without it).
    pub fn take() -> Snapshot {
        imp::take().unwrap_or_default()
    }

    /// What was used from `self` to `later`, as a JSON object: `machine_busy_s`, `process_s`,
    /// `others_s` (the machine less this process) and `threads_s` by thread name, the largest
    /// first. A thread that ended between the two snapshots counts in `process_s` only.
    pub fn until(&self, later: &Snapshot) -> Value {
        let mut by_name: BTreeMap<String, f64> = BTreeMap::new();
        for (tid, (name, s)) in &later.threads {
            let before = self.threads.get(tid).map_or(0.0, |(_, s)| *s);
            *by_name.entry(name.clone()).or_default() += s - before;
        }
        let mut threads: Vec<(String, f64)> =
            by_name.into_iter().filter(|(_, s)| *s >= 0.05).collect();
        threads.sort_by(|a, b| b.1.total_cmp(&a.1));
        let machine = later.machine_busy_s - self.machine_busy_s;
        let process = later.process_s - self.process_s;
        let threads: serde_json::Map<String, Value> = threads
            .into_iter()
            .map(|(n, s)| (n, json!(round(s))))
            .collect();
        json!({
            "machine_busy_s": round(machine),
            "process_s": round(process),
            "others_s": round((machine - process).max(0.0)),
            "threads_s": threads,
        })
    }
}

fn round(s: f64) -> f64 {
    (s * 10.0).round() / 10.0
}

/// A thread's name with its digits dropped (`timely:work-1` and `timely:work-0` are one pool).
fn pool_name(comm: &str) -> String {
    let s: String = comm.chars().filter(|c| !c.is_ascii_digit()).collect();
    s.trim_end_matches(['-', ':', '_', ' ', '#']).to_string()
}

#[cfg(target_os = "linux")]
mod imp {
    use super::{pool_name, Snapshot};
    use procfs::process::Process;
    use procfs::{CurrentSI, KernelStats};

    pub fn take() -> Option<Snapshot> {
        let tps = procfs::ticks_per_second() as f64;
        let cpu = KernelStats::current().ok()?.total;
        let busy = cpu.user
            + cpu.nice
            + cpu.system
            + cpu.irq.unwrap_or(0)
            + cpu.softirq.unwrap_or(0)
            + cpu.steal.unwrap_or(0);
        let me = Process::myself().ok()?;
        let stat = me.stat().ok()?;
        let mut threads = std::collections::BTreeMap::new();
        for task in me.tasks().ok()?.flatten() {
            if let Ok(s) = task.stat() {
                let used = (s.utime + s.stime) as f64 / tps;
                threads.insert(task.tid, (pool_name(&s.comm), used));
            }
        }
        Some(Snapshot {
            machine_busy_s: busy as f64 / tps,
            process_s: (stat.utime + stat.stime) as f64 / tps,
            threads,
        })
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub fn take() -> Option<super::Snapshot> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_add_up_under_one_name() {
        assert_eq!(pool_name("timely:work-1"), "timely:work");
        assert_eq!(pool_name("rdk:broker12"), "rdk:broker");
        assert_eq!(pool_name("freshet-sink"), "freshet-sink");
    }

    #[test]
    fn a_busy_thread_shows_under_its_name_and_in_the_process() {
        let before = Snapshot::take();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::Builder::new()
            .name("spin-7".into())
            .spawn(move || {
                // a fixed amount of work, so the CPU time does not depend on the machine's load
                let mut x = 0u64;
                for _ in 0..100_000_000u64 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
                }
                let _ = done_tx.send(x);
                // alive until the later snapshot is taken
                let _ = end_rx.recv();
            })
            .expect("a thread");
        done_rx.recv().expect("the spinning thread ends its work");
        let after = Snapshot::take();
        let _ = end_tx.send(());
        let _ = h.join();
        let v = before.until(&after);
        let spin = v["threads_s"]["spin"].as_f64().unwrap_or(0.0);
        assert!(spin >= 0.05, "{v}");
        assert!(v["process_s"].as_f64().unwrap_or(0.0) >= spin, "{v}");
        assert!(v["machine_busy_s"].as_f64().unwrap_or(0.0) >= spin, "{v}");
    }
}
