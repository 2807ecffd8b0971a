//! The client against the stand-in over real HTTP: whole and streamed answers, retries on 429
//! (`Retry-After` in seconds and as a date) and 5xx, errors that come back as data (timeouts,
//! malformed answers, refusals, an unreachable server), keys, and the concurrency limit.

use std::time::{Duration, Instant};

use freshet_llm::standin::{StandIn, StandinOptions, REFUSAL};
use freshet_llm::{
    ChatEvent, ChatOptions, LlmClient, LlmConfig, LlmError, LlmMetrics, LlmSettings, Message,
};
use freshet_metrics::Registrar;
use futures::StreamExt;

const PROMPT: &str = "Answer from the numbered passages; cite them as [n].\n\n\
                      [1] Freshet indexes documents as they change. It streams.\n\
                      [2] Retrieval is hybrid: BM25 and vectors.\n\n\
                      Question: how does freshet index and do retrieval?";
const ANSWER: &str =
    "Freshet indexes documents as they change [1]. Retrieval is hybrid: BM25 and vectors [2].";

fn settings(base: &str, model: &str, tweak: impl FnOnce(&mut LlmConfig)) -> LlmSettings {
    let mut c = LlmConfig {
        base_url: base.into(),
        model: model.into(),
        backoff_initial_ms: 10,
        backoff_max_ms: 50,
        ..LlmConfig::default()
    };
    tweak(&mut c);
    c.settings(&|_| None).unwrap().unwrap()
}

fn client(s: &StandIn, model: &str, tweak: impl FnOnce(&mut LlmConfig)) -> (LlmClient, Metrics) {
    let mut r = Registrar::new("test");
    let m = LlmMetrics::register(&mut r);
    let c = LlmClient::new(settings(&s.base_url(), model, tweak))
        .unwrap()
        .with_metrics(m);
    (c, Metrics(r.finish()))
}

struct Metrics(std::sync::Arc<prometheus_client::registry::Registry>);

impl Metrics {
    /// The value of the sample line starting with `series ` (0 when absent).
    fn get(&self, series: &str) -> f64 {
        let text = freshet_metrics::encode(&self.0);
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("freshet_test_{series} ")))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }
}

fn messages() -> Vec<Message> {
    vec![
        Message::system("You answer from passages."),
        Message::user(PROMPT),
    ]
}

async fn collect(stream: freshet_llm::ChatStream) -> Vec<Result<ChatEvent, LlmError>> {
    stream.collect().await
}

/// A stream of the conversation that ends with its `Done`.
async fn assert_stream_completes(c: &LlmClient) {
    let events = collect(
        c.chat_stream(&messages(), &ChatOptions::default())
            .await
            .unwrap(),
    )
    .await;
    assert!(
        matches!(events.last(), Some(Ok(ChatEvent::Done { .. }))),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_whole_answer_cites_the_passages_and_reports_usage() {
    let s = StandIn::start().await.unwrap();
    let (c, m) = client(&s, "standin", |_| {});
    let a = c.chat(&messages(), &ChatOptions::default()).await.unwrap();
    assert_eq!(a.text, ANSWER);
    assert_eq!(a.finish_reason.as_deref(), Some("stop"));
    assert_eq!(a.model, "standin");
    let usage = a.usage.unwrap();
    assert!(
        usage.prompt_tokens > 20 && usage.completion_tokens == 14,
        "{usage:?}"
    );
    // What the client sent: OpenAI's request with the settings' defaults.
    let sent = &s.requests()[0];
    assert_eq!(sent["model"], "standin");
    assert_eq!(sent["max_tokens"], 1024);
    assert_eq!(sent["temperature"], 0.0);
    assert_eq!(sent["stream"], false);
    assert_eq!(sent["messages"][1]["role"], "user");
    assert_eq!(m.get(r#"llm_requests_total{outcome="ok"}"#), 1.0);
    assert_eq!(m.get("llm_completion_tokens_total"), 14.0);
    // No passages: the refusal. A short max_tokens: cut, `length`.
    let none = c
        .chat(
            &[Message::user("What is the capital?")],
            &ChatOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(none.text, REFUSAL);
    let short = ChatOptions {
        max_tokens: Some(3),
        ..ChatOptions::default()
    };
    let cut = c.chat(&messages(), &short).await.unwrap();
    assert_eq!(cut.text, "Freshet indexes documents");
    assert_eq!(cut.finish_reason.as_deref(), Some("length"));
}

#[tokio::test]
async fn a_streamed_answer_is_the_whole_answer_then_its_end() {
    let s = StandIn::start().await.unwrap();
    let (c, m) = client(&s, "standin", |_| {});
    let events = collect(
        c.chat_stream(&messages(), &ChatOptions::default())
            .await
            .unwrap(),
    )
    .await;
    let events: Vec<ChatEvent> = events.into_iter().map(Result::unwrap).collect();
    let (last, deltas) = events.split_last().unwrap();
    assert!(deltas.len() > 5, "one piece per word: {deltas:?}");
    let text: String = deltas
        .iter()
        .map(|e| match e {
            ChatEvent::Delta(t) => t.as_str(),
            other => panic!("{other:?} before the end"),
        })
        .collect();
    assert_eq!(text, ANSWER);
    let ChatEvent::Done {
        finish_reason,
        usage,
    } = last
    else {
        panic!("{last:?}")
    };
    assert_eq!(finish_reason.as_deref(), Some("stop"));
    assert_eq!(usage.unwrap().completion_tokens, 14);
    let sent = &s.requests()[0];
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"]["include_usage"], true);
    assert_eq!(m.get(r#"llm_requests_total{outcome="ok"}"#), 1.0);
    assert_eq!(m.get("llm_first_token_seconds_count"), 1.0);
}

#[tokio::test]
async fn a_429_is_retried_after_what_retry_after_says() {
    let s = StandIn::start().await.unwrap();
    // Back-off alone would wait at most 50 ms: the second attempt comes after the server's 1 s.
    let (c, m) = client(&s, "standin-429-then-ok", |_| {});
    let started = Instant::now();
    let a = c.chat(&messages(), &ChatOptions::default()).await.unwrap();
    assert_eq!(a.text, ANSWER);
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(s.requests().len(), 2);
    assert_eq!(m.get(r#"llm_retries_total{reason="rate_limited"}"#), 1.0);
    // An HTTP date, streamed.
    let (c, _) = client(&s, "standin-429-date-then-ok", |_| {});
    assert_stream_completes(&c).await;
    // A wait past the deadline is not waited: the error, with what the server asked.
    let (c, m) = client(&s, "standin-429-long", |_| {});
    let started = Instant::now();
    let e = c
        .chat(&messages(), &ChatOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        e,
        LlmError::RateLimited {
            attempts: 1,
            retry_after: Some(Duration::from_secs(3600))
        }
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(m.get(r#"llm_requests_total{outcome="rate_limited"}"#), 1.0);
}

#[tokio::test]
async fn server_errors_are_retried_then_returned() {
    let s = StandIn::start().await.unwrap();
    let (c, m) = client(&s, "standin-500", |c| c.retries = 2);
    let e = c
        .chat(&messages(), &ChatOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, LlmError::Server { status: 500, attempts: 3, message } if message.contains("stand-in answers 500")),
        "{e:?}"
    );
    assert_eq!(s.requests().len(), 3);
    assert_eq!(m.get(r#"llm_retries_total{reason="server_error"}"#), 2.0);
    assert_eq!(m.get(r#"llm_requests_total{outcome="server_error"}"#), 1.0);
    let (c, _) = client(&s, "standin-503-then-ok", |_| {});
    assert_eq!(
        c.chat(&messages(), &ChatOptions::default())
            .await
            .unwrap()
            .text,
        ANSWER
    );
    // Streams are retried the same way until they begin.
    let (c, _) = client(&s, "standin-502-then-ok", |_| {});
    assert_stream_completes(&c).await;
}

#[tokio::test]
async fn an_unreachable_server_is_retried_then_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut r = Registrar::new("test");
    let m = LlmMetrics::register(&mut r);
    let c = LlmClient::new(settings(&format!("http://127.0.0.1:{port}/v1"), "m", |c| {
        c.retries = 1
    }))
    .unwrap()
    .with_metrics(m);
    let e = c
        .chat(&messages(), &ChatOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, LlmError::Unavailable { attempts: 2, .. }),
        "{e:?}"
    );
    assert_eq!(e.class(), "unavailable");
    let m = Metrics(r.finish());
    assert_eq!(m.get(r#"llm_retries_total{reason="unavailable"}"#), 1.0);
}

#[tokio::test]
async fn a_slow_answer_times_out_without_a_retry() {
    let s = StandIn::start().await.unwrap();
    let (c, m) = client(&s, "standin-slow-5s", |c| c.timeout_ms = 300);
    let started = Instant::now();
    let e = c
        .chat(&messages(), &ChatOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, LlmError::Timeout { .. }), "{e:?}");
    assert!(e.to_string().contains("llm.timeout_ms"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(s.requests().len(), 1);
    assert_eq!(m.get(r#"llm_requests_total{outcome="timeout"}"#), 1.0);
    // A call's own deadline, shorter than the setting.
    let (c, _) = client(&s, "standin-slow-5s", |_| {});
    let short = ChatOptions {
        deadline: Some(Duration::from_millis(200)),
        ..ChatOptions::default()
    };
    let e = c.chat(&messages(), &short).await.unwrap_err();
    assert!(e.to_string().contains("llm.deadline_ms"), "{e}");
    // A stream that goes silent after two pieces.
    let (c, m) = client(&s, "standin-stall-after-2", |c| {
        c.stream_idle_timeout_ms = 300
    });
    let events = collect(
        c.chat_stream(&messages(), &ChatOptions::default())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(matches!(events[1], Ok(ChatEvent::Delta(_))));
    assert!(
        matches!(&events[2], Err(e @ LlmError::Timeout { .. }) if e.to_string().contains("stream_idle_timeout_ms")),
        "{events:?}"
    );
    assert_eq!(m.get(r#"llm_requests_total{outcome="timeout"}"#), 1.0);
}

#[tokio::test]
async fn malformed_answers_are_errors() {
    let s = StandIn::start().await.unwrap();
    let (c, m) = client(&s, "standin-malformed", |_| {});
    let e = c
        .chat(&messages(), &ChatOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, LlmError::BadResponse(_)), "{e:?}");
    assert_eq!(m.get(r#"llm_requests_total{outcome="bad_response"}"#), 1.0);
    assert_eq!(s.requests().len(), 1, "a malformed answer is not retried");
    let events = collect(
        c.chat_stream(&messages(), &ChatOptions::default())
            .await
            .unwrap(),
    )
    .await;
    assert!(matches!(events[0], Ok(ChatEvent::Delta(_))), "{events:?}");
    assert!(
        matches!(events.last(), Some(Err(LlmError::BadResponse(m))) if m.contains("not JSON")),
        "{events:?}"
    );
    let (c, _) = client(&s, "standin-truncated", |_| {});
    let events = collect(
        c.chat_stream(&messages(), &ChatOptions::default())
            .await
            .unwrap(),
    )
    .await;
    assert!(
        matches!(events.last(), Some(Err(LlmError::BadResponse(m))) if m.contains("[DONE]")),
        "{events:?}"
    );
    let (c, _) = client(&s, "standin-cut", |_| {});
    let events = collect(
        c.chat_stream(&messages(), &ChatOptions::default())
            .await
            .unwrap(),
    )
    .await;
    assert!(matches!(events[0], Ok(ChatEvent::Delta(_))), "{events:?}");
    assert!(
        matches!(events.last(), Some(Err(LlmError::BadResponse(m))) if m.contains("cut off")),
        "{events:?}"
    );
}

#[tokio::test]
async fn refusals_and_keys() {
    let s = StandIn::start_with(StandinOptions {
        api_key: Some("sk-test".into()),
    })
    .await
    .unwrap();
    let (c, _) = client(&s, "standin", |_| {});
    let e = c
        .chat(&messages(), &ChatOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(&e, LlmError::Refused { status: 401, .. }), "{e:?}");
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "sk-test\n").unwrap();
    let (c, m) = client(&s, "standin", |c| c.api_key_file = key.clone());
    assert_eq!(
        c.chat(&messages(), &ChatOptions::default())
            .await
            .unwrap()
            .text,
        ANSWER
    );
    assert_eq!(m.get(r#"llm_requests_total{outcome="ok"}"#), 1.0);
    // An unknown model: refused once, with the server's message.
    let (c, _) = client(&s, "gpt-nonexistent", |c| c.api_key_file = key.clone());
    let e = c
        .chat(&messages(), &ChatOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, LlmError::Refused { status: 404, message } if message.contains("does not exist")),
        "{e:?}"
    );
    let e = c
        .chat_stream(&messages(), &ChatOptions::default())
        .await
        .err()
        .unwrap();
    assert_eq!(e.class(), "refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_concurrency_limit_is_honoured() {
    let s = StandIn::start().await.unwrap();
    let (c, _) = client(&s, "standin-slow-200ms", |c| c.max_concurrent = 2);
    let calls = (0..6).map(|_| {
        let c = c.clone();
        tokio::spawn(async move { c.chat(&messages(), &ChatOptions::default()).await })
    });
    for call in futures::future::join_all(calls).await {
        assert_eq!(call.unwrap().unwrap().text, ANSWER);
    }
    assert_eq!(s.peak_in_flight(), 2);
    // A stream holds its slot until it is read or dropped.
    let (c, m) = client(&s, "standin-stall-after-1", |c| {
        c.max_concurrent = 1;
        c.deadline_ms = 500;
    });
    let held = c
        .chat_stream(&messages(), &ChatOptions::default())
        .await
        .unwrap();
    let e = c
        .chat_stream(&messages(), &ChatOptions::default())
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("llm.max_concurrent"), "{e}");
    drop(held);
    assert_eq!(m.get(r#"llm_requests_total{outcome="cancelled"}"#), 1.0);
    let again = c.chat_stream(&messages(), &ChatOptions::default()).await;
    assert!(again.is_ok(), "the dropped stream's slot is free");
}
