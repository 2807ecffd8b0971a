//! The pipeline's part of the node's status: its `GET /v1/status` (consumer lag, freshness,
//! dead letters, health of Kafka, Milvus and the model), fetched from `[query] pipeline_url`
//! with `pipeline_status_key`, within `pipeline_timeout_ms`. Every way it can fail is an answer
//! of its own (`state`), never an error of the node's status.

use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::auth::settings::{resolve_secret, Secret};
use crate::config::QueryConfig;

/// Largest pipeline status read (bytes); a larger answer is reported as `error`.
pub const MAX_STATUS_BYTES: usize = 4 * 1024 * 1024;

/// The pipeline's part, as `GET /v1/status` reports it under `pipeline`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PipelinePart {
    /// `not_configured` (no `pipeline_url`), `ok`, `unreachable` (no answer in time),
    /// `unauthorized` (the pipeline refused the key: 401/403), `error` (another status, or not
    /// the status JSON).
    pub state: &'static str,
    /// The URL asked (empty when not configured).
    pub url: String,
    /// What went wrong, or what to set.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// The pipeline's `/v1/status` as it answered (`state` `ok` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

/// The client of the pipeline's status, when `pipeline_url` is set.
pub struct PipelineClient {
    url: String,
    key: Option<Secret>,
    http: reqwest::Client,
}

impl PipelineClient {
    /// `None` without `pipeline_url`; reads the key (inline, file or variable) now, so a
    /// missing file stops the node at start.
    pub fn new(
        c: &QueryConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<PipelineClient>> {
        if c.pipeline_url.is_empty() {
            return Ok(None);
        }
        let key = resolve_secret(
            "query.pipeline_status_key",
            &c.pipeline_status_key,
            &c.pipeline_status_key_file,
            &c.pipeline_status_key_env,
            env,
        )?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(c.pipeline_timeout_ms))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .context("building the HTTP client of query.pipeline_url")?;
        Ok(Some(PipelineClient {
            url: format!("{}/v1/status", c.pipeline_url.trim_end_matches('/')),
            key,
            http,
        }))
    }

    /// Asks the pipeline once.
    pub async fn fetch(&self) -> PipelinePart {
        let part = |state, detail: String, status| PipelinePart {
            state,
            url: self.url.clone(),
            detail,
            status,
        };
        let mut req = self.http.get(&self.url);
        if let Some(k) = &self.key {
            req = req.bearer_auth(k.expose());
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return part("unreachable", describe(&e), None),
        };
        let code = resp.status();
        if code == reqwest::StatusCode::UNAUTHORIZED || code == reqwest::StatusCode::FORBIDDEN {
            let what = if self.key.is_some() {
                "the pipeline refused query.pipeline_status_key"
            } else {
                "the pipeline's /v1/status needs a key: set query.pipeline_status_key to one of \
                 its [metrics] status keys"
            };
            return part("unauthorized", format!("HTTP {code}: {what}"), None);
        }
        if !code.is_success() {
            return part("error", format!("HTTP {code} from the pipeline"), None);
        }
        let body = match read_limited(resp).await {
            Ok(b) => b,
            Err(e) => return part("error", e, None),
        };
        match serde_json::from_slice::<Value>(&body) {
            Ok(v) if v.is_object() => part("ok", String::new(), Some(v)),
            Ok(_) => part(
                "error",
                "the pipeline's status is not a JSON object".into(),
                None,
            ),
            Err(e) => part(
                "error",
                format!("the pipeline's status is not JSON: {e}"),
                None,
            ),
        }
    }
}

/// The pipeline's part when no `pipeline_url` is set.
pub fn not_configured() -> PipelinePart {
    PipelinePart {
        state: "not_configured",
        url: String::new(),
        detail: "set [query] pipeline_url to the pipeline's [metrics] listen URL".into(),
        status: None,
    }
}

/// The body, refused past [`MAX_STATUS_BYTES`].
async fn read_limited(mut resp: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => {
                if body.len() + c.len() > MAX_STATUS_BYTES {
                    return Err(format!(
                        "the pipeline's status is larger than {MAX_STATUS_BYTES} bytes"
                    ));
                }
                body.extend_from_slice(&c);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(describe(&e)),
        }
    }
}

/// A transport failure in a line: timed out, refused, or reqwest's own words.
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "no answer within query.pipeline_timeout_ms".into()
    } else if e.is_connect() {
        format!("cannot connect: {e}")
    } else {
        e.to_string()
    }
}
