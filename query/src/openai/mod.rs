//! The OpenAI-compatible chat API: `GET /v1/models` lists the configured assistants
//! (`assistants.rs`: `[[answer.assistants]]` and the default `freshet`), and
//! `POST /v1/chat/completions` answers a conversation with `/v1/answer`'s retrieval, prompt
//! and citation check (`crate::answer`, reused, not repeated): the messages become the
//! question and its history (`messages.rs`), the answer comes back in OpenAI's shapes, whole or
//! streamed, with the citations in a `freshet` member and as `[n]` in the text (`shapes.rs`).
//! `http.rs` serves it under the node's identities, ACLs and limits; `openapi.rs` documents it;
//! `tests.rs` and `assistants_tests.rs` test it.

pub mod assistants;
pub mod http;
pub mod messages;
pub mod openapi;
pub mod shapes;

#[cfg(test)]
mod assistants_tests;
#[cfg(test)]
mod tests;
