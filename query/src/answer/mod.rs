//! `POST /v1/answer`: retrieve (every `/v1/retrieve` option) → pack within the context budget
//! → a deterministic prompt (`prompt.rs`) → the language model (`[llm]`, whole or streamed)
//! → the answer's citations checked and mapped to their sources (`cite.rs`) → optionally a
//! grounding check of each cited statement (a second call). With no visible passage the node
//! answers the refusal sentence itself, without calling the model. The passages come only from
//! the retrieval's results, which passed the request's filter and principals, so an answer
//! cannot hold text its caller may not see. `http.rs` serves it, `request.rs` parses it,
//! `config.rs` is the `[answer]` section, `openapi.rs` documents it.

pub mod cite;
pub mod config;
pub mod http;
pub mod openapi;
pub mod prompt;
pub mod request;

use std::collections::BTreeMap;
use std::time::Instant;

use freshet_llm::{LlmClient, LlmError, Message, Usage};
use serde::Serialize;

use crate::language::QueryLanguage;
use crate::request::Plan;
use crate::retrieve::{Degraded, Engine, IndexInfo, Response, RetrieveError};

pub use request::AnswerOptions;

/// A passage the prompt numbered, with its source.
#[derive(Clone, Debug, Serialize)]
pub struct Passage {
    /// Its `[n]` in the prompt and the answer.
    pub number: usize,
    pub doc_id: String,
    /// The chunk that matched (a parent's id for a parent); stable: a content hash.
    pub chunk_id: String,
    /// Every chunk of the passage in document order, when context expansion merged several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chunk_ids: Vec<String>,
    pub title: String,
    pub source: String,
    pub section: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_start: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_end: Option<u32>,
    /// Character span of the passage in the cleaned document.
    pub char_start: u32,
    pub char_end: u32,
    /// Its rank in the retrieval and its final score there.
    pub rank: usize,
    pub score: f32,
    pub metadata: serde_json::Value,
    pub text: String,
    /// Whether the answer cites it.
    pub cited: bool,
}

/// One checked statement of a grounding check.
#[derive(Clone, Debug, Serialize)]
pub struct Grounded {
    /// Index into the answer's sentences.
    pub sentence: usize,
    pub text: String,
    pub cites: Vec<usize>,
    /// What the checking call said; `None` when it said nothing of this statement.
    pub supported: Option<bool>,
}

/// The grounding check's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Grounding {
    pub statements: Vec<Grounded>,
    /// Why the check did not run or failed (the answer stands without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An answer.
#[derive(Clone, Debug, Serialize)]
pub struct AnswerResponse {
    pub answer: String,
    /// Whether the answer is the refusal sentence (or begins with it).
    pub refused: bool,
    /// `no_passages` (the node refused without calling the model) or `model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal_reason: Option<&'static str>,
    /// The question the answer answers: the request's, or with `history` the standalone
    /// question it was rewritten into.
    pub question: String,
    /// What the query transformations did (`/v1/retrieve`'s `transform`), when any ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transform: Option<crate::transform::TransformInfo>,
    /// Every passage of the prompt, by number.
    pub passages: Vec<Passage>,
    /// Every valid `[n]` of the answer, in order, with its span and sentence.
    pub citations: Vec<cite::Mark>,
    /// Markers naming a number the prompt has no passage for.
    pub invalid_citations: Vec<cite::Mark>,
    /// The answer's sentences.
    pub sentences: Vec<cite::Sentence>,
    /// Indexes into `sentences` of those without a valid citation.
    pub uncited_sentences: Vec<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grounding: Option<Grounding>,
    /// The model that answered (as the server named it), empty when none was called.
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    pub mode: &'static str,
    /// Milliseconds per stage: the retrieval's, `retrieval` (all of it), `prompt`, `llm`,
    /// `first_token` (streamed), `cite`, `grounding`, and `total`.
    pub timings_ms: BTreeMap<&'static str, f64>,
    /// The index commit the passages were read from.
    pub index: IndexInfo,
    pub language: QueryLanguage,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<Degraded>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<Degraded>,
}

/// A retrieval made ready for the model.
pub struct Prepared {
    pub started: Instant,
    pub question: String,
    pub refusal: String,
    pub passages: Vec<Passage>,
    /// `None`: no passage is visible; the node refuses without calling the model.
    pub messages: Option<Vec<Message>>,
    pub retrieval: Response,
    pub timings_ms: BTreeMap<&'static str, f64>,
}

/// What the model said.
pub struct Said {
    pub text: String,
    pub model: String,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
}

impl Engine {
    /// The configured model, or why there is none (HTTP 503).
    pub fn answer_model(&self) -> Result<&LlmClient, RetrieveError> {
        self.llm.as_ref().ok_or_else(|| {
            RetrieveError::Unavailable(
                "no language model is configured: set [llm] base_url and model (docs/llm.md)"
                    .into(),
            )
        })
    }

    /// Retrieves and packs for `plan` (which packs: see `request.rs`) and builds the prompt.
    pub async fn prepare_answer(&self, plan: Plan) -> Result<Prepared, RetrieveError> {
        let started = Instant::now();
        let asked = plan.query.clone();
        let retrieval = self.retrieve(plan).await?;
        // The question searched for: the standalone one a conversation was rewritten into.
        let question = retrieval
            .transform
            .as_ref()
            .and_then(|t| t.queries.first().cloned())
            .unwrap_or(asked);
        let s = Instant::now();
        let mut timings_ms = retrieval.timings_ms.clone();
        if let Some(total) = timings_ms.remove("total") {
            timings_ms.insert("retrieval", total);
        }
        let refusal = self
            .config
            .answer
            .refusal_for(retrieval.language.language.as_deref())
            .to_owned();
        let passages = passages_of(&retrieval);
        let messages = match (&retrieval.context, passages.is_empty()) {
            (Some(context), false) => Some(prompt::messages(&question, context, &refusal)),
            _ => None,
        };
        timings_ms.insert("prompt", ms(s));
        Ok(Prepared {
            started,
            question,
            refusal,
            passages,
            messages,
            retrieval,
            timings_ms,
        })
    }

    /// The answer from what the model said (`None`: the node refused itself), its citations
    /// checked and, with `grounding`, each cited statement checked by a second call.
    pub async fn finish_answer(
        &self,
        mut p: Prepared,
        said: Option<Said>,
        grounding: bool,
    ) -> AnswerResponse {
        let s = Instant::now();
        let (text, model, finish_reason, usage) = match said {
            Some(x) => (x.text, x.model, x.finish_reason, x.usage),
            None => (p.refusal.clone(), String::new(), None, None),
        };
        let checked = cite::check(&text, p.passages.len(), &p.refusal);
        for pass in &mut p.passages {
            pass.cited = checked.cited.contains(&pass.number);
        }
        let refused = cite::is_refusal(&text, &p.refusal);
        let refusal_reason = match (refused, model.is_empty()) {
            (true, true) => Some("no_passages"),
            (true, false) => Some("model"),
            _ => None,
        };
        p.timings_ms.insert("cite", ms(s));
        let grounding = if grounding && !model.is_empty() && !refused {
            let s = Instant::now();
            let g = self.ground(&checked, &p.passages).await;
            p.timings_ms.insert("grounding", ms(s));
            Some(g)
        } else {
            None
        };
        self.metrics.answer(
            refusal_reason.unwrap_or("answered"),
            checked.citations.len(),
            checked.invalid.len(),
            checked.uncited.len(),
            grounding.as_ref().map_or(0, |g| {
                g.statements
                    .iter()
                    .filter(|s| s.supported == Some(false))
                    .count()
            }),
        );
        p.timings_ms.insert("total", ms(p.started));
        let r = p.retrieval;
        AnswerResponse {
            answer: text,
            refused,
            refusal_reason,
            question: p.question,
            transform: r.transform,
            passages: p.passages,
            citations: checked.citations,
            invalid_citations: checked.invalid,
            sentences: checked.sentences,
            uncited_sentences: checked.uncited,
            grounding,
            model,
            finish_reason,
            usage,
            mode: r.mode,
            timings_ms: p.timings_ms,
            index: r.index,
            language: r.language,
            degraded: r.degraded,
            left_out: r.left_out,
        }
    }

    /// Asks the model whether each cited statement's passages state it.
    async fn ground(&self, checked: &cite::Checked, passages: &[Passage]) -> Grounding {
        let cited: Vec<&cite::Sentence> = checked
            .sentences
            .iter()
            .filter(|s| !s.cites.is_empty())
            .collect();
        let indexes: Vec<usize> = checked
            .sentences
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.cites.is_empty())
            .map(|(i, _)| i)
            .collect();
        let text_of = |n: usize| {
            passages
                .iter()
                .find(|p| p.number == n)
                .map_or("", |p| p.text.as_str())
        };
        let statements: Vec<(String, Vec<(usize, &str)>)> = cited
            .iter()
            .map(|s| {
                (
                    s.text.clone(),
                    s.cites.iter().map(|&n| (n, text_of(n))).collect(),
                )
            })
            .collect();
        let mut out = Grounding {
            statements: cited
                .iter()
                .zip(&indexes)
                .map(|(s, &i)| Grounded {
                    sentence: i,
                    text: s.text.clone(),
                    cites: s.cites.clone(),
                    supported: None,
                })
                .collect(),
            error: None,
        };
        if statements.is_empty() {
            return out;
        }
        let Some(llm) = &self.llm else {
            out.error = Some("no language model is configured".into());
            return out;
        };
        let messages = prompt::grounding_messages(&statements);
        match llm.chat(&messages, &Default::default()).await {
            Ok(c) => {
                for (i, verdict) in parse_verdicts(&c.text) {
                    if let Some(g) = out.statements.get_mut(i) {
                        g.supported = Some(verdict);
                    }
                }
            }
            Err(e) => out.error = Some(e.to_string()),
        }
        out
    }
}

/// `S<n>: SUPPORTED` / `S<n>: UNSUPPORTED` lines → (0-based statement, supported).
pub fn parse_verdicts(text: &str) -> Vec<(usize, bool)> {
    text.lines()
        .filter_map(|line| {
            let l = line.trim().trim_start_matches(['-', '*', ' ']);
            let rest = l.strip_prefix('S').or_else(|| l.strip_prefix('s'))?;
            let (n, verdict) = rest.split_once(':')?;
            let n: usize = n.trim().parse().ok()?;
            let v = verdict.trim().to_ascii_uppercase();
            let supported = if v.starts_with("UNSUPPORTED") {
                false
            } else if v.starts_with("SUPPORTED") {
                true
            } else {
                return None;
            };
            Some((n.checked_sub(1)?, supported))
        })
        .collect()
}

/// The packed passages of a retrieval, by number, with their results' sources.
fn passages_of(r: &Response) -> Vec<Passage> {
    let Some(citations) = &r.citations else {
        return Vec::new();
    };
    citations
        .iter()
        .filter_map(|c| {
            let h = r.results.get(c.result_index)?;
            Some(Passage {
                number: c.number,
                doc_id: h.doc_id.clone(),
                chunk_id: h.chunk_id.clone(),
                chunk_ids: h.passage_chunk_ids.clone(),
                title: h.title.clone(),
                source: h.source.clone(),
                section: h.section.clone(),
                page_start: h.page_start,
                page_end: h.page_end,
                char_start: h.char_start,
                char_end: h.char_end,
                rank: h.rank,
                score: h.score,
                metadata: h.metadata.clone(),
                text: h.text.clone(),
                cited: false,
            })
        })
        .collect()
}

/// How a model failure answers: its class and message (HTTP 503, or a stream's error event).
pub fn llm_failure(e: &LlmError) -> (String, String) {
    (format!("llm_{}", e.class()), e.to_string())
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_read_line_by_line() {
        let v = parse_verdicts(
            "S1: SUPPORTED\n- S2: unsupported (no)\nS3 maybe\ns4:Supported\nS0: SUPPORTED",
        );
        assert_eq!(v, [(0, true), (1, false), (3, true)]);
    }
}
