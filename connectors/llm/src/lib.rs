//! `freshet-llm`: OpenAI-compatible model servers: a chat model (`/v1/chat/completions`: llama.cpp's server,
//! Ollama, vLLM, LiteLLM, hosted APIs) as one of freshet's outside systems.
//!
//! - [`LlmConfig`], the `[llm]` section, checked into [`LlmSettings`] at start (a URL that does
//!   not parse, a key that cannot be read, zero slots: an error that says what to do).
//! - [`LlmClient`]: [`chat`](LlmClient::chat) (a whole [`Completion`]) and
//!   [`chat_stream`](LlmClient::chat_stream) ([`ChatEvent`]s), within `max_concurrent` slots
//!   and a deadline, retried with back-off and jitter on 429, 5xx and connection failures,
//!   honouring `Retry-After`; failures are [`LlmError`]s, never panics.
//! - [`EmbeddingsClient`] ([`embeddings`]): vectors from an OpenAI-compatible `/embeddings`
//!   server (`[embedding] provider = "openai"`), batched, within `max_concurrent` slots,
//!   retried like chat calls.
//! - [`LlmMetrics`], [`EmbeddingsMetrics`] (`METRICS.md`).
//! - [`task`]: the markers freshet's own prompts carry on their first line.
//! - [`overlap`]: word overlap, the lexical check of a statement against its passages.
//! - `standin` (feature `standin`): a deterministic OpenAI-compatible server for tests, with
//!   faults chosen by the model name (docs/testing.md).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use freshet_llm::{ChatOptions, LlmClient, LlmSettings, Message};
//! let client = LlmClient::new(LlmSettings::for_base("http://127.0.0.1:8081/v1", "qwen2.5")?)?;
//! let answer = client
//!     .chat(&[Message::user("Say hello.")], &ChatOptions::default())
//!     .await?;
//! println!("{} ({:?})", answer.text, answer.usage);
//! # Ok(()) }
//! ```

mod client;
mod config;
pub mod embeddings;
mod error;
mod metrics;
pub mod overlap;
pub mod retry;
#[cfg(feature = "standin")]
pub mod standin;
mod stream;
pub mod task;
mod wire;

pub use client::{ChatStream, LlmClient};
pub use config::{LlmConfig, LlmSettings};
pub use embeddings::{EmbeddingsClient, EmbeddingsConfig, EmbeddingsMetrics, EmbeddingsSettings};
pub use error::{LlmError, Result};
pub use metrics::LlmMetrics;
pub use wire::{ChatEvent, ChatOptions, Completion, Message, Role, Usage};
