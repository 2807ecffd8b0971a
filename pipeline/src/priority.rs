//! The CPU priority of ingest work (`[pipeline] nice`), so that a query node, Milvus or the
//! broker on the same machine get a core before the embedding model does.
//!
//! Two layers, because Linux schedules by group before it schedules by thread:
//! - every timely worker thread lowers its own priority to the nice value before it opens its
//!   sources, loads its model or starts the sink, so the threads those start (ONNX Runtime's,
//!   librdkafka's, the sink writer) inherit it; this ranks ingest below everything else in the
//!   same scheduling group (a query node started by the same shell, or `bench-load`'s);
//! - with the kernel's autogroup scheduling (`kernel.sched_autogroup_enabled`), processes in
//!   different sessions share the CPU by session, whatever their threads' nice values, so the
//!   `deploy/` scripts' daemons (each started with `setsid`) would not see the threads' value.
//!   A pipeline that leads its own session therefore also sets its session's autogroup nice
//!   (`/proc/self/autogroup`); one started inside another session (a shell's) leaves it alone,
//!   since that would lower the shell and everything it runs.
//!
//! Under systemd or Kubernetes the CPU controller decides instead (`CPUWeight=`, CPU requests):
//! docs/deploy.md. Priority is never raised: a process started at a higher nice keeps it.
//! Failing to lower it is reported and ingest goes on at the priority it has.

use std::io;

/// The nice value of the calling thread.
#[cfg(target_os = "linux")]
pub fn thread_nice() -> io::Result<i32> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // getpriority returns -1 both as a value and as an error: errno tells them apart.
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: getpriority reads its integer arguments only.
    let n = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
    if n == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error().unwrap_or(0) != 0 {
            return Err(e);
        }
    }
    Ok(n)
}

/// Lowers the calling thread's priority to `nice` (0–19); threads it starts afterwards inherit
/// it. Returns the value it runs at: `nice`, or its own where that was already lower.
#[cfg(target_os = "linux")]
pub fn lower_thread(nice: i32) -> io::Result<i32> {
    let now = thread_nice()?;
    if nice <= now {
        return Ok(now);
    }
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority reads its integer arguments only; on Linux PRIO_PROCESS with a thread
    // id sets that thread's nice value alone.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(nice)
}

#[cfg(not(target_os = "linux"))]
pub fn lower_thread(_nice: i32) -> io::Result<i32> {
    Ok(0)
}

/// What [`lower_session`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Session {
    /// The session's autogroup nice was set to this value.
    Lowered(i32),
    /// It was at this value or lower already.
    Kept(i32),
    /// The process does not lead its session: the autogroup is shared with its parent's.
    NotLeader,
    /// No autogroup scheduling (another kernel, or it is off).
    NoAutogroup,
}

/// Sets the autogroup nice of this process's session to `nice` when the process leads the
/// session (see the module's documentation).
#[cfg(target_os = "linux")]
pub fn lower_session(nice: i32) -> io::Result<Session> {
    // SAFETY: getsid(0) asks about the calling process; no pointers.
    let sid = unsafe { libc::getsid(0) };
    if sid < 0 || sid as u32 != std::process::id() {
        return Ok(Session::NotLeader);
    }
    if !autogroup_enabled() {
        return Ok(Session::NoAutogroup);
    }
    let path = "/proc/self/autogroup";
    let now = match std::fs::read_to_string(path) {
        Ok(s) => parse_autogroup(&s)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {s:?}")))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Session::NoAutogroup),
        Err(e) => return Err(e),
    };
    if nice <= now {
        return Ok(Session::Kept(now));
    }
    std::fs::write(path, nice.to_string())?;
    Ok(Session::Lowered(nice))
}

#[cfg(not(target_os = "linux"))]
pub fn lower_session(_nice: i32) -> io::Result<Session> {
    Ok(Session::NoAutogroup)
}

#[cfg(target_os = "linux")]
fn autogroup_enabled() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled")
        .map(|s| s.trim() == "1")
        .unwrap_or(false)
}

/// The nice value in `/proc/<pid>/autogroup` (`/autogroup-42 nice 0`).
pub fn parse_autogroup(s: &str) -> Option<i32> {
    let mut words = s.split_whitespace();
    words.next()?.strip_prefix("/autogroup-")?;
    (words.next()? == "nice").then_some(())?;
    words.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autogroup_line() {
        assert_eq!(parse_autogroup("/autogroup-42 nice 0\n"), Some(0));
        assert_eq!(parse_autogroup("/autogroup-7 nice 10"), Some(10));
        assert_eq!(parse_autogroup("/autogroup-7 nice -5"), Some(-5));
        assert_eq!(parse_autogroup("nice 0"), None);
        assert_eq!(parse_autogroup("/autogroup-7 weight 0"), None);
        assert_eq!(parse_autogroup(""), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_lowers_itself_and_what_it_starts_but_never_rises() {
        let outer = std::thread::spawn(|| {
            let before = thread_nice().unwrap();
            let target = (before + 5).min(19);
            assert_eq!(lower_thread(target).unwrap(), target);
            assert_eq!(thread_nice().unwrap(), target);
            // a thread started now inherits it
            let child = std::thread::spawn(thread_nice).join().unwrap().unwrap();
            assert_eq!(child, target);
            // asking for a higher priority keeps the lower one
            assert_eq!(lower_thread(before).unwrap(), target);
            assert_eq!(thread_nice().unwrap(), target);
            before
        });
        let before = outer.join().unwrap();
        // the other threads of the process keep theirs
        assert_eq!(thread_nice().unwrap(), before);
    }
}
