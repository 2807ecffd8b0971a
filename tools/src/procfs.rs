//! What the benchmarks read of a process from `/proc`: resident memory, CPU ticks, and the Milvus
//! process that `deploy/start-milvus.sh` started.

use anyhow::{anyhow, bail, Context, Result};

/// A `kB` line of `/proc/<pid>/status` (`/proc/self/status` for `None`), e.g. `VmRSS:`, in KiB.
pub fn status_kib(pid: Option<u32>, key: &str) -> Result<f64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".to_string(),
    };
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .with_context(|| format!("no {key} in {path}"))
}

/// `VmRSS` of `pid` in MiB.
pub fn vm_rss_mib(pid: u32) -> Result<f64> {
    Ok(status_kib(Some(pid), "VmRSS:")? / 1024.0)
}

/// The fields of `/proc/<pid>/stat` after the command name (field 3, the state, first): the
/// name may hold spaces, so they are split after its closing parenthesis.
fn stat_fields(pid: u32) -> Result<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("unexpected /proc/{pid}/stat"))?;
    Ok(rest.split_whitespace().map(str::to_string).collect())
}

fn stat_field(fields: &[String], field: usize) -> Result<u64> {
    // `field` counts from 1 as proc(5) does; the list starts at field 3.
    fields
        .get(field - 3)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("unexpected /proc stat"))
}

/// User + system CPU ticks of `pid` (fields 14 and 15).
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let fields = stat_fields(pid)?;
    Ok(stat_field(&fields, 14)? + stat_field(&fields, 15)?)
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
        .and_then(|p| p.parse::<u64>().ok())
    else {
        bail!("{} holds no pid", file.display());
    };
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let in_group = stat_fields(pid)
            .and_then(|f| stat_field(&f, 5))
            .is_ok_and(|g| g == group);
        if !in_group {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains("milvus run standalone") {
            return Ok(Some(pid));
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
        assert!(status_kib(None, "VmRSS:").is_ok());
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(50) {
            std::hint::black_box(spin.elapsed());
        }
        assert!(cpu_ticks(me).unwrap() >= 1);
    }

    #[test]
    fn a_missing_key_or_process_is_an_error() {
        assert!(status_kib(None, "NoSuchKey:").is_err());
        assert!(vm_rss_mib(u32::MAX).is_err());
        assert!(cpu_ticks(u32::MAX).is_err());
    }
}
