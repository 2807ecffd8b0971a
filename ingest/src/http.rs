//! The HTTP API: routes, authentication (a middleware that runs before any body is read) and
//! the write rules, the body limit, and every answer (see `openapi.rs`). A produce route answers
//! only once the broker has acknowledged the record(s), with where they were written; a request
//! the broker does not acknowledge in time is a 503.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Extension;
use axum::{Json, Router};
use freshet_service::body;
use freshet_service::routes::{self, healthz, with_fallbacks};
use serde_json::{json, Value};

use crate::auth::rules::Write;
use crate::auth::{IngestAuth, Writer};
use crate::config::Config;
use crate::decode::{self, Checked, FileOptions};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::produce::{self, Publisher};
use freshet_kafka::{DocumentRecord, Op, Placed};

/// What the handlers share.
pub struct App {
    pub config: Config,
    pub publisher: Arc<dyn Publisher>,
    pub metrics: Metrics,
    pub auth: IngestAuth,
}

impl App {
    /// The service; secrets named by `_env` settings are read from the process environment.
    pub fn new(config: Config, publisher: Arc<dyn Publisher>) -> anyhow::Result<Arc<App>> {
        Self::with_env(config, publisher, &|v| std::env::var(v).ok())
    }

    /// The service, reading `_env` secrets with `env`.
    pub fn with_env(
        config: Config,
        publisher: Arc<dyn Publisher>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Arc<App>> {
        Self::with_metrics(config, publisher, Metrics::new(), env)
    }

    /// The service exporting `metrics` (the registry the publisher's own metrics are in).
    pub fn with_metrics(
        config: Config,
        publisher: Arc<dyn Publisher>,
        metrics: Metrics,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Arc<App>> {
        let auth = IngestAuth::new(&config.ingest, metrics.clone(), env)?;
        Ok(Arc::new(App {
            config,
            publisher,
            metrics,
            auth,
        }))
    }

    /// How long a produce call may take: the producer's timeout plus a margin for its report.
    fn produce_deadline(&self) -> Duration {
        Duration::from_millis(self.config.ingest.produce_timeout_ms) + Duration::from_secs(5)
    }
}

/// The router of the ingest service.
pub fn router(app: Arc<App>) -> Router {
    let limit = app.config.ingest.max_body_bytes;
    let writes = Router::new()
        .route(
            "/v1/documents/{id}",
            put(put_document).delete(delete_document),
        )
        .route("/v1/documents:batch", post(batch))
        .route_layer(middleware::from_fn_with_state(app.clone(), authenticate));
    with_fallbacks(
        Router::new()
            .merge(writes)
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .route("/openapi.json", get(openapi)),
    )
    .layer(DefaultBodyLimit::max(limit))
    .layer(middleware::from_fn_with_state(app.clone(), track))
    .with_state(app)
}

/// The route a path belongs to, as its metrics label.
fn route_label(path: &str) -> &'static str {
    match path {
        "/v1/documents:batch" => "/v1/documents:batch",
        "/healthz" => "/healthz",
        "/readyz" => "/readyz",
        "/metrics" => "/metrics",
        "/openapi.json" => "/openapi.json",
        p if p
            .strip_prefix("/v1/documents/")
            .is_some_and(|id| !id.is_empty() && !id.contains('/')) =>
        {
            "/v1/documents/{id}"
        }
        _ => "other",
    }
}

/// Counts every answer by route and status, with its latency.
async fn track(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let route = route_label(req.uri().path());
    let start = Instant::now();
    let resp = next.run(req).await;
    app.metrics
        .request(route, resp.status().as_u16(), start.elapsed().as_secs_f64());
    resp
}

/// Identifies the writer from the headers alone, before the handler reads the body: a refused
/// request is answered at once, whatever body it sends or holds back. The writer's
/// concurrency slot is held until the answer is made.
async fn authenticate(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    match app.auth.admit(req.headers()) {
        Ok((writer, permit)) => {
            req.extensions_mut().insert(writer);
            let resp = next.run(req).await;
            drop(permit);
            resp
        }
        Err(e) => e.into_response(),
    }
}

/// The write of a record, for the write rules.
fn write_of(r: &Checked) -> Write<'_> {
    match r.record.op {
        Op::Upsert => Write::Upsert {
            id: &r.record.id,
            acl: &r.acl,
        },
        Op::Delete => Write::Delete { id: &r.record.id },
    }
}

/// The base media type of the `Content-Type` header, lower case; empty when absent.
fn media_type(headers: &HeaderMap) -> Result<String, ApiError> {
    match headers.get(header::CONTENT_TYPE) {
        None => Ok(String::new()),
        Some(v) => v
            .to_str()
            .map(|s| s.trim().to_owned())
            .map_err(|_| ApiError::bad_request("the Content-Type header is not ASCII")),
    }
}

fn base_type(media: &str) -> String {
    media
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn document_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|p| p.0)
        .map_err(|e| ApiError::bad_request(format!("bad document id in the path: {e}")))
}

/// Produces `records`, counting them, or a 503.
async fn produce(app: &App, records: Vec<DocumentRecord>) -> Result<Vec<Placed>, ApiError> {
    let ops: Vec<&'static str> = records.iter().map(|r| r.op.as_str()).collect();
    match produce::send_all(app.publisher.clone(), records, app.produce_deadline()).await {
        Ok(placed) => {
            for op in ops {
                app.metrics.documents(op, 1);
            }
            Ok(placed)
        }
        Err(e) => {
            app.metrics.produce_error();
            tracing::warn!(error = %e.0, "produce failed");
            Err(e.into())
        }
    }
}

/// Produces one record and answers where it went.
async fn produce_one(app: &App, record: DocumentRecord) -> Result<Response, ApiError> {
    let (id, op) = (record.id.clone(), record.op);
    let placed = produce(app, vec![record]).await?;
    let p = placed
        .first()
        .ok_or_else(|| ApiError::from(produce::ProduceError("no acknowledgement".into())))?;
    Ok(Json(json!({
        "id": id,
        "op": op.as_str(),
        "topic": app.publisher.topic(),
        "partition": p.partition,
        "offset": p.offset,
    }))
    .into_response())
}

/// `PUT /v1/documents/{id}`: a JSON envelope, or a file with its media type.
async fn put_document(
    State(app): State<Arc<App>>,
    Extension(writer): Extension<Writer>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let id = document_id(path)?;
        let params = query
            .map(|q| q.0)
            .map_err(|e| ApiError::bad_request(format!("bad query string: {e}")))?;
        let body = body::extracted(body, app.config.ingest.max_body_bytes)?;
        let media = media_type(&headers)?;
        let limits = &app.config.limits;
        let record = if base_type(&media) == "application/json" {
            if !params.is_empty() {
                return Err(ApiError::bad_request(
                    "query parameters describe a file upload; a JSON envelope carries its own fields",
                ));
            }
            decode::envelope(&id, &body, limits)?
        } else {
            let options = FileOptions::from_query(&params)?;
            decode::file(&id, &media, &body, options, limits)?
        };
        app.auth.check(&writer, &[(None, write_of(&record))])?;
        produce_one(&app, record.record).await
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// `DELETE /v1/documents/{id}`: a tombstone.
async fn delete_document(
    State(app): State<Arc<App>>,
    Extension(writer): Extension<Writer>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let result = async {
        let id = document_id(path)?;
        let record = decode::delete(&id, &app.config.limits)?;
        app.auth.check(&writer, &[(None, write_of(&record))])?;
        produce_one(&app, record.record).await
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// Media types a batch may be sent as (or none).
const BATCH_TYPES: [&str; 4] = [
    "application/x-ndjson",
    "application/jsonl",
    "application/x-jsonlines",
    "application/json",
];

/// `POST /v1/documents:batch`: NDJSON envelopes, all checked, then all produced.
async fn batch(
    State(app): State<Arc<App>>,
    Extension(writer): Extension<Writer>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let body = body::extracted(body, app.config.ingest.max_body_bytes)?;
        let media = base_type(&media_type(&headers)?);
        if !media.is_empty() && !BATCH_TYPES.contains(&media.as_str()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!(
                    "a batch is NDJSON (one envelope per line): send it as {}",
                    BATCH_TYPES.join(", ")
                ),
            ));
        }
        let lines = decode::batch(&body, &app.config.limits, app.config.ingest.max_batch_documents)?;
        let writes: Vec<(Option<usize>, Write<'_>)> =
            lines.iter().map(|(n, r)| (Some(*n), write_of(r))).collect();
        app.auth.check(&writer, &writes)?;
        let (numbers, records): (Vec<usize>, Vec<DocumentRecord>) =
            lines.into_iter().map(|(n, c)| (n, c.record)).unzip();
        let described: Vec<(String, &'static str)> =
            records.iter().map(|r| (r.id.clone(), r.op.as_str())).collect();
        let placed = produce(&app, records).await?;
        let results: Vec<Value> = numbers
            .iter()
            .zip(described)
            .zip(&placed)
            .map(|((line, (id, op)), p)| {
                json!({"line": line, "id": id, "op": op, "partition": p.partition, "offset": p.offset})
            })
            .collect();
        Ok(Json(json!({
            "topic": app.publisher.topic(),
            "documents": results.len(),
            "results": results,
        }))
        .into_response())
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// Ready when the broker answers and knows the topic, and tokens can be verified (the JWKS URL
/// fetched). Says how writers are identified, and what an operator must know about it.
async fn readyz(State(app): State<Arc<App>>) -> Response {
    let deadline =
        Duration::from_millis(app.config.ingest.ready_timeout_ms) + Duration::from_secs(1);
    let topic = app.publisher.topic().to_owned();
    let broker = produce::ready(app.publisher.clone(), deadline).await;
    let jwks = app.auth.ready();
    let ready = broker.is_ok() && jwks.is_ok();
    let body = Json(json!({
        "ready": ready,
        "broker": broker.err().unwrap_or_else(|| "ok".into()),
        "topic": topic,
        "jwks": jwks.err().unwrap_or_else(|| "ok".into()),
        "auth": app.auth.mode(),
        "auth_warnings": app.auth.warnings(),
    }));
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body).into_response()
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    routes::metrics(app.metrics.registry())
}

async fn openapi() -> Response {
    Json(crate::openapi::document()).into_response()
}

#[cfg(test)]
mod tests;
