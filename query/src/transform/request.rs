//! The transformation fields of a `/v1/retrieve` request, `transform` and `history`, checked
//! into a [`TransformPlan`] with the `[transform]` defaults filling what the request leaves
//! out. Pure; a mistake, or a transformation asked of a node without `[llm]`, is a 400 that
//! says what is wrong.

use freshet_llm::Role;
use serde::Deserialize;

use super::config::{HydeMode, TransformConfig};
use super::prompts::Turn;
use crate::request::{BadRequest, Mode};

/// `"transform": {"multi_query": 3, "hyde": "auto"}`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformRequest {
    pub multi_query: Option<usize>,
    pub hyde: Option<HydeMode>,
}

/// One previous turn: `{"role": "user" | "assistant", "content": "..."}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryTurn {
    pub role: String,
    pub content: String,
}

/// The transformations a retrieval runs, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct TransformPlan {
    /// Rewrites to search beside the question (0: none).
    pub multi_query: usize,
    pub hyde: HydeMode,
    /// The previous turns, oldest first (empty: the question stands alone).
    pub history: Vec<Turn>,
}

impl crate::request::RetrieveRequest {
    /// The plan of the whole request, its transformation included (`[transform]` defaults
    /// filling what it leaves out); `llm` whether the node has a language model.
    pub fn plan_with(
        mut self,
        cfg: &crate::config::QueryConfig,
        transform: &TransformConfig,
        reranker_available: bool,
        llm: bool,
    ) -> Result<crate::request::Plan, BadRequest> {
        let (t, history) = (self.transform.take(), self.history.take());
        let mut plan = self.plan(cfg, reranker_available)?;
        plan.transform = self::plan(t, history, plan.mode, transform, llm)?;
        Ok(plan)
    }
}

macro_rules! bad {
    ($($t:tt)*) => { return Err(BadRequest(format!($($t)*))) };
}

/// The plan of a request's `transform` and `history` (`None` when nothing is to be done), for
/// `mode`; `llm` whether the node has a language model.
pub fn plan(
    transform: Option<TransformRequest>,
    history: Option<Vec<HistoryTurn>>,
    mode: Mode,
    cfg: &TransformConfig,
    llm: bool,
) -> Result<Option<TransformPlan>, BadRequest> {
    let t = transform.unwrap_or_default();
    let multi_query = t.multi_query.unwrap_or(cfg.multi_query);
    if multi_query > cfg.max_multi_query {
        bad!(
            "transform.multi_query must be between 0 and {}, got {multi_query}",
            cfg.max_multi_query
        );
    }
    let mut hyde = t.hyde.unwrap_or(cfg.hyde);
    if !mode.uses_vector() {
        if t.hyde == Some(HydeMode::On) {
            bad!(
                "transform.hyde = \"on\" needs the vector route; mode \"{}\" runs none",
                mode.as_str()
            );
        }
        hyde = HydeMode::Off;
    }
    let history = history.unwrap_or_default();
    if history.len() > cfg.max_history_turns {
        bad!(
            "history has {} turns; the limit is {} (transform.max_history_turns)",
            history.len(),
            cfg.max_history_turns
        );
    }
    let mut chars = 0;
    let mut turns = Vec::with_capacity(history.len());
    for (i, h) in history.into_iter().enumerate() {
        let role = match h.role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => bad!("history[{i}].role must be \"user\" or \"assistant\", got {other:?}"),
        };
        if h.content.trim().is_empty() {
            bad!("history[{i}].content must not be empty");
        }
        chars += h.content.chars().count();
        turns.push(Turn {
            role,
            content: h.content,
        });
    }
    if chars > cfg.max_history_chars {
        bad!(
            "history has {chars} characters; the limit is {} (transform.max_history_chars)",
            cfg.max_history_chars
        );
    }
    if multi_query == 0 && hyde == HydeMode::Off && turns.is_empty() {
        return Ok(None);
    }
    if !llm {
        bad!(
            "this request asks for a query transformation (multi_query, hyde or history) and \
             this node has no language model ([llm] is not set); leave them out or ask the \
             operator to configure one"
        );
    }
    Ok(Some(TransformPlan {
        multi_query,
        hyde,
        history: turns,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(v: serde_json::Value, mode: Mode, llm: bool) -> Result<Option<TransformPlan>, String> {
        let t = v
            .get("transform")
            .map(|t| serde_json::from_value(t.clone()));
        let t = match t {
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(t)) => Some(t),
            None => None,
        };
        let h = match v.get("history").map(|h| serde_json::from_value(h.clone())) {
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(h)) => Some(h),
            None => None,
        };
        plan(t, h, mode, &TransformConfig::default(), llm).map_err(|e| e.0)
    }

    #[test]
    fn nothing_asked_is_nothing_to_do() {
        assert_eq!(run(json!({}), Mode::Hybrid, false), Ok(None));
        assert_eq!(
            run(
                json!({"transform": {"multi_query": 0, "hyde": "off"}, "history": []}),
                Mode::Hybrid,
                false
            ),
            Ok(None)
        );
    }

    #[test]
    fn requests_are_checked() {
        let p = run(
            json!({"transform": {"multi_query": 3, "hyde": "auto"},
                   "history": [{"role": "user", "content": "Who found it?"},
                               {"role": "assistant", "content": "Kessler."}]}),
            Mode::Hybrid,
            true,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (p.multi_query, p.hyde, p.history.len()),
            (3, HydeMode::Auto, 2)
        );
        let e = |v| run(v, Mode::Hybrid, true).unwrap_err();
        assert!(e(json!({"transform": {"multi_query": 6}})).contains("between 0 and 5"));
        assert!(e(json!({"transform": {"hyde": "maybe"}})).contains("unknown variant"));
        assert!(e(json!({"transform": {"n": 1}})).contains("unknown field"));
        assert!(
            e(json!({"history": [{"role": "system", "content": "x"}]})).contains("history[0].role")
        );
        assert!(e(json!({"history": [{"role": "user", "content": " "}]})).contains("empty"));
        assert!(e(json!({"history": [{"role": "user"}]})).contains("content"));
        let many: Vec<_> = (0..21)
            .map(|_| json!({"role": "user", "content": "x"}))
            .collect();
        assert!(e(json!({ "history": many })).contains("max_history_turns"));
        let long = "x".repeat(16_001);
        assert!(e(json!({"history": [{"role": "user", "content": long}]})).contains("characters"));
    }

    #[test]
    fn without_a_language_model_a_transformation_is_a_400() {
        for v in [
            json!({"transform": {"multi_query": 2}}),
            json!({"transform": {"hyde": "auto"}}),
            json!({"history": [{"role": "user", "content": "Who?"}]}),
        ] {
            let e = run(v.clone(), Mode::Hybrid, false).unwrap_err();
            assert!(e.contains("[llm]"), "{v}: {e}");
        }
    }

    #[test]
    fn hyde_needs_the_vector_route() {
        let e = run(json!({"transform": {"hyde": "on"}}), Mode::Bm25, true).unwrap_err();
        assert!(e.contains("vector route"), "{e}");
        // auto in bm25 mode: nothing to do
        assert_eq!(
            run(json!({"transform": {"hyde": "auto"}}), Mode::Bm25, true),
            Ok(None)
        );
    }
}
