//! A freshet HTTP service binary run by a test (the query node, the ingest service): spawned
//! with its output in a log file, up once `GET /healthz` answers 200, killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::http::request;

/// A running service process.
pub struct Spawned {
    child: Child,
    log: PathBuf,
}

impl Spawned {
    /// Runs `cmd` with its output in `log`, and waits up to `timeout` until `addr` answers
    /// `GET /healthz` with 200 (or the process ends). `what` names it in errors.
    pub fn start(
        what: &str,
        mut cmd: Command,
        addr: &str,
        log: PathBuf,
        timeout: Duration,
    ) -> Result<Spawned> {
        let file = std::fs::File::create(&log)?;
        cmd.stdout(Stdio::from(file.try_clone()?))
            .stderr(Stdio::from(file));
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {what} ({:?})", cmd.get_program()))?;
        let mut spawned = Spawned { child, log };
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if request(addr, "GET", "/healthz", &[], b"").is_ok_and(|r| r.status == 200) {
                return Ok(spawned);
            }
            if let Some(status) = spawned.child.try_wait()? {
                bail!("{what} exited ({status}); log:\n{}", spawned.log_tail());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!(
            "{what} did not answer /healthz; log:\n{}",
            spawned.log_tail()
        )
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last 30 lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
