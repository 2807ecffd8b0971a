//! The assistants the OpenAI-compatible API serves as "models": `[[answer.assistants]]`, each a
//! name, a description and the `/v1/answer` request fields it answers with (mode, k, filter,
//! transform, grounding ...), plus the default `freshet` (the `[answer]` defaults), which a
//! configured assistant of that name replaces. Checked at start: a name twice, a name that is
//! not a plain identifier, or options that `/v1/answer` would refuse stop the node.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::Config;

/// The assistant that exists without configuration.
pub const DEFAULT_ASSISTANT: &str = "freshet";

/// Fields an assistant's options may not set: they belong to each conversation.
pub const PER_REQUEST_FIELDS: [&str; 4] = ["query", "history", "stream", "wait_for"];

/// One `[[answer.assistants]]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assistant {
    /// The model id clients name (`"model": "freshet-docs"`).
    pub name: String,
    /// Shown in `GET /v1/models`.
    #[serde(default)]
    pub description: String,
    /// `/v1/answer` request fields: every retrieval option and `grounding`, `max_tokens`,
    /// `temperature` (a chat request's own `max_tokens` and `temperature` win).
    #[serde(default)]
    pub options: Map<String, Value>,
}

impl Assistant {
    /// The default assistant: the `[answer]` defaults, no options.
    pub fn default_one() -> Assistant {
        Assistant {
            name: DEFAULT_ASSISTANT.into(),
            description:
                "Answers from the indexed documents, citing them as [n] ([answer] defaults)".into(),
            options: Map::new(),
        }
    }
}

/// Every assistant the node serves, the configured ones in order, then the default unless one
/// is named like it.
pub fn all(configured: &[Assistant]) -> Vec<Assistant> {
    let mut out = configured.to_vec();
    if !configured.iter().any(|a| a.name == DEFAULT_ASSISTANT) {
        out.push(Assistant::default_one());
    }
    out
}

/// The assistant named `name`.
pub fn find(configured: &[Assistant], name: &str) -> Option<Assistant> {
    all(configured).into_iter().find(|a| a.name == name)
}

/// Whether `name` is a usable model id: 1 to 64 of `A-Z a-z 0-9 . _ : -`.
fn plain(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Checks `[[answer.assistants]]` against the rest of the configuration: each one's options
/// must be a request `/v1/answer` accepts.
pub fn validate(config: &Config) -> Result<()> {
    let list = &config.answer.assistants;
    for (i, a) in list.iter().enumerate() {
        let at = format!("answer.assistants[{i}] ({:?})", a.name);
        if !plain(&a.name) {
            bail!("{at}: name must be 1 to 64 letters, digits, '.', '_', ':' or '-'");
        }
        if list[..i].iter().any(|b| b.name == a.name) {
            bail!("{at}: another assistant has this name");
        }
        if let Some(f) = PER_REQUEST_FIELDS
            .iter()
            .find(|f| a.options.contains_key(**f))
        {
            bail!("{at}: options may not set {f:?}: it belongs to each conversation");
        }
        let mut body = a.options.clone();
        body.insert("query".into(), Value::from("a question"));
        let max_tokens = config
            .llm_settings
            .as_ref()
            .map_or(u32::MAX, |s| s.max_tokens);
        let checked =
            crate::answer::request::parse_value(Value::Object(body), &config.answer, max_tokens)
                .and_then(|(req, _)| {
                    req.plan_with(
                        &config.query,
                        &config.transform,
                        true,
                        config.llm_settings.is_some(),
                    )
                });
        if let Err(e) = checked {
            bail!("{at}: options: {}", e.0);
        }
    }
    Ok(())
}
