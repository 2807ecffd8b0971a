//! The processes of a service a `deploy/` script started (its pid file, its process group), and
//! what the tests read of a process or thread from `/proc` (through the `procfs` crate).

use std::path::Path;

use anyhow::{ensure, Context, Result};
use procfs::process::{all_processes, Process};

/// The pid a `deploy/` script recorded in `pidfile` (its first word, as `start_daemon` writes it:
/// the leader of the service's process group).
pub fn pidfile_pid(pidfile: &Path) -> Result<u32> {
    let text = std::fs::read_to_string(pidfile)
        .with_context(|| format!("reading {} (is the service running?)", pidfile.display()))?;
    text.split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("no pid in {}: {text:?}", pidfile.display()))
}

/// The processes of the group whose leader's pid is in `pidfile`.
pub fn process_group(pidfile: &Path) -> Result<Vec<u32>> {
    let leader = i32::try_from(pidfile_pid(pidfile)?)?;
    let out: Vec<u32> = all_processes()?
        .flatten()
        .filter(|p| p.stat().is_ok_and(|s| s.pgrp == leader))
        .filter_map(|p| u32::try_from(p.pid).ok())
        .collect();
    ensure!(!out.is_empty(), "no process of group {leader} is alive");
    Ok(out)
}

fn process(pid: u32) -> Result<Process> {
    Process::new(i32::try_from(pid)?).with_context(|| format!("no process {pid}"))
}

/// The CPU time process `pid` has used so far, user and system.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = process(pid)?
        .stat()
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    Ok((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}

/// The threads of process `pid`, each with its name and nice value; empty when it is gone.
pub fn threads(pid: u32) -> Vec<(String, i64)> {
    let Ok(tasks) = process(pid).and_then(|p| Ok(p.tasks()?)) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.stat().ok())
        .map(|s| (s.comm, s.nice))
        .collect()
}

/// The nice value of process `pid` (of its main thread).
pub fn nice(pid: u32) -> Result<i64> {
    Ok(process(pid)?.stat()?.nice)
}

/// Whether this process may raise a thread's priority: CAP_SYS_NICE (bit 23) in its effective
/// set.
pub fn may_raise_priority() -> Result<bool> {
    Ok(Process::myself()?.status()?.capeff & (1 << 23) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_read_and_a_missing_one_is_an_error() {
        let me = std::process::id();
        // Spin until the kernel has counted a tick of CPU time (or give up after 10 s).
        let spin = std::time::Instant::now();
        let mut used = 0.0;
        while used == 0.0 && spin.elapsed() < std::time::Duration::from_secs(10) {
            std::hint::black_box(spin.elapsed());
            used = cpu_seconds(me).unwrap();
        }
        assert!(used > 0.0 && used < 1e6, "{used}");
        let mine = threads(me);
        assert!(!mine.is_empty());
        assert!(
            mine.iter().all(|(_, n)| *n == nice(me).unwrap()),
            "{mine:?}"
        );
        assert!(cpu_seconds(u32::MAX).is_err());
        assert!(nice(u32::MAX).is_err());
        assert!(threads(u32::MAX).is_empty());
    }
}
