//! The processes of a service a `deploy/` script started (its pid file, its process group), and
//! the fields of a process's or thread's `stat` file.

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
        if stat_field::<u32>(&format!("/proc/{pid}/stat"), 5) == Some(leader) {
            out.push(pid);
        }
    }
    ensure!(!out.is_empty(), "no process of group {leader} is alive");
    Ok(out)
}

/// Field `n` (3 or later, numbered as proc(5) numbers them: 5 is the process group, 19 the nice
/// value) of a `stat` file such as `/proc/<pid>/stat` or `/proc/<pid>/task/<tid>/stat`; `None`
/// when the file is gone or the field does not parse.
pub fn stat_field<T: std::str::FromStr>(path: &str, n: usize) -> Option<T> {
    stat_fields(path)?.get(n.checked_sub(3)?)?.parse().ok()
}

/// The fields of a `stat` file from field 3 on. The command name (field 2) may hold spaces and
/// parentheses, so they are counted from its last `") "`.
fn stat_fields(path: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(path).ok()?;
    let rest = stat.rsplit_once(") ")?.1;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// The CPU time process `pid` has used so far, user and system (fields 14 and 15 of its `stat`,
/// in clock ticks of 1/100 s on Linux), from one read of the file.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let fields = stat_fields(&path).with_context(|| format!("reading {path}"))?;
    let field = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("no field {n} in {path}"))
    };
    Ok((field(14)? + field(15)?) / 100.0)
}

#[cfg(test)]
mod tests {
    use super::stat_field;

    #[test]
    fn stat_fields_are_numbered_as_proc_numbers_them() {
        let ppid = std::os::unix::process::parent_id();
        assert_eq!(stat_field::<u32>("/proc/self/stat", 4), Some(ppid));
        let state = stat_field::<char>("/proc/self/stat", 3);
        assert!(matches!(state, Some('R' | 'S' | 'D')), "{state:?}");
        assert_eq!(stat_field::<u32>("/proc/self/stat", 2), None);
        assert_eq!(stat_field::<u32>("/proc/self/stat", 999), None);
        assert_eq!(stat_field::<u32>("/proc/0/stat", 5), None);
    }
}
