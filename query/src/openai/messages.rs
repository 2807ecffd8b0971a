//! A `/v1/chat/completions` request read into a `/v1/answer` request. The last message is the
//! question (it must be the user's); earlier user and assistant turns are the conversation
//! (`history`, which the transform module rewrites into a standalone question), the most recent
//! ones that fit `[transform]`'s limits. System and developer messages are ignored: the node's
//! fixed instructions are the only ones the model gets. Content is a string or OpenAI's array
//! of text parts. Parameters the node cannot honour (tools, n > 1, logprobs, audio ...) are 400s
//! naming the parameter; harmless ones (top_p, seed, stop, user ...) are ignored. Pure.

use serde_json::{Map, Value};

use crate::openai::assistants::PER_REQUEST_FIELDS;

/// A request the node refuses: the message, and the parameter at fault (OpenAI's `param`).
#[derive(Clone, Debug, PartialEq)]
pub struct BadParam {
    pub message: String,
    pub param: Option<String>,
}

fn bad(param: &str, message: impl Into<String>) -> BadParam {
    BadParam {
        message: message.into(),
        param: Some(param.into()),
    }
}

/// How much conversation the transform module takes (`[transform]` max_history_*).
#[derive(Clone, Copy, Debug)]
pub struct HistoryLimits {
    pub turns: usize,
    pub chars: usize,
}

/// A chat request, read.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    /// The assistant asked for.
    pub model: String,
    /// The last user message.
    pub question: String,
    /// Earlier turns, oldest first, as `history` takes them.
    pub history: Vec<(&'static str, String)>,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the token counts.
    pub include_usage: bool,
    pub max_tokens: Option<Value>,
    pub temperature: Option<Value>,
    /// The `freshet` extension: further `/v1/answer` fields.
    pub extension: Map<String, Value>,
}

/// Parameters that change what the model returns in ways the node does not produce.
const UNSUPPORTED: [(&str, &str); 8] = [
    (
        "tools",
        "tools are not supported: the assistant answers from the documents",
    ),
    (
        "functions",
        "functions are not supported: the assistant answers from the documents",
    ),
    ("audio", "audio output is not supported"),
    ("prediction", "predicted outputs are not supported"),
    (
        "web_search_options",
        "web search is not supported: the assistant answers from the documents",
    ),
    ("top_logprobs", "logprobs are not supported"),
    (
        "function_call",
        "functions are not supported: the assistant answers from the documents",
    ),
    (
        "tool_choice",
        "tools are not supported: the assistant answers from the documents",
    ),
];

/// Whether `v` leaves a parameter at its default (absent, null, false, an empty list or
/// object, `"none"`/`"auto"` for a choice, 0).
fn unset(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::String(s) => s == "none" || s == "auto",
        Value::Number(n) => n.as_f64() == Some(0.0),
    }
}

/// Reads `body` (a JSON object) as a chat request.
pub fn parse(body: &Value, limits: HistoryLimits) -> Result<ChatRequest, BadParam> {
    let Some(obj) = body.as_object() else {
        return Err(BadParam {
            message: "the request body must be a JSON object".into(),
            param: None,
        });
    };
    let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
    let model = match get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(_) => return Err(bad("model", "model must be a non-empty string")),
        None => return Err(bad("model", "model is required: GET /v1/models lists them")),
    };
    for (param, why) in UNSUPPORTED {
        if obj.get(param).is_some_and(|v| !unset(v)) {
            return Err(bad(param, why));
        }
    }
    match get("n") {
        None => {}
        Some(v) if v.as_u64() == Some(1) => {}
        Some(_) => return Err(bad("n", "n must be 1: the assistant gives one answer")),
    }
    match get("logprobs") {
        None | Some(Value::Bool(false)) => {}
        Some(_) => return Err(bad("logprobs", "logprobs are not supported")),
    }
    match get("response_format") {
        None => {}
        Some(f) if f.get("type").and_then(Value::as_str) == Some("text") => {}
        Some(_) => return Err(bad(
            "response_format",
            "response_format must be {\"type\": \"text\"}: the answer is text with [n] citations",
        )),
    }
    match get("modalities") {
        None => {}
        Some(Value::Array(m)) if m.iter().all(|x| x == "text") => {}
        Some(_) => return Err(bad("modalities", "only the text modality is supported")),
    }
    let stream = match get("stream") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("stream", "stream must be a boolean")),
    };
    let include_usage = match get("stream_options") {
        None => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(bad(
                    "stream_options.include_usage",
                    "stream_options.include_usage must be a boolean",
                ))
            }
        },
        Some(_) => return Err(bad("stream_options", "stream_options must be an object")),
    };
    for p in ["max_tokens", "max_completion_tokens"] {
        if get(p).is_some_and(|v| v.as_u64().is_none_or(|n| n == 0)) {
            return Err(bad(p, format!("{p} must be a positive integer")));
        }
    }
    // max_completion_tokens is the newer name; it wins when both are sent.
    let max_tokens = get("max_completion_tokens")
        .or_else(|| get("max_tokens"))
        .cloned();
    let temperature = get("temperature").cloned();
    let extension = match get("freshet") {
        None => Map::new(),
        Some(Value::Object(o)) => {
            if let Some(f) = PER_REQUEST_FIELDS.iter().find(|f| o.contains_key(**f)) {
                return Err(bad(
                    &format!("freshet.{f}"),
                    format!("freshet.{f} is taken from the messages and stream, not set here"),
                ));
            }
            for f in ["max_tokens", "temperature"] {
                if o.contains_key(f) {
                    return Err(bad(
                        &format!("freshet.{f}"),
                        format!("set {f} as the chat request's own parameter"),
                    ));
                }
            }
            o.clone()
        }
        Some(_) => {
            return Err(bad(
                "freshet",
                "freshet must be an object of /v1/answer fields",
            ))
        }
    };
    let (question, history) = conversation(get("messages"), limits)?;
    Ok(ChatRequest {
        model,
        question,
        history,
        stream,
        include_usage,
        max_tokens,
        temperature,
        extension,
    })
}

/// The question and the turns before it.
#[allow(clippy::type_complexity)]
fn conversation(
    messages: Option<&Value>,
    limits: HistoryLimits,
) -> Result<(String, Vec<(&'static str, String)>), BadParam> {
    let Some(Value::Array(messages)) = messages else {
        return Err(bad("messages", "messages must be an array of messages"));
    };
    let mut turns: Vec<(&'static str, String)> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let Some(m) = m.as_object() else {
            return Err(bad(&at, format!("{at} must be an object")));
        };
        let role = match m.get("role").and_then(Value::as_str) {
            Some(r @ ("system" | "developer")) => {
                // The node's instructions are fixed; a client's are ignored.
                text_of(m.get("content"), &at, r)?;
                continue;
            }
            Some("user") => "user",
            Some("assistant") => {
                if m.get("tool_calls").is_some_and(|v| !unset(v))
                    || m.get("function_call").is_some_and(|v| !unset(v))
                {
                    return Err(bad(
                        &format!("{at}.tool_calls"),
                        "tool calls are not supported: the assistant answers from the documents",
                    ));
                }
                "assistant"
            }
            Some(r @ ("tool" | "function")) => {
                return Err(bad(
                    &format!("{at}.role"),
                    format!("{r} messages are not supported: the assistant has no tools"),
                ))
            }
            Some(r) => {
                return Err(bad(
                    &format!("{at}.role"),
                    format!(
                        "{at}.role must be \"user\", \"assistant\", \"system\" or \"developer\", \
                         got {r:?}"
                    ),
                ))
            }
            None => return Err(bad(&format!("{at}.role"), format!("{at} has no role"))),
        };
        let text = text_of(m.get("content"), &at, role)?;
        turns.push((role, text));
    }
    let Some((role, question)) = turns.pop() else {
        return Err(bad("messages", "messages must hold the user's question"));
    };
    if role != "user" {
        return Err(bad(
            "messages",
            "the last message must be the user's question",
        ));
    }
    if question.trim().is_empty() {
        return Err(bad(
            &format!("messages[{}].content", messages.len() - 1),
            "the question is empty",
        ));
    }
    // Earlier turns without text add nothing; the most recent that fit the limits are kept.
    turns.retain(|(_, t)| !t.trim().is_empty());
    let mut kept = Vec::new();
    let mut chars = 0;
    for (role, text) in turns.into_iter().rev() {
        let n = text.chars().count();
        if kept.len() == limits.turns || chars + n > limits.chars {
            break;
        }
        chars += n;
        kept.push((role, text));
    }
    kept.reverse();
    Ok((question, kept))
}

/// The text of a message's content: a string, or text parts joined by newlines.
fn text_of(content: Option<&Value>, at: &str, role: &str) -> Result<String, BadParam> {
    let param = format!("{at}.content");
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                let kind = p.get("type").and_then(Value::as_str);
                match (kind, p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => texts.push(t.as_str()),
                    (Some("text"), _) => {
                        return Err(bad(
                            &format!("{param}[{j}].text"),
                            "a text part needs its text as a string",
                        ))
                    }
                    (Some(other), _) => {
                        return Err(bad(
                            &format!("{param}[{j}].type"),
                            format!("only text content is supported, got a {other:?} part"),
                        ))
                    }
                    (None, _) => {
                        return Err(bad(
                            &format!("{param}[{j}]"),
                            "a content part needs a type (\"text\")",
                        ))
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        // An assistant turn may have no content (it called tools; refused above).
        None | Some(Value::Null) if role == "assistant" => Ok(String::new()),
        _ => Err(bad(
            &param,
            format!("{param} must be a string or an array of text parts"),
        )),
    }
}

/// The `/v1/answer` body of `chat` for an assistant with `options`: its options, the client's
/// `freshet` fields (which may not change what the assistant sets), the question, the
/// conversation and the sampling parameters.
pub fn answer_body(chat: &ChatRequest, options: &Map<String, Value>) -> Result<Value, BadParam> {
    let mut body = options.clone();
    for (k, v) in &chat.extension {
        if options.contains_key(k) {
            return Err(bad(
                &format!("freshet.{k}"),
                format!(
                    "the assistant {:?} sets {k}; pick another assistant",
                    chat.model
                ),
            ));
        }
        body.insert(k.clone(), v.clone());
    }
    body.insert("query".into(), Value::from(chat.question.clone()));
    if !chat.history.is_empty() {
        let turns = chat
            .history
            .iter()
            .map(|(role, content)| serde_json::json!({"role": role, "content": content}))
            .collect();
        body.insert("history".into(), Value::Array(turns));
    }
    if let Some(m) = &chat.max_tokens {
        body.insert("max_tokens".into(), m.clone());
    }
    if let Some(t) = &chat.temperature {
        body.insert("temperature".into(), t.clone());
    }
    Ok(Value::Object(body))
}

/// The OpenAI parameter a `/v1/answer` parse error is about, when it names one.
pub fn param_of(message: &str) -> Option<String> {
    ["max_tokens", "temperature"]
        .into_iter()
        .find(|p| message.starts_with(p))
        .map(str::to_owned)
}
