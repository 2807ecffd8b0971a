//! The processes of a service a `deploy/` script started (its pid file, its process group).

use std::path::Path;

use anyhow::{ensure, Context, Result};

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
    let leader = pidfile_pid(pidfile)?;
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(pid) = entry?.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pgrp is the third field after the command name
        let pgrp = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(2))
            .and_then(|g| g.parse::<u32>().ok());
        if pgrp == Some(leader) {
            out.push(pid);
        }
    }
    ensure!(!out.is_empty(), "no process of group {leader} is alive");
    Ok(out)
}
