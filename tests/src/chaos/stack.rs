//! A broker and a Milvus of the crash trials' own, started by the deploy scripts in a run
//! directory of their own and on ports of their own, so that the trials can SIGKILL them
//! without touching the services the other tests share.
//!
//! Ports: `FRESHET_CHAOS_KAFKA_PORT` and `FRESHET_CHAOS_MILVUS_PORT`, by default 20 above
//! `FRESHET_KAFKA_PORT` and `FRESHET_MILVUS_PORT` (9112 and 19550 under the defaults of
//! `deploy/test.sh`); Milvus takes its other ports just above its proxy port
//! (`deploy/start-milvus.sh`). Run directory: `FRESHET_CHAOS_RUN_DIR`, by default `chaos`
//! under `FRESHET_RUN_DIR`.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{env, workspace_root};

/// One of the stack's services.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Broker,
    Milvus,
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Service::Broker => "tansu",
            Service::Milvus => "milvus",
        }
    }

    fn scripts(self) -> (&'static str, &'static str) {
        match self {
            Service::Broker => ("start-broker.sh", "stop-broker.sh"),
            Service::Milvus => ("start-milvus.sh", "stop-milvus.sh"),
        }
    }
}

/// Where the trials' own broker and Milvus run, and the scripts that start and stop them.
#[derive(Clone, Debug)]
pub struct Services {
    pub run_dir: PathBuf,
    pub kafka_port: u16,
    pub milvus_port: u16,
}

/// The trials' own broker and Milvus, started; dropping it stops both.
#[derive(Debug)]
pub struct Stack(pub Services);

impl std::ops::Deref for Stack {
    type Target = Services;
    fn deref(&self) -> &Services {
        &self.0
    }
}

fn port(name: &str, base: &str, default_base: u16) -> Result<u16> {
    if let Ok(v) = std::env::var(name) {
        return v
            .parse()
            .with_context(|| format!("{name}={v:?} is not a port"));
    }
    let base = match std::env::var(base) {
        Ok(v) => v
            .parse()
            .with_context(|| format!("{base}={v:?} is not a port"))?,
        Err(_) => default_base,
    };
    Ok(base + 20)
}

impl Stack {
    /// Starts a fresh stack (an empty run directory) where the environment says.
    pub fn start_from_env() -> Result<Stack> {
        let run_dir = match std::env::var("FRESHET_CHAOS_RUN_DIR") {
            Ok(d) => PathBuf::from(d),
            Err(_) => PathBuf::from(env("FRESHET_RUN_DIR")).join("chaos"),
        };
        let stack = Stack(Services {
            run_dir,
            kafka_port: port("FRESHET_CHAOS_KAFKA_PORT", "FRESHET_KAFKA_PORT", 9092)?,
            milvus_port: port("FRESHET_CHAOS_MILVUS_PORT", "FRESHET_MILVUS_PORT", 19530)?,
        });
        // Whatever a previous run left there (the scripts touch only what they started).
        stack.stop_all();
        match std::fs::remove_dir_all(&stack.run_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).context(format!("emptying {}", stack.run_dir.display())),
        }
        std::fs::create_dir_all(&stack.run_dir)?;
        stack.start(Service::Broker)?;
        stack.start(Service::Milvus)?;
        Ok(stack)
    }
}

impl Services {
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.kafka_port)
    }

    pub fn milvus_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.milvus_port)
    }

    fn script(&self, name: &str) -> Result<()> {
        let out = Command::new(workspace_root().join("deploy").join(name))
            .env("FRESHET_RUN_DIR", &self.run_dir)
            .env("FRESHET_KAFKA_PORT", self.kafka_port.to_string())
            .env("FRESHET_MILVUS_PORT", self.milvus_port.to_string())
            .env("FRESHET_TOPIC", "chaos")
            .env("FRESHET_PARTITIONS", "1")
            .env_remove("FRESHET_MILVUS_IMPL")
            .output()
            .with_context(|| format!("running deploy/{name}"))?;
        if !out.status.success() {
            bail!(
                "deploy/{name} failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Starts `what` (again) and waits until it serves; returns how long that took.
    pub fn start(&self, what: Service) -> Result<Duration> {
        let t = Instant::now();
        self.script(what.scripts().0)?;
        Ok(t.elapsed())
    }

    /// SIGKILLs every process of `what` (the process group the deploy script recorded in this
    /// stack's run directory) and waits until they are gone.
    pub fn kill(&self, what: Service) -> Result<()> {
        let pidfile = self
            .run_dir
            .join("pids")
            .join(format!("{}.pid", what.name()));
        let pid = crate::pidfile_pid(&pidfile)?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(what.name()) {
            bail!(
                "pid {pid} from {} is not {}: {:?}",
                pidfile.display(),
                what.name(),
                String::from_utf8_lossy(&cmdline)
            );
        }
        let group = format!("-{pid}");
        Command::new("kill")
            .args(["-KILL", "--", &group])
            .status()
            .context("kill")?;
        let deadline = Instant::now() + Duration::from_secs(20);
        // `kill -0 -PGID` fails once no process of the group is left.
        while Command::new("kill")
            .args(["-0", "--", &group])
            .stderr(std::process::Stdio::null())
            .status()
            .context("kill -0")?
            .success()
        {
            if Instant::now() > deadline {
                bail!("process group {pid} ({}) outlived SIGKILL", what.name());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn stop_all(&self) {
        for what in [Service::Milvus, Service::Broker] {
            if let Err(e) = self.script(what.scripts().1) {
                eprintln!("stopping the chaos {}: {e:#}", what.name());
            }
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.0.stop_all();
    }
}
