//! Where a local model computes: on the thread that asks (the query node, tools), or on a
//! thread of its own at the lowest CPU priority (the pipeline, `[pipeline]
//! embedding_priority = "idle"`).
//!
//! Linux preempts a `SCHED_IDLE` thread whenever a thread of another policy wakes on its core,
//! in any process (a nice value ranks threads only within their scheduling group), and within
//! its own group (the process's session or cgroup) runs it only when no other thread of the
//! group wants the core; between groups the CPU is still shared by the groups' weights, which
//! `[pipeline] nice` lowers. The model is loaded on that thread, so the intra-op threads
//! ONNX Runtime starts for its session inherit the policy (and the thread's name,
//! `freshet-embed`), and every call runs there: ONNX Runtime computes on the calling thread
//! as well as on its own. The thread that asks waits, asleep.
//!
//! Without the permission to set the policy (a seccomp profile that forbids
//! `sched_setscheduler`), the thread warns and computes at the priority it has.

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::error::{Error, Result};

/// The name of the model's thread and of the threads ONNX Runtime starts from it.
pub(crate) const THREAD_NAME: &str = "freshet-embed";

/// Where a model's calls run.
pub(crate) enum Compute {
    /// On the calling thread.
    Caller,
    /// On one thread of its own at `SCHED_IDLE`.
    Idle(ThreadPool),
}

impl Compute {
    pub(crate) fn new(idle: bool) -> Result<Self> {
        if !idle {
            return Ok(Compute::Caller);
        }
        ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| THREAD_NAME.to_string())
            .start_handler(|_| match set_idle_policy() {
                Ok(()) => {
                    tracing::info!("the embedding model computes at idle CPU priority (SCHED_IDLE)")
                }
                Err(e) => {
                    tracing::warn!(error = %e,
                        "the embedding model could not be set to idle CPU priority \
                         (SCHED_IDLE); it computes at the pipeline's priority");
                }
            })
            .build()
            .map(Compute::Idle)
            .map_err(|e| Error::Config(format!("starting the embedding model's thread: {e}")))
    }

    /// Runs `f` where the model computes and returns its result; the caller waits.
    pub(crate) fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match self {
            Compute::Caller => f(),
            Compute::Idle(pool) => pool.install(f),
        }
    }
}

/// Sets the calling thread's policy to `SCHED_IDLE` (threads it starts inherit it).
#[cfg(target_os = "linux")]
fn set_idle_policy() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn set_idle_policy() -> std::io::Result<()> {
    Err(std::io::Error::other("SCHED_IDLE is Linux only"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheduling policy of the calling thread.
    fn policy() -> i32 {
        // SAFETY: pid 0 is the calling thread.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn idle_runs_on_an_idle_thread_and_caller_on_the_caller() {
        let me = policy();
        assert_ne!(me, libc::SCHED_IDLE);
        let caller = Compute::new(false).unwrap();
        assert_eq!(caller.run(policy), me);
        let idle = Compute::new(true).unwrap();
        let (p, name) = idle.run(|| (policy(), std::thread::current().name().map(String::from)));
        assert_eq!(p, libc::SCHED_IDLE);
        assert_eq!(name.as_deref(), Some(THREAD_NAME));
        // Threads started there (as ONNX Runtime starts its own) inherit the policy.
        let inherited = idle.run(|| std::thread::spawn(policy).join().unwrap());
        assert_eq!(inherited, libc::SCHED_IDLE);
        // The caller keeps its own policy, and a borrowed value can be changed there.
        assert_eq!(policy(), me);
        let mut v = vec![1, 2];
        idle.run(|| v.push(3));
        assert_eq!(v, [1, 2, 3]);
    }
}
