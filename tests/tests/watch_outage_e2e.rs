//! Folder sync across a broker outage: a broker of its own (`deploy/start-broker.sh` on a free
//! port) is stopped while files change, for longer than the watcher's delivery timeout, and
//! started again; the watcher stalls, retries, and the topic ends holding exactly the files (the
//! latest record of every id is its current file, a tombstone for each deleted one). Nothing
//! was recorded as published while the broker was down: a restart afterwards publishes nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use freshet_kafka::KafkaConfig;
use freshet_tests::watch::{directory_records, spawn_watch, topic_contents, WatchProcess};
use freshet_tests::{free_port, workspace_root};

/// A tansu broker started by the deploy scripts in a run directory of its own.
struct Broker {
    run_dir: PathBuf,
    port: u16,
}

impl Broker {
    fn script(&self, name: &str) -> Result<()> {
        let status = Command::new(workspace_root().join("deploy").join(name))
            .env("FRESHET_RUN_DIR", &self.run_dir)
            .env("FRESHET_KAFKA_PORT", self.port.to_string())
            .env("FRESHET_TOPIC", "docs")
            .status()
            .with_context(|| format!("running deploy/{name}"))?;
        if !status.success() {
            bail!("deploy/{name} failed: {status}");
        }
        Ok(())
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.script("stop-broker.sh");
    }
}

/// The latest record of every id on the topic is exactly the directory's files.
fn topic_matches(kafka: &KafkaConfig, dir: &Path) -> Result<bool> {
    let want: BTreeMap<String, Option<Vec<u8>>> = directory_records(dir)?.into_iter().collect();
    let (latest, _) = topic_contents(kafka)?;
    let live: BTreeMap<String, Option<Vec<u8>>> =
        latest.into_iter().filter(|(_, v)| v.is_some()).collect();
    Ok(live == want)
}

fn wait_matches(
    kafka: &KafkaConfig,
    dir: &Path,
    w: &mut WatchProcess,
    within: Duration,
) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        w.check_alive()?;
        // A broker just started may not answer metadata yet: that is "not yet".
        if topic_matches(kafka, dir).unwrap_or(false) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the topic does not match the directory; watch log:\n{}",
                w.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_broker_outage_stalls_the_watcher_and_loses_nothing() -> Result<()> {
    let scratch = std::env::temp_dir().join(format!("freshet-watch-outage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let dir = scratch.join("docs");
    std::fs::create_dir_all(&dir)?;
    let broker = Broker {
        run_dir: scratch.join("run"),
        port: free_port(),
    };
    broker.script("start-broker.sh")?;
    let mut kafka = KafkaConfig::with_brokers(format!("127.0.0.1:{}", broker.port));
    kafka.topic = "docs".into();
    kafka.dlq_topic = "docs.dlq".into();
    // Deliveries give up after 3 s, so the outage outlasts them and the watcher's own retries
    // carry the batch.
    kafka
        .client_properties
        .insert("message.timeout.ms".into(), "3000".into());
    for i in 0..5 {
        std::fs::write(
            dir.join(format!("f{i}.md")),
            format!("# F{i}\n\nbefore the outage"),
        )?;
    }
    let state = scratch.join("state.redb");
    let log = scratch.join("watch.log");
    let mut watcher = spawn_watch(&kafka, &dir, &state, &log, &[])?;
    wait_matches(&kafka, &dir, &mut watcher, Duration::from_secs(60))?;

    broker.script("stop-broker.sh")?;
    std::fs::write(dir.join("f0.md"), "# F0\n\nedited during the outage")?;
    std::fs::remove_file(dir.join("f1.md"))?;
    std::fs::write(dir.join("new.md"), "# New\n\nwritten during the outage")?;
    // The batch is not acknowledged: the watcher says so and retries (it does not exit).
    let deadline = Instant::now() + Duration::from_secs(90);
    while !std::fs::read_to_string(&log)?.contains("broker did not acknowledge: retrying") {
        watcher.check_alive()?;
        if Instant::now() > deadline {
            bail!("no retry while the broker is down:\n{}", watcher.log_tail());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    std::fs::write(dir.join("f2.md"), "# F2\n\nedited during the outage, later")?;
    broker.script("start-broker.sh")?;
    wait_matches(&kafka, &dir, &mut watcher, Duration::from_secs(120))?;

    // Everything is recorded as published: a restart publishes nothing.
    watcher.kill()?;
    let (_, before) = topic_contents(&kafka)?;
    let mut watcher = spawn_watch(&kafka, &dir, &state, &log, &[])?;
    std::thread::sleep(Duration::from_secs(3));
    watcher.check_alive()?;
    let (_, after) = topic_contents(&kafka)?;
    assert_eq!(
        after, before,
        "records after a restart over unchanged files"
    );
    drop(watcher);
    drop(broker);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
