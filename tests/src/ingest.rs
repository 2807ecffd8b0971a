//! The ingest service in integration tests: spawn the real `freshet-ingest` binary on a free
//! port against a [`Case`]'s topic, requests with exactly the headers they are given (file
//! uploads, missing content types), and the query node's offset wait.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use crate::query::{QueryNode, Reply};
use crate::spawned::Spawned;
use crate::{free_port, workspace_root, Case};

/// The `freshet-ingest` binary (`FRESHET_INGEST_BIN` overrides).
pub fn ingest_bin() -> PathBuf {
    std::env::var("FRESHET_INGEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("target/debug/freshet-ingest"))
}

/// A port nothing listens on (yet).
pub fn free_tcp_port() -> u16 {
    free_port()
}

/// A running ingest service (killed on drop).
pub struct IngestService {
    pub addr: String,
    process: Spawned,
}

impl Case {
    /// Starts an ingest service producing to this case's topic; `settings` are extra
    /// `FRESHET_*` variables (e.g. `("FRESHET_INGEST_KEYS", r#"[{name = …}]"#.into())`).
    /// A `FRESHET_INGEST_LISTEN` among them sets the port (the service is reached on
    /// 127.0.0.1).
    pub fn start_ingest(&self, settings: &[(&str, String)]) -> Result<IngestService> {
        let port = settings
            .iter()
            .find(|(k, _)| *k == "FRESHET_INGEST_LISTEN")
            .and_then(|(_, v)| v.rsplit(':').next()?.parse().ok())
            .unwrap_or_else(free_port);
        let addr = format!("127.0.0.1:{port}");
        let log = self.dir.join(format!("ingest-{port}.log"));
        let cmd = self.ingest_command(port, settings);
        let process = Spawned::start(
            "the ingest service",
            cmd,
            &addr,
            log,
            Duration::from_secs(30),
        )?;
        Ok(IngestService { addr, process })
    }

    /// Runs the ingest service with `settings` expecting it to refuse to start: its exit
    /// status must be a failure within 30 s; returns what it wrote.
    pub fn ingest_refusing_to_start(&self, settings: &[(&str, String)]) -> Result<String> {
        let mut child = self
            .ingest_command(free_port(), settings)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", ingest_bin().display()))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("the ingest service started (it was expected to refuse)");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            bail!("the ingest service exited successfully: {text}");
        }
        Ok(text)
    }

    fn ingest_command(&self, port: u16, settings: &[(&str, String)]) -> Command {
        let mut cmd = Command::new(ingest_bin());
        cmd.env("FRESHET_KAFKA_BROKERS", &self.kafka.brokers)
            .env("FRESHET_KAFKA_TOPIC", &self.kafka.topic)
            .env("FRESHET_INGEST_LISTEN", format!("127.0.0.1:{port}"))
            .env("FRESHET_LOG", "info");
        for (k, v) in settings {
            cmd.env(k, v);
        }
        cmd
    }
}

impl IngestService {
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// One request with exactly these headers.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Reply> {
        crate::http::send(&self.addr, method, path, headers, body)
    }

    /// A write that must succeed: its JSON answer (with `partition` and `offset`).
    pub fn write(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Value> {
        let r = self.call(method, path, headers, body)?;
        if r.status != 200 {
            bail!(
                "{method} {path} → {}: {}; log:\n{}",
                r.status,
                r.body,
                self.log_tail()
            );
        }
        r.json()
    }
}

impl QueryNode {
    /// `GET /v1/index/wait` for the record an ingest answer (`topic`, `partition`, `offset`)
    /// describes.
    pub fn wait_offset(&self, written: &Value, timeout_ms: u64) -> Result<Reply> {
        let (topic, partition, offset) = (
            written["topic"]
                .as_str()
                .ok_or_else(|| anyhow!("no topic in {written}"))?,
            written["partition"]
                .as_i64()
                .ok_or_else(|| anyhow!("no partition in {written}"))?,
            written["offset"]
                .as_i64()
                .ok_or_else(|| anyhow!("no offset in {written}"))?,
        );
        self.get(&format!(
            "/v1/index/wait?topic={topic}&partition={partition}&offset={offset}&timeout_ms={timeout_ms}"
        ))
    }
}
