//! `freshet run`: [`preflight`](crate::preflight) (model, topics, indexes, recovery), the last
//! crash counted and its suspects prepared alone ([`quarantine`](crate::quarantine)), then the
//! timely workers ([`worker`](crate::worker)) until SIGTERM/SIGINT (drain and commit) or a fatal
//! error (stop without committing; a restart replays what was not durable).

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Result};

use crate::config::Config;
use crate::embedder::Models;
use crate::endpoint::Readiness;
use crate::metrics::Metrics;
use crate::preflight::{preflight, StartFlags};
use crate::sink::Fatal;
use crate::source::Processing;
use crate::worker::{run_worker, Shared};

/// Runs until `stop` is set (then drains and commits) or a fatal error.
pub fn run(
    config: Config,
    flags: StartFlags,
    stop: Arc<AtomicBool>,
    metrics: Metrics,
    ready: Readiness,
) -> Result<()> {
    let start = match preflight(&config, flags, &metrics, &ready, &stop) {
        Ok(p) => p,
        Err(e) => {
            ready.failed(format!("{e:#}"));
            return Err(e);
        }
    };
    let (sinks, start_offsets, bootstrap) = match start.recovered {
        Some(r) => (Some(r.sinks), r.start_offsets, Some(r.bootstrap)),
        None => (None, Default::default(), None),
    };
    let processing = Arc::new(Processing {
        limits: config.limits.clone(),
        chunking: config.chunking.clone(),
        tokens: Arc::new(start.tokens),
    });
    let quarantine = match crate::quarantine::start(
        &config,
        &start.topics,
        &processing,
        &start_offsets,
        &ready,
        &metrics,
    ) {
        Ok(q) => q,
        Err(e) => {
            let e =
                e.context("counting the last crash (the crash ledger beside the embedding cache)");
            ready.failed(format!("{e:#}"));
            return Err(e);
        }
    };
    let fatal: Fatal = Arc::new(Mutex::new(None));
    let shared = Arc::new(Shared {
        pipeline: config.pipeline.clone(),
        kafka: config.kafka.clone(),
        embedding: config.embedding.clone(),
        topics: start.topics,
        partitions: start.partitions,
        start_offsets,
        cache: start.cache,
        models: Models::new(start.model, &config.embedding, &config.pipeline),
        processing,
        quarantine,
        metrics,
        stop,
        fatal: fatal.clone(),
        sinks: Mutex::new(sinks),
        bootstrap: Mutex::new(bootstrap),
        ready: ready.clone(),
        read_epochs: Default::default(),
    });
    ready.workers_starting(config.pipeline.workers);
    match crate::priority::lower_session(config.pipeline.nice) {
        Ok(s) => tracing::info!(session = ?s, "session's CPU priority (autogroup)"),
        Err(e) => tracing::warn!(error = %e, "could not lower the session's CPU priority"),
    }
    let guards = timely::execute(timely_config(&config), move |worker| {
        run_worker(worker, &shared)
    })
    .map_err(|e| anyhow!("starting timely workers: {e}"))?;
    drop(guards);
    if let Some(msg) = fatal.lock().map_err(|_| anyhow!("lock"))?.take() {
        ready.failed(msg.clone());
        bail!("pipeline stopped: {msg}");
    }
    Ok(())
}

/// One process of `workers` threads, or one of a cluster (`cluster_addresses`).
fn timely_config(config: &Config) -> timely::Config {
    let p = &config.pipeline;
    let communication = if p.cluster_addresses.len() > 1 {
        timely::CommunicationConfig::Cluster {
            threads: p.workers,
            process: p.process_index,
            addresses: p.cluster_addresses.clone(),
            report: false,
            zerocopy: false,
        }
    } else {
        timely::CommunicationConfig::Process(p.workers)
    };
    timely::Config {
        communication,
        worker: timely::WorkerConfig::default(),
    }
}
