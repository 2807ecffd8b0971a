//! Folder-sync helpers: `freshet watch` as a real process on a case's topic, the records the
//! topic holds, and the wait until both indexes hold exactly what the directory says.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use freshet_kafka::{KafkaConfig, PartitionReader};
use freshet_operators::chunk::{Chunk, ChunkKind};
use freshet_publishers::{file_document, list_files, Mapping};

use crate::{freshet_bin, ids, Case};

/// A running `freshet watch`.
pub struct WatchProcess {
    child: Option<Child>,
    pub log: PathBuf,
}

impl WatchProcess {
    /// SIGKILL: no chance to finish a batch or write its state.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Fails if the watcher exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(c) = self.child.as_mut() {
            if let Some(status) = c.try_wait()? {
                self.child = None;
                bail!("watcher exited with {status}; log:\n{}", self.log_tail());
            }
        }
        Ok(())
    }
}

impl Drop for WatchProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// The records a clean index of `dir` is made of: each file as `freshet watch` (and
/// `freshet publish --dir`) sends it; files that cannot be sent are left out.
pub fn directory_records(dir: &Path) -> Result<Vec<(String, Option<Vec<u8>>)>> {
    let mut out = Vec::new();
    for path in list_files(dir)? {
        if let Ok(o) = file_document(dir, &path, &Mapping::default()) {
            out.push((o.id, o.value));
        }
    }
    Ok(out)
}

/// Starts `freshet watch dir` on `kafka`'s topic and dead-letter topic, logging to `log`.
pub fn spawn_watch(
    kafka: &KafkaConfig,
    dir: &Path,
    state: &Path,
    log: &Path,
    args: &[&str],
) -> Result<WatchProcess> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let properties: Vec<String> = kafka
        .client_properties
        .iter()
        .map(|(k, v)| format!("{k:?} = {v:?}"))
        .collect();
    let child = Command::new(freshet_bin())
        .arg("watch")
        .arg(dir)
        .arg("--state")
        .arg(state)
        .args(args)
        .env("FRESHET_KAFKA_BROKERS", &kafka.brokers)
        .env("FRESHET_KAFKA_TOPIC", &kafka.topic)
        .env("FRESHET_KAFKA_DLQ_TOPIC", &kafka.dlq_topic)
        .env(
            "FRESHET_KAFKA_CLIENT_PROPERTIES",
            format!("{{{}}}", properties.join(", ")),
        )
        .env("FRESHET_LOG", "info")
        .stdout(Stdio::from(file.try_clone()?))
        .stderr(Stdio::from(file))
        .spawn()
        .with_context(|| format!("starting {} watch", freshet_bin().display()))?;
    Ok(WatchProcess {
        child: Some(child),
        log: log.to_path_buf(),
    })
}

/// The latest value per key of a topic (`None`: a tombstone).
pub type Latest = BTreeMap<String, Option<Vec<u8>>>;

/// Every record of `kafka.topic` (all partitions, from the start), read until the high
/// watermarks: the latest value per key and how many records there were.
pub fn topic_contents(kafka: &KafkaConfig) -> Result<(Latest, usize)> {
    let partitions = freshet_kafka::admin::partitions(kafka, &kafka.topic)?;
    let mut cfg = kafka.clone();
    cfg.group_id = format!("{}-contents-{}", kafka.group_id, std::process::id());
    let start: BTreeMap<i32, i64> = partitions.iter().map(|p| (*p, 0)).collect();
    let mut reader = PartitionReader::new(&cfg, &kafka.topic, &partitions, &start)?;
    let high: i64 = reader.high_watermarks()?.values().sum();
    let mut latest = BTreeMap::new();
    let mut read = 0usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    while (read as i64) < high {
        if Instant::now() > deadline {
            bail!("read {read} of {high} records of {}", kafka.topic);
        }
        for r in reader.poll_batch(1000, Duration::from_millis(500))? {
            read += 1;
            let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).to_string();
            latest.insert(key, r.value);
        }
    }
    Ok((latest, read))
}

impl Case {
    /// Starts `freshet watch dir` on this case's topic with its state at `state`.
    pub fn start_watch(&self, dir: &Path, state: &Path, args: &[&str]) -> Result<WatchProcess> {
        spawn_watch(&self.kafka, dir, state, &self.dir.join("watch.log"), args)
    }

    /// Records the document topic holds (its high watermarks), which [`Case::wait_indexed`]
    /// then waits for as if this case had produced them.
    pub fn topic_records(&mut self) -> Result<i64> {
        let partitions: Vec<i32> = (0..self.partitions).collect();
        let mut cfg = self.kafka.clone();
        cfg.group_id = format!("{}-watermarks", self.kafka.group_id);
        let start: BTreeMap<i32, i64> = partitions.iter().map(|p| (*p, 0)).collect();
        let reader = PartitionReader::new(&cfg, &self.kafka.topic, &partitions, &start)?;
        let high = reader.high_watermarks()?;
        for (p, next) in &high {
            if *next > 0 {
                let e = self.produced.entry(*p).or_insert(next - 1);
                *e = (*e).max(next - 1);
            }
        }
        Ok(high.values().sum())
    }

    /// Waits until both indexes hold exactly `expected` (chunk ids in tantivy, leaf ids in
    /// Milvus), then checks every stored field ([`Case::assert_holds_exactly`]).
    pub fn wait_holds_exactly(
        &mut self,
        expected: &BTreeMap<String, Chunk>,
        timeout: Duration,
        watcher: &mut WatchProcess,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let want: BTreeSet<String> = ids(expected.values());
        let leaves: BTreeSet<String> = ids(expected.values().filter(|c| c.kind == ChunkKind::Leaf));
        loop {
            watcher.check_alive()?;
            self.topic_records()?;
            let left = deadline.saturating_duration_since(Instant::now());
            self.wait_indexed(left.max(Duration::from_secs(1)))?;
            let got = ids(&self.tantivy_chunks()?);
            // A listing taken while Milvus still applies a write can disagree with its own
            // count (freshet_milvus reports that): look again until the deadline.
            let milvus: BTreeSet<String> = match self.milvus_ids() {
                Ok(ids) => ids.into_iter().collect(),
                Err(e) if Instant::now() < deadline => {
                    eprintln!("listing Milvus again: {e:#}");
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                Err(e) => return Err(e),
            };
            if got == want && milvus == leaves {
                return self.assert_holds_exactly(expected);
            }
            if Instant::now() > deadline {
                return Err(anyhow!(
                    "indexes differ after {timeout:?}: tantivy missing {:?}, extra {:?}; \
                     Milvus missing {:?}, extra {:?}\nwatch log:\n{}",
                    want.difference(&got).collect::<Vec<_>>(),
                    got.difference(&want).collect::<Vec<_>>(),
                    leaves.difference(&milvus).collect::<Vec<_>>(),
                    milvus.difference(&leaves).collect::<Vec<_>>(),
                    watcher.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
