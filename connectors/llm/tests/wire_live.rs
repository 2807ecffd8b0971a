//! The client against a real OpenAI-compatible server implementation, not the stand-in: whole
//! and streamed answers in the server's own shapes. Built only with the `wire` feature, which
//! `deploy/test.sh` turns on (through `freshet-tests/live`) with llama.cpp's server started by
//! `deploy/start-llama.sh`; by hand, start a server, then name it (docs/llm.md, "Wire
//! compatibility"):
//!
//! ```sh
//! FRESHET_LLM_WIRE_URL=http://127.0.0.1:18082/v1 FRESHET_LLM_WIRE_MODEL=tiny \
//!   cargo test -p freshet-llm --features wire --test wire_live
//! ```
//!
//! It fails, never skips, without them.

use freshet_llm::{ChatEvent, ChatOptions, LlmClient, LlmSettings, Message};
use futures::StreamExt;

fn client() -> LlmClient {
    let url = std::env::var("FRESHET_LLM_WIRE_URL")
        .expect("FRESHET_LLM_WIRE_URL: the base URL of the server under test");
    let model = std::env::var("FRESHET_LLM_WIRE_MODEL")
        .expect("FRESHET_LLM_WIRE_MODEL: the model it serves");
    LlmClient::new(LlmSettings::for_base(&url, &model).unwrap()).unwrap()
}

fn options() -> ChatOptions {
    ChatOptions {
        max_tokens: Some(8),
        ..ChatOptions::default()
    }
}

fn messages() -> Vec<Message> {
    vec![
        Message::system("Answer from the passages and cite them as [n]."),
        Message::user("[1] The cat is a cat.\n\nQuestion: what is the cat?"),
    ]
}

#[tokio::test]
async fn a_whole_answer_is_read() {
    let a = client().chat(&messages(), &options()).await.unwrap();
    assert!(
        matches!(a.finish_reason.as_deref(), Some("stop" | "length")),
        "{a:?}"
    );
    let usage = a.usage.expect("the server reports usage");
    assert!(
        usage.prompt_tokens > 0 && usage.completion_tokens <= 8,
        "{usage:?}"
    );
}

#[tokio::test]
async fn a_streamed_answer_ends_with_its_finish() {
    let stream = client().chat_stream(&messages(), &options()).await.unwrap();
    let events: Vec<ChatEvent> = stream.map(Result::unwrap).collect().await;
    let Some(ChatEvent::Done { finish_reason, .. }) = events.last() else {
        panic!("no end: {events:?}")
    };
    assert!(
        matches!(finish_reason.as_deref(), Some("stop" | "length")),
        "{events:?}"
    );
    assert!(events[..events.len() - 1]
        .iter()
        .all(|e| matches!(e, ChatEvent::Delta(t) if !t.is_empty())));
}
