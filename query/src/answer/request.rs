//! The `/v1/answer` request: a `/v1/retrieve` body (every retrieval option, the question in
//! `query`) plus the answer's own fields, split apart here. `k` and `pack` default to
//! `[answer]`'s. Pure.

use serde::Deserialize;
use serde_json::Value;

use crate::answer::config::AnswerConfig;
use crate::request::{BadRequest, PackRequest, RetrieveRequest};
use crate::wait::{WaitParams, MAX_WAIT_MS};

/// The fields that are the answer's, not retrieval's.
pub const ANSWER_FIELDS: [&str; 5] = [
    "stream",
    "max_tokens",
    "temperature",
    "grounding",
    "wait_for",
];

/// Most offsets a request may wait for.
const MAX_WAITS: usize = 64;

/// The answer's own fields, as sent.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerFields {
    stream: Option<bool>,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
    grounding: Option<bool>,
    wait_for: Option<Vec<WaitParams>>,
}

/// The answer's choices, checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AnswerOptions {
    /// Server-sent events instead of one JSON answer.
    pub stream: bool,
    /// `None`: `[llm] max_tokens`.
    pub max_tokens: Option<u32>,
    /// `None`: `[llm] temperature`.
    pub temperature: Option<f32>,
    /// Check each cited statement with a second call to the model.
    pub grounding: bool,
    /// Offsets that must be searchable before the retrieval (read-your-writes).
    pub wait_for: Vec<WaitParams>,
}

/// Splits a body into its retrieval request and the answer's options.
pub fn parse(
    body: &[u8],
    cfg: &AnswerConfig,
    llm_max_tokens: u32,
) -> Result<(RetrieveRequest, AnswerOptions), BadRequest> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| BadRequest(format!("invalid request body: {e}")))?;
    parse_value(v, cfg, llm_max_tokens)
}

/// [`parse`] of a body already read as JSON (the chat route builds one).
pub fn parse_value(
    mut v: Value,
    cfg: &AnswerConfig,
    llm_max_tokens: u32,
) -> Result<(RetrieveRequest, AnswerOptions), BadRequest> {
    let Some(obj) = v.as_object_mut() else {
        return Err(BadRequest("the request body must be a JSON object".into()));
    };
    let mut own = serde_json::Map::new();
    for f in ANSWER_FIELDS {
        if let Some(x) = obj.remove(f) {
            own.insert(f.to_owned(), x);
        }
    }
    let fields: AnswerFields = serde_json::from_value(Value::Object(own))
        .map_err(|e| BadRequest(format!("invalid request body: {e}")))?;
    let mut req: RetrieveRequest = serde_json::from_value(v).map_err(|e| {
        BadRequest(format!(
            "invalid request body: {e} (or one of the answer's fields: {})",
            ANSWER_FIELDS.join(", ")
        ))
    })?;
    req.k = req.k.or(Some(cfg.k));
    if req.pack.is_none() {
        req.pack = Some(PackRequest {
            budget_tokens: cfg.context_tokens,
            order: Some(cfg.pack_order),
        });
    }
    if let Some(n) = fields.max_tokens {
        if n == 0 || n > llm_max_tokens {
            return Err(BadRequest(format!(
                "max_tokens must be between 1 and {llm_max_tokens} ([llm] max_tokens), got {n}"
            )));
        }
    }
    if let Some(t) = fields.temperature {
        if !(t.is_finite() && (0.0..=2.0).contains(&t)) {
            return Err(BadRequest(format!(
                "temperature must be between 0 and 2, got {t}"
            )));
        }
    }
    let wait_for = fields.wait_for.unwrap_or_default();
    if wait_for.len() > MAX_WAITS {
        return Err(BadRequest(format!(
            "wait_for may name at most {MAX_WAITS} offsets, got {}",
            wait_for.len()
        )));
    }
    for w in &wait_for {
        if w.topic.is_empty() || w.partition < 0 || w.offset < 0 {
            return Err(BadRequest(
                "wait_for: each entry needs a topic and a partition and offset ≥ 0".into(),
            ));
        }
        if w.timeout_ms.is_some_and(|ms| ms > MAX_WAIT_MS) {
            return Err(BadRequest(format!(
                "wait_for: timeout_ms must be at most {MAX_WAIT_MS}"
            )));
        }
    }
    Ok((
        req,
        AnswerOptions {
            stream: fields.stream.unwrap_or(false),
            max_tokens: fields.max_tokens,
            temperature: fields.temperature,
            grounding: fields.grounding.unwrap_or(cfg.grounding),
            wait_for,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(body: &str) -> Result<(RetrieveRequest, AnswerOptions), BadRequest> {
        parse(body.as_bytes(), &AnswerConfig::default(), 1024)
    }

    #[test]
    fn retrieval_options_pass_through_and_defaults_come_from_answer() {
        let (r, o) = p(r#"{"query":"q","mode":"bm25","stream":true,"grounding":true}"#).unwrap();
        assert_eq!(r.query, "q");
        assert_eq!(r.mode.as_deref(), Some("bm25"));
        assert_eq!(r.k, Some(8));
        let pack = r.pack.unwrap();
        assert_eq!(pack.budget_tokens, 3000);
        assert!(o.stream && o.grounding);
        let (r, o) = p(r#"{"query":"q","k":3,"pack":{"budget_tokens":100}}"#).unwrap();
        assert_eq!((r.k, r.pack.unwrap().budget_tokens), (Some(3), 100));
        assert_eq!(o, AnswerOptions::default());
        let (_, o) = p(r#"{"query":"q","max_tokens":64,"temperature":0.5,
                "wait_for":[{"topic":"docs","partition":0,"offset":41}]}"#)
        .unwrap();
        assert_eq!((o.max_tokens, o.temperature), (Some(64), Some(0.5)));
        assert_eq!(o.wait_for[0].offset, 41);
    }

    #[test]
    fn mistakes_are_400s_that_say_what() {
        for (body, needle) in [
            ("[]", "JSON object"),
            (r#"{"query":"q","stream":"yes"}"#, "invalid type"),
            (r#"{"query":"q","colour":1}"#, "unknown field `colour`"),
            (r#"{"query":"q","max_tokens":0}"#, "max_tokens"),
            (r#"{"query":"q","max_tokens":5000}"#, "[llm] max_tokens"),
            (r#"{"query":"q","temperature":-1}"#, "temperature"),
            (
                r#"{"query":"q","wait_for":[{"topic":"","partition":0,"offset":1}]}"#,
                "wait_for",
            ),
            (
                r#"{"query":"q","wait_for":[{"topic":"t","partition":0,"offset":1,"timeout_ms":999999}]}"#,
                "timeout_ms",
            ),
        ] {
            let e = p(body).unwrap_err().0;
            assert!(e.contains(needle), "{body}: {e}");
        }
    }
}
