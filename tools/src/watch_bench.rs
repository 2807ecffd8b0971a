//! `freshet-tools bench-watch`: folder sync at scale. Generates `files` small Markdown files
//! (`per_dir` to a directory), then runs the real `freshet watch` (the binary next to this one)
//! on them: its first scan (every file published), its CPU while nothing changes, and a
//! restart over the unchanged files (records published, counted in the topic, and the time to
//! the end of its scan). Needs the broker; give it a fresh topic.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use crate::config::Config;
use crate::inspect::high_watermarks;

/// `freshet-tools bench-watch`.
#[derive(Clone, Debug, clap::Args)]
pub struct WatchBenchArgs {
    /// Where the files are generated (kept between runs: an existing tree is reused).
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long, default_value_t = 100_000)]
    pub files: usize,
    #[arg(long, default_value_t = 100)]
    pub per_dir: usize,
    /// Seconds of idle CPU measured after the first scan.
    #[arg(long, default_value_t = 30)]
    pub idle_secs: u64,
}

#[derive(Debug, Serialize)]
pub struct WatchBenchReport {
    pub files: usize,
    pub first_scan_s: f64,
    pub first_scan_records: i64,
    /// CPU of the idle watcher, percent of one core.
    pub idle_cpu_percent: f64,
    pub idle_rss_mib: f64,
    pub restart_scan_s: f64,
    pub restart_records: i64,
}

impl crate::Run for WatchBenchArgs {
    /// Prints the report as JSON.
    fn run(self, config: Option<&Path>) -> Result<i32> {
        let report = run(&Config::load(config)?, &self)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(0)
    }
}

fn run(config: &Config, args: &WatchBenchArgs) -> Result<WatchBenchReport> {
    if args.per_dir == 0 {
        bail!("--per-dir must be at least 1");
    }
    generate(&args.dir, args.files, args.per_dir)?;
    let state = args.dir.with_extension("state.redb");
    let _ = std::fs::remove_file(&state);
    let records = || -> Result<i64> {
        Ok(high_watermarks(&config.kafka, "bench-watch")
            .map(|h| h.values().sum())
            .unwrap_or(0))
    };
    let before = records()?;
    let (mut first, first_scan) = start_watch(&args.dir, &state)?;
    let first_scan_records = records()? - before;
    let pid = first.id();
    let cpu0 = crate::procfs::cpu_ticks(pid)?;
    std::thread::sleep(Duration::from_secs(args.idle_secs));
    let cpu1 = crate::procfs::cpu_ticks(pid)?;
    let idle_rss_mib = crate::procfs::vm_rss_mib(pid)?;
    // Ticks are 1/100 s on Linux.
    let idle_cpu_percent = (cpu1 - cpu0) as f64 / args.idle_secs as f64;
    first.kill()?;
    first.wait()?;
    let before = records()?;
    let (mut second, restart_scan) = start_watch(&args.dir, &state)?;
    // Anything the restart publishes is acknowledged before its scan ends.
    let restart_records = records()? - before;
    second.kill()?;
    second.wait()?;
    Ok(WatchBenchReport {
        files: args.files,
        first_scan_s: first_scan.as_secs_f64(),
        first_scan_records,
        idle_cpu_percent,
        idle_rss_mib,
        restart_scan_s: restart_scan.as_secs_f64(),
        restart_records,
    })
}

/// `files` Markdown files of a few hundred bytes, `per_dir` to a directory.
fn generate(dir: &Path, files: usize, per_dir: usize) -> Result<()> {
    for i in 0..files {
        let sub = dir.join(format!("d{:05}", i / per_dir));
        let path = sub.join(format!("f{i:07}.md"));
        if path.exists() {
            continue;
        }
        std::fs::create_dir_all(&sub)?;
        let text = format!(
            "# Gauge report {i}\n\nThe river gauge {i} reported a discharge of {} cubic metres \
             per second after the spring freshet; sediment and silt were sampled at the levee.\n",
            100 + i % 900
        );
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Starts `freshet watch dir` and waits for the end of its start scan (its first `synced`
/// line): the process and how long the scan took from the start of the process.
fn start_watch(dir: &Path, state: &Path) -> Result<(Child, Duration)> {
    let bin = std::env::current_exe()?.with_file_name("freshet");
    let t0 = Instant::now();
    let mut child = Command::new(&bin)
        .arg("watch")
        .arg(dir)
        .arg("--state")
        .arg(state)
        .env("FRESHET_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains(" synced ") && tx.send(line).is_err() {
                return;
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(3600)) {
        Ok(_) => Ok((child, t0.elapsed())),
        Err(_) => {
            let _ = child.kill();
            bail!("freshet watch did not finish its scan")
        }
    }
}
