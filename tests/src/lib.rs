//! Helpers for freshet's integration tests: a test case owns its own topic, dead-letter topic,
//! Milvus collection, tantivy index and embedding cache, and runs the real `freshet` binary
//! against the services that `deploy/test.sh` started.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use freshet_kafka::{admin, DocumentProducer, KafkaConfig, PartitionReader, Record};
use freshet_operators::chunk::Chunk;
use freshet_tantivy::ChunkIndexReader;

pub mod cdc;
pub mod chaos;
pub mod disk;
pub mod http;
pub mod ingest;
pub mod llm;
mod milvus;
mod process;
pub mod prometheus;
pub mod proxy;
pub mod query;
pub use process::{cpu_seconds, may_raise_priority, nice, pidfile_pid, process_group, threads};
pub mod reference;
pub use reference::{expected_chunks, expected_chunks_with, ids};
pub mod reindex;
pub mod spawned;
pub mod watch;

#[cfg(test)]
mod manifest_tests;

/// Vocabulary of the generated long Markdown documents of the e2e tests.
pub const RIVER_WORDS: [&str; 20] = [
    "river",
    "delta",
    "sediment",
    "flow",
    "basin",
    "channel",
    "estuary",
    "tide",
    "marsh",
    "levee",
    "current",
    "erosion",
    "meander",
    "floodplain",
    "silt",
    "watershed",
    "discharge",
    "gauge",
    "spring",
    "freshet",
];

/// Required environment, set by `deploy/test.sh`.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the integration tests with deploy/test.sh")
    })
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The `freshet` binary built by `deploy/test.sh` (`FRESHET_BIN` overrides).
pub fn freshet_bin() -> PathBuf {
    std::env::var("FRESHET_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            workspace_root()
                .join("target")
                .join("debug")
                .join("freshet")
        })
}

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{name}_{}_{}", std::process::id(), nanos % 1_000_000_000)
}

/// A TCP port free on 127.0.0.1 right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(19464)
}

/// One isolated test case.
pub struct Case {
    pub name: String,
    pub dir: PathBuf,
    pub kafka: KafkaConfig,
    pub collection: String,
    /// The Milvus the pipeline, the query node and [`Case::milvus_ids`] use
    /// (`FRESHET_MILVUS_URL` unless a test points it elsewhere).
    pub milvus_url: String,
    pub partitions: i32,
    pub metrics_port: u16,
    producer: DocumentProducer,
    /// Highest offset produced per partition.
    produced: BTreeMap<i32, i64>,
    /// The same for each other topic the case publishes to ([`Case::send_to`]).
    produced_elsewhere: BTreeMap<String, BTreeMap<i32, i64>>,
    pipeline: Option<Child>,
    /// Further processes of a multi-process (cluster) pipeline.
    peers: Vec<Child>,
    pub extra_env: Vec<(String, String)>,
    /// Arguments of `freshet run` after `run` (`--new-index`, ...).
    pub run_args: Vec<String>,
    /// The tantivy index the pipeline writes and the case reads (`tantivy` in its directory).
    pub tantivy: PathBuf,
    /// The pipeline's address space limit in bytes (`RLIMIT_AS`): a process that allocates past
    /// it fails as it would when a machine or container runs out of memory.
    pub address_space_limit: Option<u64>,
    /// Keep the directory and the collection when dropped, as for a failed test (a test that
    /// fails by returning an error rather than by a panic sets it).
    pub keep: bool,
}

impl Case {
    pub fn new(name: &str, partitions: i32) -> Result<Case> {
        Case::new_on(
            name,
            partitions,
            &env("FRESHET_KAFKA_BROKERS"),
            &env("FRESHET_MILVUS_URL"),
        )
    }

    /// [`Case::new`] on another broker and Milvus than the shared ones.
    pub fn new_on(name: &str, partitions: i32, brokers: &str, milvus_url: &str) -> Result<Case> {
        let id = unique(name);
        let dir = std::env::temp_dir().join("freshet-tests").join(&id);
        std::fs::create_dir_all(&dir)?;
        let mut kafka = KafkaConfig::with_brokers(brokers);
        kafka.topic = format!("docs.{id}");
        kafka.dlq_topic = format!("docs.{id}.dlq");
        kafka.group_id = format!("freshet-{id}");
        admin::ensure_topic(&kafka, &kafka.topic, partitions)?;
        admin::ensure_topic(&kafka, &kafka.dlq_topic, 1)?;
        let producer = DocumentProducer::new(&kafka)?;
        Ok(Case {
            name: id.clone(),
            tantivy: dir.join("tantivy"),
            dir,
            kafka,
            collection: format!("t_{}", id.replace(['.', '-'], "_")),
            milvus_url: milvus_url.to_string(),
            partitions,
            metrics_port: free_port(),
            producer,
            produced: BTreeMap::new(),
            produced_elsewhere: BTreeMap::new(),
            pipeline: None,
            peers: Vec::new(),
            extra_env: Vec::new(),
            run_args: Vec::new(),
            address_space_limit: None,
            keep: false,
        })
    }

    pub fn tantivy_path(&self) -> PathBuf {
        self.tantivy.clone()
    }

    /// Publishes one record (value `None` = tombstone).
    pub fn send(&mut self, key: &str, value: Option<&[u8]>) -> Result<()> {
        self.send_at(key, value).map(|_| ())
    }

    /// [`Case::send`], returning the record's partition and offset.
    pub fn send_at(&mut self, key: &str, value: Option<&[u8]>) -> Result<(i32, i64)> {
        let (p, o) = self
            .producer
            .send(&self.kafka.topic, key.as_bytes(), value)?;
        let e = self.produced.entry(p).or_insert(o);
        *e = (*e).max(o);
        Ok((p, o))
    }

    /// Publishes one record to another topic the pipeline reads; [`Case::wait_indexed`] waits
    /// for it too.
    pub fn send_to(&mut self, topic: &str, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let (p, o) = self.producer.send(topic, key, value)?;
        let produced = self.produced_elsewhere.entry(topic.to_string());
        let e = produced.or_default().entry(p).or_insert(o);
        *e = (*e).max(o);
        Ok(())
    }

    pub fn send_json(&mut self, key: &str, value: &serde_json::Value) -> Result<()> {
        let bytes = serde_json::to_vec(value)?;
        self.send(key, Some(&bytes))
    }

    /// Starts `freshet run` for this case.
    pub fn start_pipeline(&mut self) -> Result<()> {
        if self.pipeline.is_some() {
            bail!("pipeline already running");
        }
        let child = self.spawn(self.metrics_port, &[])?;
        self.pipeline = Some(child);
        Ok(())
    }

    /// Starts the pipeline as a cluster of `processes` processes with one worker each (process 0
    /// is the one `metrics()` scrapes).
    pub fn start_cluster(&mut self, processes: usize) -> Result<()> {
        let addresses: Vec<String> = (0..processes)
            .map(|_| format!("\"127.0.0.1:{}\"", free_port()))
            .collect();
        let addresses = format!("[{}]", addresses.join(","));
        for p in 0..processes {
            let env = [
                ("FRESHET_PIPELINE_WORKERS", "1".to_string()),
                ("FRESHET_PIPELINE_PROCESS_INDEX", p.to_string()),
                ("FRESHET_PIPELINE_CLUSTER_ADDRESSES", addresses.clone()),
            ];
            let port = if p == 0 {
                self.metrics_port
            } else {
                free_port()
            };
            let child = self.spawn(port, &env)?;
            if p == 0 {
                self.pipeline = Some(child);
            } else {
                self.peers.push(child);
            }
        }
        Ok(())
    }

    fn spawn(&self, metrics_port: u16, settings: &[(&str, String)]) -> Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("pipeline.log"))?;
        let mut cmd = Command::new(freshet_bin());
        cmd.arg("run")
            .args(&self.run_args)
            .env("FRESHET_KAFKA_BROKERS", &self.kafka.brokers)
            .env("FRESHET_KAFKA_TOPIC", &self.kafka.topic)
            .env("FRESHET_KAFKA_DLQ_TOPIC", &self.kafka.dlq_topic)
            .env("FRESHET_KAFKA_GROUP_ID", &self.kafka.group_id)
            .env(
                "FRESHET_KAFKA_CLIENT_PROPERTIES",
                "{\"session.timeout.ms\" = \"6000\"}",
            )
            .env("FRESHET_MILVUS_URL", &self.milvus_url)
            .env("FRESHET_MILVUS_COLLECTION", &self.collection)
            .env("FRESHET_TANTIVY_PATH", self.tantivy_path())
            .env(
                "FRESHET_PIPELINE_EMBEDDING_CACHE_PATH",
                self.dir.join("cache.log"),
            )
            .env(
                "FRESHET_METRICS_LISTEN",
                format!("127.0.0.1:{metrics_port}"),
            )
            .env("FRESHET_LOG", "info")
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
        for (k, v) in settings {
            cmd.env(k, v);
        }
        if let Some(limit) = self.address_space_limit {
            use std::os::unix::process::CommandExt;
            let rlimit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            // SAFETY: setrlimit(2) is async-signal-safe and touches no memory of the parent.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_AS, &rlimit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd.spawn()
            .with_context(|| format!("starting {}", freshet_bin().display()))
    }

    /// SIGKILL: no chance to flush or commit.
    pub fn kill_pipeline(&mut self) -> Result<()> {
        for mut c in self.peers.drain(..) {
            c.kill()?;
            c.wait()?;
        }
        if let Some(mut c) = self.pipeline.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// SIGTERM to every process of the pipeline at once (a cluster drains together: no process
    /// can finish while another still feeds the dataflow), then waits up to 60 s for each to
    /// exit successfully.
    pub fn stop_pipeline(&mut self) -> Result<()> {
        let mut all: Vec<Child> = self.peers.drain(..).collect();
        all.extend(self.pipeline.take());
        for c in &all {
            Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status()?;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        for mut c in all {
            loop {
                if let Some(status) = c.try_wait()? {
                    if !status.success() {
                        bail!("pipeline exited with {status}; log: {}", self.log_tail());
                    }
                    break;
                }
                if Instant::now() > deadline {
                    c.kill()?;
                    bail!(
                        "pipeline did not stop within 60 s; log: {}",
                        self.log_tail()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// Waits up to `timeout` for the pipeline (a single process) to exit by itself and returns
    /// its exit status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        let Some(child) = self.pipeline.as_mut() else {
            bail!("no pipeline running");
        };
        loop {
            if let Some(status) = child.try_wait()? {
                self.pipeline = None;
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!(
                    "pipeline still running after {timeout:?}; log:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pipeline's exit status if it has exited (it is then no longer running), `None` while
    /// it runs or when none was started.
    pub fn try_wait_pipeline(&mut self) -> Result<Option<std::process::ExitStatus>> {
        let Some(child) = self.pipeline.as_mut() else {
            return Ok(None);
        };
        let status = child.try_wait()?;
        if status.is_some() {
            self.pipeline = None;
        }
        Ok(status)
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("pipeline.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn check_alive(&mut self) -> Result<()> {
        if let Some(c) = self.pipeline.as_mut() {
            if let Some(status) = c.try_wait()? {
                self.pipeline = None;
                bail!(
                    "pipeline exited early with {status}; log:\n{}",
                    self.log_tail()
                );
            }
        }
        Ok(())
    }

    /// The pipeline's pid (process 0 of a cluster) while it runs.
    pub fn pipeline_pid(&self) -> Option<u32> {
        self.pipeline.as_ref().map(Child::id)
    }

    /// Waits until the tantivy commit reflects every record produced so far.
    pub fn wait_indexed(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive()?;
            if self.is_indexed() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("not indexed within {timeout:?}; log:\n{}", self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The tantivy commit reflects every record produced so far.
    pub fn is_indexed(&self) -> bool {
        let Ok(Some(payload)) =
            ChunkIndexReader::open(self.tantivy_path()).and_then(|r| r.last_payload())
        else {
            return false;
        };
        let topics =
            std::iter::once((&self.kafka.topic, &self.produced)).chain(&self.produced_elsewhere);
        topics.into_iter().all(|(topic, produced)| {
            let done = payload.offsets.get(topic);
            produced
                .iter()
                .all(|(p, o)| done.and_then(|d| d.get(p)).is_some_and(|n| *n > *o))
        })
    }

    /// Every chunk in the tantivy index.
    pub fn tantivy_chunks(&self) -> Result<Vec<Chunk>> {
        let reader = ChunkIndexReader::open(self.tantivy_path())?;
        Ok(reader.load_all()?)
    }

    /// Both indexes hold exactly `expected`: tantivy records equal field by field (but the
    /// version stamp `doc_hash`, which no index stores), Milvus exactly
    /// the leaf ids, nothing duplicated in either.
    pub fn assert_holds_exactly(&self, expected: &BTreeMap<String, Chunk>) -> Result<()> {
        self.assert_tantivy_holds_exactly(expected)?;
        let milvus = self.milvus_ids()?;
        let milvus_set: BTreeSet<String> = milvus.iter().cloned().collect();
        assert_eq!(
            milvus_set.len(),
            milvus.len(),
            "duplicate chunk ids in Milvus"
        );
        let leaves: BTreeSet<String> = expected
            .values()
            .filter(|c| c.kind == freshet_operators::chunk::ChunkKind::Leaf)
            .map(|c| c.chunk_id.clone())
            .collect();
        assert_eq!(milvus_set, leaves, "Milvus chunk ids");
        Ok(())
    }

    /// The tantivy half of [`Case::assert_holds_exactly`] (tantivy's commit is what is durable;
    /// Milvus may hold the rows of a batch whose tantivy commit has not happened yet).
    pub fn assert_tantivy_holds_exactly(&self, expected: &BTreeMap<String, Chunk>) -> Result<()> {
        let in_tantivy = self.tantivy_chunks()?;
        let count = in_tantivy.len();
        let got: BTreeMap<String, Chunk> = in_tantivy
            .into_iter()
            .map(|c| (c.chunk_id.clone(), c))
            .collect();
        assert_eq!(got.len(), count, "duplicate chunk ids in tantivy");
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "tantivy chunk ids"
        );
        for (id, chunk) in expected {
            // the indexes do not store a chunk's version stamp
            let want = Chunk {
                doc_hash: String::new(),
                ..chunk.clone()
            };
            assert_eq!(got[id], want, "tantivy record of {id}");
        }
        Ok(())
    }

    /// Scrapes the pipeline's `/metrics` into name{labels} → value.
    pub fn metrics(&self) -> Result<BTreeMap<String, f64>> {
        let addr = format!("127.0.0.1:{}", self.metrics_port);
        let body = http::request(&addr, "GET", "/metrics", &[], b"")?.body;
        Ok(parse_metrics(&body))
    }

    /// `GET` one of the pipeline's endpoint paths (`/readyz`, `/healthz`): status and body.
    pub fn endpoint(&self, path: &str) -> Result<(u16, String)> {
        let addr = format!("127.0.0.1:{}", self.metrics_port);
        let r = http::request(&addr, "GET", path, &[], b"")?;
        Ok((r.status, r.body))
    }

    pub fn metric(&self, name: &str) -> Result<f64> {
        Ok(self.metrics()?.get(name).copied().unwrap_or(0.0))
    }

    /// Reads every record of the dead-letter topic.
    pub fn dlq_records(&self, expected: usize, timeout: Duration) -> Result<Vec<Record>> {
        let mut cfg = self.kafka.clone();
        cfg.group_id = format!("{}-dlq-reader", self.kafka.group_id);
        let mut reader =
            PartitionReader::new(&cfg, &self.kafka.dlq_topic, &[0], &BTreeMap::from([(0, 0)]))?;
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        while out.len() < expected && Instant::now() < deadline {
            out.extend(reader.poll_batch(100, Duration::from_millis(500))?);
        }
        Ok(out)
    }
}

impl Drop for Case {
    /// Stops the pipeline. A case that passed also drops its Milvus collection (every loaded
    /// collection costs Milvus memory and CPU for the rest of the run) and its directory; a
    /// failed one leaves both for inspection.
    fn drop(&mut self) {
        let _ = self.kill_pipeline();
        if self.keep || std::thread::panicking() {
            eprintln!(
                "case {} failed: kept collection {} and {}",
                self.name,
                self.collection,
                self.dir.display()
            );
            return;
        }
        if let Err(e) = self.with_milvus(|m| async move { m.drop_collection().await }) {
            eprintln!("dropping collection {}: {e}", self.collection);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Prometheus text exposition as name{labels} → value (comments and unparsable lines left out).
pub fn parse_metrics(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            Some((name.to_string(), value.parse::<f64>().ok()?))
        })
        .collect()
}
