//! `GET /v1/status`: the pipeline's state for the console in one JSON object: the phase of
//! `/readyz`, lag per partition, freshness over the last minutes, the dead letters by class with
//! the newest, and the health of Kafka, Milvus and the model (docs/monitoring.md, "Status
//! endpoint"). The numbers come from [`crate::status::Board`]; the dead letters are read from
//! their topic off the async threads, at most every [`FRESH_FOR`], each read taking up only
//! what was written since the one before.
//!
//! Dead letters hold documents' keys and error messages: with `[metrics] status_keys` the
//! route needs one of them; without, it answers only on a loopback `listen` (403 beyond).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use freshet_config::Secret;
use freshet_kafka::KafkaConfig;
use freshet_service::auth::credential::credential;
use freshet_service::auth::keys;
use freshet_service::error::ApiError;
use serde_json::{json, Value};

use super::Shared;
use crate::status::dead_letters::{DeadLetters, Tally};
use crate::status::Board;

/// How long a read of the dead-letter topic is shown before the next request reads again.
pub const FRESH_FOR: Duration = Duration::from_secs(3);
/// How long a request waits for that read before it answers with the one before.
pub const READ_WAIT: Duration = Duration::from_secs(4);

/// What `/v1/status` is built from.
pub struct StatusSource {
    pub board: Board,
    /// Where the dead letters are (`dlq_topic` on `brokers`).
    pub kafka: KafkaConfig,
    /// `[metrics] status_keys`, read, each with its name.
    pub keys: Vec<(String, Secret)>,
}

/// Who may call `/v1/status`.
#[derive(Debug)]
enum Access {
    /// No keys, on a loopback address: anyone who can reach it.
    Loopback,
    /// One of these keys (their digests).
    Keys(Vec<[u8; 32]>),
    /// No keys beyond loopback: no one.
    Closed(SocketAddr),
}

pub(super) struct Status {
    board: Board,
    access: Access,
    dead_letters: Arc<DeadLetterReads>,
}

impl Status {
    pub(super) fn new(source: StatusSource, addr: SocketAddr) -> Status {
        let access = if !source.keys.is_empty() {
            Access::Keys(
                source
                    .keys
                    .iter()
                    .map(|(_, s)| keys::digest(s.expose()))
                    .collect(),
            )
        } else if addr.ip().is_loopback() {
            Access::Loopback
        } else {
            Access::Closed(addr)
        };
        Status {
            board: source.board,
            access,
            dead_letters: Arc::new(DeadLetterReads {
                kafka: source.kafka,
                tally: Mutex::new(Tally::default()),
                last: Mutex::new(None),
                reading: Arc::new(tokio::sync::Mutex::new(())),
            }),
        }
    }

    pub(super) fn log_access(&self) {
        match &self.access {
            Access::Loopback => {
                tracing::info!(
                    "/v1/status needs no key (loopback only; metrics.status_keys is empty)"
                )
            }
            Access::Keys(k) => tracing::info!(keys = k.len(), "/v1/status needs a status key"),
            Access::Closed(addr) => tracing::warn!(
                %addr,
                "/v1/status answers 403: it shows dead letters and this endpoint listens beyond \
                 loopback; set metrics.status_keys"
            ),
        }
    }

    fn admit(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        match &self.access {
            Access::Loopback => Ok(()),
            Access::Closed(addr) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "/v1/status shows dead letters (document keys and error messages) and this \
                     endpoint listens on {addr}, beyond loopback: set [metrics] status_keys \
                     (or FRESHET_METRICS_STATUS_KEYS) and call it with Authorization: Bearer \
                     <key>, or listen on 127.0.0.1"
                ),
            )),
            Access::Keys(digests) => {
                let given = credential(headers).map_err(unauthorized)?;
                keys::find(digests, |d| d, given)
                    .map(|_| ())
                    .ok_or_else(|| unauthorized("invalid status key".into()))
            }
        }
    }
}

fn unauthorized(message: String) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

/// The dead-letter topic read for `/v1/status`: one read at a time, its answer kept.
struct DeadLetterReads {
    kafka: KafkaConfig,
    tally: Mutex<Tally>,
    last: Mutex<Option<LastRead>>,
    /// Held by the read under way.
    reading: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Clone)]
struct LastRead {
    at: Instant,
    at_ms: i64,
    view: DeadLetters,
    error: Option<String>,
}

impl DeadLetterReads {
    /// The dead letters: the last read when it is fresh, else a new one (waited for up to
    /// [`READ_WAIT`]; a read still under way then goes on, and the answer is the read before,
    /// with `error` saying so).
    async fn get(self: &Arc<Self>) -> Value {
        let fresh = |l: &Option<LastRead>| l.as_ref().is_some_and(|l| l.at.elapsed() < FRESH_FOR);
        if self.last.lock().map(|l| fresh(&l)).unwrap_or(false) {
            return self.answer(None);
        }
        let done = match self.reading.clone().try_lock_owned() {
            Ok(guard) => {
                let me = self.clone();
                let read = tokio::task::spawn_blocking(move || {
                    let _reading = guard;
                    me.read();
                });
                tokio::time::timeout(READ_WAIT, read).await.is_ok()
            }
            // Another request's read is under way: its answer is this one's too.
            Err(_) => tokio::time::timeout(READ_WAIT, self.reading.lock())
                .await
                .is_ok(),
        };
        if done {
            self.answer(None)
        } else {
            self.answer(Some(format!(
                "reading the dead-letter topic takes over {} s; these are from the read before",
                READ_WAIT.as_secs()
            )))
        }
    }

    /// Reads what was written since the last read (blocking).
    fn read(&self) {
        let Ok(mut tally) = self.tally.lock() else {
            return;
        };
        let error = tally.read_more(&self.kafka).err().map(|e| format!("{e:#}"));
        if let Some(e) = &error {
            tracing::warn!(error = %e, "reading the dead-letter topic for /v1/status");
        }
        let read = LastRead {
            at: Instant::now(),
            at_ms: freshet_operators::clock::now_ms() as i64,
            view: tally.view(),
            error,
        };
        if let Ok(mut last) = self.last.lock() {
            *last = Some(read);
        }
    }

    fn answer(&self, late: Option<String>) -> Value {
        let last = self.last.lock().ok().and_then(|l| l.clone());
        let (mut body, as_of, error) = match last {
            Some(l) => (
                serde_json::to_value(&l.view).unwrap_or_else(|_| json!({})),
                Some(l.at_ms),
                late.or(l.error),
            ),
            None => (
                serde_json::to_value(DeadLetters::default()).unwrap_or_else(|_| json!({})),
                None,
                Some(late.unwrap_or_else(|| "the dead-letter topic has not been read yet".into())),
            ),
        };
        body["topic"] = json!(self.kafka.dlq_topic);
        body["as_of_ms"] = json!(as_of);
        body["error"] = json!(error);
        body
    }
}

/// `GET /v1/status`.
pub(super) async fn answer(State(s): State<Shared>, headers: HeaderMap) -> Response {
    let Some(status) = &s.status else {
        return (StatusCode::NOT_FOUND, "not found\n").into_response();
    };
    if let Err(e) = status.admit(&headers) {
        let bearer = e.status == StatusCode::UNAUTHORIZED;
        let mut r = e.into_response();
        if bearer {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        return r;
    }
    let dead_letters = status.dead_letters.get().await;
    let phase = s.ready.phase();
    let now = freshet_operators::clock::now_ms() as i64;
    let board = status.board.view(now, phase.preflight_done);
    let body = json!({
        "generated_at_ms": now,
        "phase": phase.name,
        "phase_detail": phase.detail,
        "notes": phase.notes,
        "partitions": board.partitions,
        "freshness": board.freshness,
        "dead_letters": dead_letters,
        "health": board.health,
    });
    (
        [(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        )],
        Json(body),
    )
        .into_response()
}
