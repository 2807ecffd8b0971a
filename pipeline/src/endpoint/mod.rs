//! The pipeline's HTTP endpoint (`[metrics] listen`, served with `freshet-service`'s listener
//! and `/metrics` answer): `GET /metrics` (Prometheus text,
//! `pipeline/METRICS.md`), `GET /healthz` (the process is up), `GET /readyz` (200 once the
//! Milvus collection is loaded and every worker of the process reads its partitions; 503 with
//! what it is waiting for, for instance while Milvus loads a large collection after a restart)
//! and, for `freshet run`, `GET /v1/status` (the console's view: [`status`]).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use freshet_service::{listen, routes};
use prometheus_client::registry::Registry;

pub mod status;
#[cfg(test)]
mod tests;

pub use status::StatusSource;

/// Where the pipeline is on its way to reading records.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Preflight, with what it is doing.
    Starting(String),
    /// Workers are starting: how many of how many read their partitions.
    Workers {
        reading: usize,
        of: usize,
    },
    Running,
    /// Running, but the sink cannot write (see `sink::stall`): why.
    Stalled(String),
    Stopping,
    Failed(String),
}

#[derive(Debug)]
struct Current {
    phase: Phase,
    since: Instant,
    /// What an operator should know although the pipeline runs (`/readyz` `notes`), by topic.
    notes: std::collections::BTreeMap<&'static str, String>,
    /// Whether preflight is over (the workers were started).
    preflight_done: bool,
}

/// Where the pipeline is, as `/v1/status` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseView {
    /// `starting`, `workers`, `running`, `stalled`, `stopping` or `failed`.
    pub name: &'static str,
    /// What `/readyz` says it waits for; how long it has run when running.
    pub detail: String,
    pub notes: std::collections::BTreeMap<&'static str, String>,
    pub preflight_done: bool,
}

/// The pipeline's readiness, shared by the run and the endpoint; cheap to clone.
#[derive(Clone, Debug)]
pub struct Readiness(Arc<Mutex<Current>>);

impl Default for Readiness {
    fn default() -> Self {
        Readiness::new()
    }
}

impl Readiness {
    pub fn new() -> Self {
        Readiness(Arc::new(Mutex::new(Current {
            phase: Phase::Starting("starting".into()),
            since: Instant::now(),
            notes: Default::default(),
            preflight_done: false,
        })))
    }

    fn set(&self, phase: Phase) {
        if let Ok(mut s) = self.0.lock() {
            if s.phase != phase {
                s.phase = phase;
                s.since = Instant::now();
            }
        }
    }

    /// A preflight step (`"loading the Milvus collection docs"`); logged too.
    pub fn step(&self, what: impl Into<String>) {
        let what = what.into();
        tracing::info!("{what}");
        self.set(Phase::Starting(what));
    }

    /// `workers` workers of this process are about to open their readers.
    pub fn workers_starting(&self, workers: usize) {
        if let Ok(mut s) = self.0.lock() {
            s.preflight_done = true;
        }
        self.set(Phase::Workers {
            reading: 0,
            of: workers,
        });
    }

    /// One more worker reads its partitions (or has none); the last one makes the pipeline
    /// ready.
    pub fn worker_reading(&self) {
        let Ok(mut s) = self.0.lock() else { return };
        if let Phase::Workers { reading, of } = s.phase {
            s.phase = if reading + 1 >= of {
                Phase::Running
            } else {
                Phase::Workers {
                    reading: reading + 1,
                    of,
                }
            };
            s.since = Instant::now();
        }
    }

    /// Ready (a process without workers: the folder sync after its start scan).
    pub fn running(&self) {
        self.set(Phase::Running);
    }

    /// The sink cannot write and waits: `why` until [`Readiness::resumed`].
    /// Since when counts from the first failure of the stall.
    pub fn stalled(&self, why: impl Into<String>) {
        let Ok(mut s) = self.0.lock() else { return };
        match s.phase {
            Phase::Stalled(_) => s.phase = Phase::Stalled(why.into()),
            Phase::Running => {
                s.phase = Phase::Stalled(why.into());
                s.since = Instant::now();
            }
            _ => {}
        }
    }

    /// The sink writes again (ready again, unless the pipeline is stopping).
    pub fn resumed(&self) {
        let Ok(mut s) = self.0.lock() else { return };
        if matches!(s.phase, Phase::Stalled(_)) {
            s.phase = Phase::Running;
            s.since = Instant::now();
        }
    }

    pub fn stopping(&self) {
        self.set(Phase::Stopping);
    }

    pub fn failed(&self, why: impl Into<String>) {
        self.set(Phase::Failed(why.into()));
    }

    /// Sets (or, with `None`, clears) the note on `topic` that `/readyz` shows, ready or not
    /// (e.g. much of the corpus outside the embedding model's languages: `crate::census`).
    pub fn note(&self, topic: &'static str, note: Option<String>) {
        if let Ok(mut s) = self.0.lock() {
            match note {
                Some(n) => s.notes.insert(topic, n),
                None => s.notes.remove(topic),
            };
        }
    }

    /// The notes, by topic.
    pub fn notes(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|s| s.notes.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The phase, with what `/readyz` says of it.
    pub fn phase(&self) -> PhaseView {
        let detail = self.check().err();
        let Ok(s) = self.0.lock() else {
            return PhaseView {
                name: "failed",
                detail: "readiness state poisoned".into(),
                notes: Default::default(),
                preflight_done: false,
            };
        };
        let name = match s.phase {
            Phase::Starting(_) => "starting",
            Phase::Workers { .. } => "workers",
            Phase::Running => "running",
            Phase::Stalled(_) => "stalled",
            Phase::Stopping => "stopping",
            Phase::Failed(_) => "failed",
        };
        PhaseView {
            name,
            detail: detail
                .unwrap_or_else(|| format!("running for {} s", s.since.elapsed().as_secs())),
            notes: s.notes.clone(),
            preflight_done: s.preflight_done,
        }
    }

    /// `Ok` when ready, else what the pipeline is waiting for (and for how long).
    pub fn check(&self) -> std::result::Result<(), String> {
        let Ok(s) = self.0.lock() else {
            return Err("readiness state poisoned".into());
        };
        let secs = s.since.elapsed().as_secs();
        match &s.phase {
            Phase::Running => Ok(()),
            Phase::Starting(what) => Err(format!("{what} ({secs} s)")),
            Phase::Workers { reading, of } => Err(format!(
                "{reading} of {of} workers read their partitions ({secs} s)"
            )),
            Phase::Stalled(why) => Err(format!("stalled for {secs} s: {why}")),
            Phase::Stopping => Err("stopping".into()),
            Phase::Failed(why) => Err(format!("failed: {why}")),
        }
    }
}

#[derive(Clone)]
struct Shared {
    registry: Arc<Registry>,
    ready: Readiness,
    status: Option<Arc<status::Status>>,
}

/// Serves the endpoint on `listen` from a thread of its own (the metrics of `registry`, and
/// `/v1/status` when `status` is given); returns the bound address.
pub fn serve(
    listen: &str,
    registry: Arc<Registry>,
    ready: Readiness,
    status: Option<StatusSource>,
) -> Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(listen)
        .with_context(|| format!("cannot listen for metrics on {listen}"))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let status = status.map(|s| Arc::new(status::Status::new(s, addr)));
    if let Some(s) = &status {
        s.log_access();
    }
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/v1/status", get(status::answer))
        .with_state(Shared {
            registry,
            ready,
            status,
        });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("freshet-endpoint".into())
        .spawn(move || {
            runtime.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    // Until the process ends: the pipeline drains on SIGTERM itself, and
                    // its readiness says `stopping` meanwhile.
                    Ok(l) => {
                        let forever = std::future::pending();
                        if let Err(e) = listen::serve(l, app, None, forever).await {
                            tracing::error!(error = %e, "the metrics endpoint stopped");
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "the metrics endpoint cannot start"),
                }
            })
        })?;
    Ok(addr)
}

async fn metrics_text(State(s): State<Shared>) -> Response {
    routes::metrics(&s.registry)
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    let (status, mut body) = match s.ready.check() {
        Ok(()) => (StatusCode::OK, json!({"ready": true})),
        Err(waiting_for) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"ready": false, "waiting_for": waiting_for}),
        ),
    };
    let notes = s.ready.notes();
    if !notes.is_empty() {
        body["notes"] = json!(notes);
    }
    (status, Json(body))
}
