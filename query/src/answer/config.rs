//! The `[answer]` section: how `POST /v1/answer` retrieves, packs and refuses when the request
//! does not say, and the assistants the OpenAI-compatible chat API serves. Checked at start
//! against `[query]`'s limits.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::config::QueryConfig;
use crate::pack::PackOrder;

/// The refusal sentences the node ships, by language (ISO 639-1). English is `refusal`'s default.
pub const DEFAULT_REFUSALS: &[(&str, &str)] = &[
    ("ja", "資料には答えが含まれていません。"),
    ("ko", "제공된 자료에는 답이 없습니다."),
    ("zh", "所提供的资料中没有答案。"),
];

/// The `[answer]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnswerConfig {
    /// Passages retrieved for an answer when the request names no `k`.
    pub k: usize,
    /// The context budget when the request names no `pack` (tokens of the embedding model's
    /// tokenizer, an estimate of the language model's).
    pub context_tokens: usize,
    /// The order of the packed passages when the request names no `pack`.
    pub pack_order: PackOrder,
    /// The sentence the model must answer, word for word, when the passages do not hold the
    /// answer; also the node's own answer when no passage is visible. Used for questions in a
    /// language `refusals` does not name.
    pub refusal: String,
    /// The refusal sentence by the question's language (`zh = "…"`); merged over the shipped
    /// Chinese, Japanese and Korean ones.
    pub refusals: BTreeMap<String, String>,
    /// Check each cited statement against its passages with a second call to the model, when
    /// the request does not say.
    pub grounding: bool,
    /// The assistants of the OpenAI-compatible chat API (`[[answer.assistants]]`), beside the
    /// default `freshet`: `crate::openai::assistants`.
    pub assistants: Vec<crate::openai::assistants::Assistant>,
}

impl Default for AnswerConfig {
    fn default() -> Self {
        AnswerConfig {
            k: 8,
            context_tokens: 3000,
            pack_order: PackOrder::RelevanceFirst,
            refusal: "The passages do not contain the answer.".into(),
            refusals: BTreeMap::new(),
            grounding: false,
            assistants: Vec::new(),
        }
    }
}

impl AnswerConfig {
    pub fn validate(&self, q: &QueryConfig) -> Result<()> {
        if self.k == 0 || self.k > q.max_k {
            bail!("answer.k must be between 1 and query.max_k ({})", q.max_k);
        }
        if self.context_tokens == 0 || self.context_tokens > q.max_pack_tokens {
            bail!(
                "answer.context_tokens must be between 1 and query.max_pack_tokens ({})",
                q.max_pack_tokens
            );
        }
        if self.refusal.trim().is_empty() {
            bail!(
                "answer.refusal must not be empty: it is what the model says when it cannot answer"
            );
        }
        for (lang, sentence) in &self.refusals {
            if sentence.trim().is_empty() {
                bail!("answer.refusals.{lang} must not be empty");
            }
            match freshet_embedding::language::normalise(lang) {
                None => bail!("answer.refusals: {lang:?} is not an ISO 639 language code"),
                Some(n) if n != *lang => {
                    bail!("answer.refusals: write {lang:?} as {n:?} (the code detection names)")
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The refusal sentence for a question in `language` (normalised ISO 639 code).
    pub fn refusal_for(&self, language: Option<&str>) -> &str {
        let Some(lang) = language else {
            return &self.refusal;
        };
        if let Some(s) = self.refusals.get(lang) {
            return s;
        }
        DEFAULT_REFUSALS
            .iter()
            .find(|(l, _)| *l == lang)
            .map_or(self.refusal.as_str(), |(_, s)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_follows_the_question_language_and_the_settings() {
        let mut c = AnswerConfig::default();
        assert_eq!(c.refusal_for(None), c.refusal);
        assert_eq!(c.refusal_for(Some("de")), c.refusal);
        assert_eq!(c.refusal_for(Some("zh")), "所提供的资料中没有答案。");
        c.refusals.insert("zh".into(), "没有答案。".into());
        c.refusals
            .insert("de".into(), "Die Antwort steht nicht darin.".into());
        assert_eq!(c.refusal_for(Some("zh")), "没有答案。");
        assert_eq!(c.refusal_for(Some("de")), "Die Antwort steht nicht darin.");
        assert_eq!(
            c.refusal_for(Some("ja")),
            "資料には答えが含まれていません。"
        );
    }

    #[test]
    fn mistakes_stop_the_node() {
        let q = QueryConfig::default();
        assert!(AnswerConfig::default().validate(&q).is_ok());
        for (c, needle) in [
            (
                AnswerConfig {
                    k: 0,
                    ..Default::default()
                },
                "answer.k",
            ),
            (
                AnswerConfig {
                    context_tokens: q.max_pack_tokens + 1,
                    ..Default::default()
                },
                "answer.context_tokens",
            ),
            (
                AnswerConfig {
                    refusal: " ".into(),
                    ..Default::default()
                },
                "answer.refusal",
            ),
            (
                AnswerConfig {
                    refusals: [("klingon-ish".to_string(), "x".to_string())].into(),
                    ..Default::default()
                },
                "ISO 639",
            ),
        ] {
            let e = c.validate(&q).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }
}
