//! What the benchmarks read of a process from `/proc` (through the `procfs` crate): resident
//! memory, CPU ticks, and the Milvus process that `deploy/start-milvus.sh` started.

use ::procfs::process::{all_processes, Process, Status};
use anyhow::{bail, Context, Result};

fn process(pid: Option<u32>) -> Result<Process> {
    Ok(match pid {
        Some(p) => Process::new(i32::try_from(p)?).with_context(|| format!("no process {p}"))?,
        None => Process::myself()?,
    })
}

/// `/proc/<pid>/status` (`/proc/self/status` for `None`).
fn status(pid: Option<u32>) -> Result<Status> {
    Ok(process(pid)?.status()?)
}

/// `VmRSS` of `pid` in MiB.
pub fn vm_rss_mib(pid: u32) -> Result<f64> {
    let kib = status(Some(pid))?.vmrss.context("no VmRSS")?;
    Ok(kib as f64 / 1024.0)
}

/// This process's resident memory now and its peak so far (`VmRSS`, `VmHWM`), in MiB.
pub fn own_memory_mib() -> Result<(f64, f64)> {
    let s = status(None)?;
    let mib = |kib: Option<u64>| kib.map_or(0.0, |k| k as f64 / 1024.0);
    Ok((mib(s.vmrss), mib(s.vmhwm)))
}

/// User + system CPU ticks of `pid`.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = process(Some(pid))?.stat()?;
    Ok(stat.utime + stat.stime)
}

/// The Milvus binary's pid: in the process group of the run directory's `pids/milvus.pid`
/// (`PID STARTTIME`, written by `deploy/lib.sh`), the member running `milvus run standalone`.
pub fn milvus_pid() -> Result<Option<u32>> {
    let file = freshet_config::run_dir().join("pids").join("milvus.pid");
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let Some(group) = text
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<i32>().ok())
    else {
        bail!("{} holds no pid", file.display());
    };
    for p in all_processes()?.flatten() {
        if !p.stat().is_ok_and(|s| s.pgrp == group) {
            continue;
        }
        let cmdline = p.cmdline().unwrap_or_default().join(" ");
        if cmdline.contains("milvus run standalone") {
            return Ok(u32::try_from(p.pid).ok());
        }
    }
    bail!(
        "no `milvus run standalone` process in group {group} ({})",
        file.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_cpu() {
        let me = std::process::id();
        let mib = vm_rss_mib(me).unwrap();
        assert!(mib > 1.0 && mib < 100_000.0, "{mib}");
        let (rss, peak) = own_memory_mib().unwrap();
        assert!(rss > 1.0 && peak >= rss, "{rss} {peak}");
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(50) {
            std::hint::black_box(spin.elapsed());
        }
        assert!(cpu_ticks(me).unwrap() >= 1);
    }

    #[test]
    fn a_missing_process_is_an_error() {
        assert!(vm_rss_mib(u32::MAX).is_err());
        assert!(cpu_ticks(u32::MAX).is_err());
    }
}
