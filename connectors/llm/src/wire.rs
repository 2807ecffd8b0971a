//! The OpenAI chat-completions wire shapes the client sends and reads, and the
//! [`Completion`]/[`Usage`]/[`ChatEvent`] it hands back. Unknown fields are ignored (servers
//! add their own); the fields read are the ones every compatible server sends.

use serde::{Deserialize, Serialize};

/// Who said a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Message {
        Message {
            role: Role::System,
            content: content.into(),
        }
    }
    pub fn user(content: impl Into<String>) -> Message {
        Message {
            role: Role::User,
            content: content.into(),
        }
    }
    pub fn assistant(content: impl Into<String>) -> Message {
        Message {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// Per-call choices on top of the settings (`None`: the `[llm]` value).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatOptions {
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    /// Sequences that end the answer.
    pub stop: Vec<String>,
    /// A shorter deadline than `llm.deadline_ms` for this call (a request's own).
    pub deadline: Option<std::time::Duration>,
}

/// Token counts the server reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

/// A whole answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    pub text: String,
    /// `stop`, `length`, … as the server said (`None` if it did not).
    pub finish_reason: Option<String>,
    /// `None` when the server reported no usage.
    pub usage: Option<Usage>,
    /// The model the server says answered.
    pub model: String,
}

/// One event of a streamed answer: text as it arrives, then exactly one `Done`.
#[derive(Clone, Debug, PartialEq)]
pub enum ChatEvent {
    /// The next piece of the answer (never empty).
    Delta(String),
    /// The end: why the model stopped and the usage, when the server sent them.
    Done {
        finish_reason: Option<String>,
        usage: Option<Usage>,
    },
}

/// The request body.
#[derive(Debug, Serialize)]
pub(crate) struct ChatRequest<'a> {
    pub model: &'a str,
    pub messages: &'a [Message],
    pub max_tokens: u32,
    pub temperature: f32,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub stop: &'a [String],
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

#[derive(Debug, Serialize)]
pub(crate) struct StreamOptions {
    pub include_usage: bool,
}

/// `chat.completion`.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatResponse {
    #[serde(default)]
    pub model: String,
    pub choices: Vec<Choice>,
    #[serde(default)]
    pub usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Choice {
    pub message: ResponseMessage,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ResponseMessage {
    /// `null` for an answer made only of tool calls (not asked for here).
    #[serde(default)]
    pub content: Option<String>,
}

/// `chat.completion.chunk`.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatChunk {
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default)]
    pub usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChunkChoice {
    #[serde(default)]
    pub delta: ChunkDelta,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ChunkDelta {
    #[serde(default)]
    pub content: Option<String>,
}

/// `{"error": {"message": …}}`, the error body of OpenAI and most compatible servers.
#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ErrorDetail {
    Object { message: String },
    Text(String),
}

/// The message of an error body, or the start of the body as text (at most 300 characters).
pub(crate) fn error_message(body: &str) -> String {
    let message = match serde_json::from_str::<ErrorBody>(body) {
        Ok(ErrorBody {
            error: ErrorDetail::Object { message } | ErrorDetail::Text(message),
        }) => message,
        Err(_) => body.trim().to_owned(),
    };
    let mut short: String = message.chars().take(300).collect();
    if short.len() < message.len() {
        short.push('…');
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_give_their_message() {
        assert_eq!(
            error_message(r#"{"error":{"message":"model not found","type":"x"}}"#),
            "model not found"
        );
        assert_eq!(error_message(r#"{"error":"busy"}"#), "busy");
        assert_eq!(error_message(" plain text \n"), "plain text");
        assert_eq!(error_message(&"x".repeat(400)).chars().count(), 301);
    }

    #[test]
    fn the_request_is_openais_shape() {
        let messages = [Message::system("s"), Message::user("q")];
        let body = serde_json::to_value(ChatRequest {
            model: "m",
            messages: &messages,
            max_tokens: 5,
            temperature: 0.0,
            stop: &[],
            stream: true,
            stream_options: Some(StreamOptions {
                include_usage: true,
            }),
        })
        .unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "model": "m",
                "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
                "max_tokens": 5, "temperature": 0.0, "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }
}
