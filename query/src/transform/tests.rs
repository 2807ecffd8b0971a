//! The transformer against the in-process stand-in language model: what each step asks and
//! makes of the answer, the cache, and the fall back to the question on every kind of failure.

use std::time::{Duration, Instant};

use freshet_llm::standin::StandIn;
use freshet_llm::{LlmClient, LlmSettings};

use super::config::{HydeMode, TransformConfig};
use super::prompts::Turn;
use super::request::TransformPlan;
use super::{Transformed, Transformer};
use crate::metrics::Metrics;

fn client(standin: &StandIn, model: &str) -> LlmClient {
    let mut s = LlmSettings::for_base(&standin.base_url(), model).unwrap();
    s.retries = 1;
    s.backoff_initial = Duration::from_millis(10);
    s.backoff_max = Duration::from_millis(10);
    LlmClient::new(s).unwrap()
}

fn plan(multi_query: usize, hyde: HydeMode, history: &[(&str, &str)]) -> TransformPlan {
    TransformPlan {
        multi_query,
        hyde,
        history: history
            .iter()
            .map(|(role, content)| Turn {
                role: if *role == "user" {
                    freshet_llm::Role::User
                } else {
                    freshet_llm::Role::Assistant
                },
                content: content.to_string(),
            })
            .collect(),
    }
}

async fn run(t: &Transformer, llm: &LlmClient, q: &str, p: &TransformPlan) -> Transformed {
    let deadline = Instant::now() + Duration::from_millis(t.config.timeout_ms);
    t.run(llm, q, p, 4096, deadline, &|_| true).await
}

fn transformer() -> Transformer {
    Transformer::new(
        TransformConfig {
            timeout_ms: 1500,
            ..TransformConfig::default()
        },
        Metrics::new(),
    )
}

#[tokio::test]
async fn rewrites_passages_and_standalone_questions_come_from_the_model() {
    let standin = StandIn::start().await.unwrap();
    let llm = client(&standin, "standin");
    let t = transformer();
    let out = run(
        &t,
        &llm,
        "glacier retreat causes",
        &plan(2, HydeMode::On, &[]),
    )
    .await;
    assert_eq!(out.question, "glacier retreat causes");
    assert_eq!(out.variants, ["glacier", "retreat"]);
    assert!(out.passage.as_deref().unwrap().contains("consequences"));
    assert!(out.degraded.is_empty());
    assert_eq!(
        out.info.queries,
        ["glacier retreat causes", "glacier", "retreat"]
    );
    assert!(out.info.hyde_used);
    assert_eq!(out.info.hyde_reason, "requested");
    assert_eq!(out.info.llm_calls, 2);

    let history = [
        ("user", "Who found the Zorblax glacier?"),
        ("assistant", "Marie Kessler found it in 1921."),
    ];
    let out = run(
        &t,
        &llm,
        "What happened to him later?",
        &plan(0, HydeMode::Auto, &history),
    )
    .await;
    assert_eq!(out.question, "What happened to Marie Kessler later?");
    assert_eq!(
        out.info.standalone_query.as_deref(),
        Some("What happened to Marie Kessler later?")
    );
    // auto: a factual question gets no passage, and no call is made for one.
    assert!(!out.info.hyde_used);
    assert!(
        out.info.hyde_reason.starts_with("auto: factual"),
        "{}",
        out.info.hyde_reason
    );
    assert_eq!(out.info.llm_calls, 1);
    // The condense prompt held the conversation, never a passage.
    let last = standin.requests().pop().unwrap();
    let prompt = last["messages"][1]["content"].as_str().unwrap();
    assert!(
        prompt.contains("assistant: Marie Kessler found it in 1921."),
        "{prompt}"
    );
}

#[tokio::test]
async fn auto_runs_hyde_for_analytical_questions_only() {
    let standin = StandIn::start().await.unwrap();
    let llm = client(&standin, "standin");
    let t = transformer();
    let out = run(
        &t,
        &llm,
        "为什么冰川在夏天退缩？",
        &plan(0, HydeMode::Auto, &[]),
    )
    .await;
    assert!(out.info.hyde_used, "{:?}", out.info);
    assert!(out.passage.unwrap().contains("为什么冰川在夏天退缩"));
    let out = run(&t, &llm, "RFC 7231", &plan(0, HydeMode::Auto, &[])).await;
    assert!(!out.info.hyde_used);
    assert_eq!(standin.requests().len(), 1, "no call for an identifier");
    // Without a vector route HyDE is pointless.
    let deadline = Instant::now() + Duration::from_secs(1);
    let p = plan(0, HydeMode::On, &[]);
    let out = t.run(&llm, "why?", &p, 4096, deadline, &|_| false).await;
    assert!(!out.info.hyde_used && out.info.hyde_reason.contains("vector route"));
}

#[tokio::test]
async fn a_second_identical_request_is_answered_from_the_cache() {
    let standin = StandIn::start().await.unwrap();
    let llm = client(&standin, "standin");
    let t = transformer();
    let p = plan(3, HydeMode::On, &[("user", "Who is Ada Lovelace?")]);
    let first = run(&t, &llm, "why is she famous?", &p).await;
    let calls = standin.requests().len();
    assert_eq!(calls, 3);
    assert!(first.info.cached.is_empty());
    let second = run(&t, &llm, "why is she famous?", &p).await;
    assert_eq!(standin.requests().len(), calls, "the cache answered");
    assert_eq!(second.info.cached, ["condense", "multi_query", "hyde"]);
    assert_eq!(second.info.llm_calls, 0);
    assert_eq!(
        (second.question, second.variants),
        (first.question, first.variants)
    );
    // Another model is another key.
    let other = client(&standin, "standin-slow-1ms");
    run(&t, &other, "why is she famous?", &p).await;
    assert_eq!(standin.requests().len(), calls + 3);
    // No cache: every request calls.
    let uncached = Transformer::new(
        TransformConfig {
            cache_entries: 0,
            ..TransformConfig::default()
        },
        Metrics::new(),
    );
    run(&uncached, &llm, "why is she famous?", &p).await;
    run(&uncached, &llm, "why is she famous?", &p).await;
    assert_eq!(standin.requests().len(), calls + 9);
}

#[tokio::test]
async fn every_failure_falls_back_to_the_question_and_says_why() {
    let standin = StandIn::start().await.unwrap();
    let t = transformer();
    let p = plan(2, HydeMode::On, &[("user", "Who is Ada Lovelace?")]);
    for (model, class, words) in [
        ("standin-500", "server_error", "500"),
        ("standin-429", "rate_limited", "429"),
        ("standin-slow-5s", "timeout", "did not answer"),
        ("standin-stall-after-1", "timeout", "did not answer"),
        ("standin-malformed", "bad_response", "is not valid"),
    ] {
        let llm = client(&standin, model);
        let started = Instant::now();
        let out = run(&t, &llm, "what did she write?", &p).await;
        assert!(
            started.elapsed() < Duration::from_millis(2500),
            "{model}: within its share"
        );
        assert_eq!(out.question, "what did she write?", "{model}");
        assert!(out.variants.is_empty() && out.passage.is_none(), "{model}");
        assert_eq!(out.degraded.len(), 3, "{model}: {:?}", out.degraded);
        assert!(out.degraded.iter().all(|d| d.route == "transform"));
        for (d, step) in out.degraded.iter().zip(["condense", "multi_query", "hyde"]) {
            assert!(d.reason.starts_with(step), "{model}: {}", d.reason);
            let late = class == "timeout" && d.reason.contains("no time was left");
            assert!(d.reason.contains(words) || late, "{model}: {}", d.reason);
        }
        assert_eq!(out.info.hyde_reason, format!("failed: {class}"), "{model}");
        let m = t.metrics.encode();
        let line =
            format!("freshet_query_transform_steps_total{{step=\"hyde\",outcome=\"{class}\"}}");
        assert!(m.contains(&line), "{model}: {line} missing");
    }
    // A failure is not cached: the next request asks again.
    let llm = client(&standin, "standin-500");
    let before = standin.requests().len();
    run(&t, &llm, "what did she write?", &plan(0, HydeMode::On, &[])).await;
    assert!(standin.requests().len() > before);
}

#[tokio::test]
async fn an_unreadable_answer_is_garbage() {
    // A standalone question longer than the node's query limit (5 characters here) cannot be
    // searched.
    let standin = StandIn::start().await.unwrap();
    let llm = client(&standin, "standin");
    let t = transformer();
    let deadline = Instant::now() + Duration::from_secs(2);
    let p = plan(0, HydeMode::Off, &[("user", "Who is Ada Lovelace?")]);
    let out = t
        .run(&llm, "and then what happened?", &p, 5, deadline, &|_| true)
        .await;
    assert_eq!(out.question, "and then what happened?");
    assert!(
        out.degraded[0].reason.contains("unusable"),
        "{:?}",
        out.degraded
    );
    assert!(t
        .metrics
        .encode()
        .contains("freshet_query_transform_steps_total{step=\"condense\",outcome=\"garbage\"}"));
}
