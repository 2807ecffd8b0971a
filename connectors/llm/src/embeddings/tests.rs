use std::time::{Duration, Instant};

use super::*;
use crate::standin::embeddings::{vector, EmbedScript, DEFAULT_DIM};
use crate::standin::StandIn;

fn settings(c: &EmbeddingsConfig) -> anyhow::Result<EmbeddingsSettings> {
    c.settings(&|name| (name == "EMBED_KEY").then(|| "sk-from-env".to_string()))
}

fn with(base_url: &str) -> EmbeddingsConfig {
    EmbeddingsConfig {
        base_url: base_url.into(),
        model: "m".into(),
        ..EmbeddingsConfig::default()
    }
}

fn client(
    standin: &StandIn,
    model: &str,
    f: impl FnOnce(&mut EmbeddingsConfig),
) -> EmbeddingsClient {
    let mut c = EmbeddingsConfig {
        model: model.into(),
        backoff_initial_ms: 10,
        backoff_max_ms: 50,
        ..with(&standin.base_url())
    };
    f(&mut c);
    EmbeddingsClient::new(settings(&c).unwrap()).unwrap()
}

fn texts(t: &[&str]) -> Vec<String> {
    t.iter().map(|s| s.to_string()).collect()
}

#[test]
fn settings_are_checked_with_the_setting_named() {
    let s = settings(&with("http://127.0.0.1:8080/v1")).unwrap();
    assert_eq!(
        s.base_url.join("embeddings").unwrap().as_str(),
        "http://127.0.0.1:8080/v1/embeddings"
    );
    for (bad, named) in [
        (with(""), "embedding.base_url is empty"),
        (with("not a url"), "embedding.base_url"),
        (with("ftp://h/v1"), "embedding.base_url"),
        (with("http://h/v1?x=1"), "embedding.base_url"),
        (with("http://u:p@h/v1"), "embedding.base_url"),
        (with("http://h/v1/embeddings"), "without /embeddings"),
        (
            EmbeddingsConfig {
                model: " ".into(),
                ..with("http://h/v1")
            },
            "embedding.model",
        ),
        (
            EmbeddingsConfig {
                batch_size: 0,
                ..with("http://h/v1")
            },
            "embedding.batch_size must be at least 1",
        ),
        (
            EmbeddingsConfig {
                max_concurrent: 0,
                ..with("http://h/v1")
            },
            "embedding.max_concurrent must be at least 1",
        ),
        (
            EmbeddingsConfig {
                dim: Some(0),
                ..with("http://h/v1")
            },
            "embedding.dim",
        ),
        (
            EmbeddingsConfig {
                timeout_ms: 200_000,
                ..with("http://h/v1")
            },
            "deadline_ms",
        ),
        (
            EmbeddingsConfig {
                backoff_initial_ms: 20_000,
                ..with("http://h/v1")
            },
            "backoff_initial_ms",
        ),
        (
            EmbeddingsConfig {
                api_key_env: "EMBED_KEY".into(),
                ..with("http://embed.example.com/v1")
            },
            "embedding.allow_insecure_http",
        ),
        (
            EmbeddingsConfig {
                api_key_env: "NO_SUCH_KEY".into(),
                ..with("https://embed.example.com/v1")
            },
            "embedding.api_key_env",
        ),
    ] {
        let e = format!("{:#}", settings(&bad).unwrap_err());
        assert!(e.contains(named), "{bad:?}: {e}");
    }
    let keyed = settings(&EmbeddingsConfig {
        api_key_env: "EMBED_KEY".into(),
        ..with("https://embed.example.com/v1")
    })
    .unwrap();
    assert_eq!(
        keyed.api_key.as_ref().map(|k| k.expose()),
        Some("sk-from-env")
    );
    assert!(!format!("{keyed:?}").contains("sk-from-env"));
}

#[test]
fn the_model_id_names_the_provider_the_server_and_the_model() {
    let id = |url: &str, model: &str| EmbeddingsSettings::for_base(url, model).unwrap().model_id();
    assert_eq!(
        id("http://127.0.0.1:8080/v1", "BAAI/bge-m3"),
        "openai:127.0.0.1:8080/v1/BAAI/bge-m3"
    );
    assert_eq!(
        id("https://api.openai.com/v1/", "text-embedding-3-small"),
        "openai:api.openai.com/v1/text-embedding-3-small"
    );
    assert_ne!(id("http://a/v1", "m"), id("http://b/v1", "m"));
    assert_ne!(id("http://a/v1", "m"), id("http://a/v1", "n"));
}

#[test]
fn the_standin_scripts_parse() {
    assert_eq!(
        EmbedScript::of("standin"),
        Some(EmbedScript::Embed { dim: DEFAULT_DIM })
    );
    assert_eq!(
        EmbedScript::of("standin-dim-8"),
        Some(EmbedScript::Embed { dim: 8 })
    );
    assert_eq!(
        EmbedScript::of("standin-max-words-5"),
        Some(EmbedScript::MaxWords(5))
    );
    assert_eq!(
        EmbedScript::of("standin-503-x2-then-ok"),
        Some(EmbedScript::StatusTimes {
            code: 503,
            times: 2
        })
    );
    assert!(matches!(
        EmbedScript::of("standin-429"),
        Some(EmbedScript::Chat(_))
    ));
    assert_eq!(EmbedScript::of("standin-dim-0"), None);
    assert_eq!(EmbedScript::of("other"), None);
    assert_eq!(EmbedScript::of("standin-uncited"), None);
}

#[test]
fn standin_vectors_are_unit_deterministic_and_near_for_shared_words() {
    let a = vector("The comet passed near Jupiter in spring", 256);
    assert_eq!(a, vector("the comet passed near jupiter in spring!", 256));
    let n: f32 = a.iter().map(|x| x * x).sum();
    assert!((n - 1.0).abs() < 1e-5);
    let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f32>();
    let near = vector("a comet near Jupiter", 256);
    let far = vector("tax law of medieval guilds", 256);
    assert!(dot(&a, &near) > 0.5, "{}", dot(&a, &near));
    assert!(dot(&a, &far) < 0.2, "{}", dot(&a, &far));
    let zh = vector("彗星经过木星", 256);
    assert!(dot(&zh, &vector("木星和彗星", 256)) > 0.5);
}

#[tokio::test]
async fn the_standin_answers_in_openais_shape_and_refuses_bad_requests() {
    let s = StandIn::start().await.unwrap();
    let http = reqwest::Client::new();
    let url = format!("{}/embeddings", s.base_url());
    let r = http
        .post(&url)
        .json(&serde_json::json!({"model": "standin-dim-8", "input": ["one two", "three"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "standin-dim-8");
    assert_eq!(v["data"][1]["index"], 1);
    assert_eq!(v["data"][1]["object"], "embedding");
    assert_eq!(v["data"][0]["embedding"].as_array().unwrap().len(), 8);
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    assert_eq!(v["usage"]["total_tokens"], 3);
    let one = http
        .post(&url)
        .json(&serde_json::json!({"model": "standin", "input": "one"}))
        .send()
        .await
        .unwrap();
    let one: serde_json::Value = one.json().await.unwrap();
    assert_eq!(one["data"].as_array().unwrap().len(), 1);
    for bad in [
        serde_json::json!({"input": "x"}),
        serde_json::json!({"model": "standin", "input": []}),
        serde_json::json!({"model": "standin", "input": [""]}),
        serde_json::json!({"model": "standin", "input": [[1, 2]]}),
        serde_json::json!({"model": "standin", "input": "x", "encoding_format": "base64"}),
    ] {
        let r = http.post(&url).json(&bad).send().await.unwrap();
        assert_eq!(r.status(), 400, "{bad}");
    }
    let r = http
        .post(&url)
        .json(&serde_json::json!({"model": "nope", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(s.embeddings().requests().len(), 8);
}

#[tokio::test]
async fn requests_are_started_no_faster_than_the_rate_limit() {
    let s = StandIn::start().await.unwrap();
    let c = client(&s, "standin", |c| {
        c.batch_size = 1;
        c.requests_per_minute = 600;
    });
    let started = Instant::now();
    let out = c
        .embed(&texts(&["a", "b", "c", "d", "e", "f"]))
        .await
        .unwrap();
    assert_eq!(out.len(), 6);
    // 600 a minute: six starts 100 ms apart: the last at least 500 ms after the first.
    assert!(
        started.elapsed() >= Duration::from_millis(490),
        "{:?}",
        started.elapsed()
    );
    let unlimited = client(&s, "standin", |c| c.batch_size = 1);
    let started = Instant::now();
    unlimited
        .embed(&texts(&["a", "b", "c", "d", "e", "f"]))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn texts_go_in_batches_and_come_back_in_order() {
    let s = StandIn::start().await.unwrap();
    let c = client(&s, "standin", |c| c.batch_size = 2);
    let input = texts(&["alpha", "beta gamma", "delta", "epsilon", "zeta"]);
    let out = c.embed(&input).await.unwrap();
    assert_eq!(out.len(), 5);
    for (t, v) in input.iter().zip(&out) {
        assert_eq!(*v, vector(t, DEFAULT_DIM), "{t}");
    }
    let sent: Vec<usize> = s
        .embeddings()
        .requests()
        .iter()
        .map(|r| r["input"].as_array().unwrap().len())
        .collect();
    let mut sorted = sent.clone();
    sorted.sort();
    assert_eq!(sorted, [1, 2, 2], "{sent:?}");
    assert!(s
        .embeddings()
        .requests()
        .iter()
        .all(|r| r["model"] == "standin" && r["encoding_format"] == "float"));
    assert_eq!(c.dim(), Some(DEFAULT_DIM), "learnt from the first answer");
    assert!(c.embed(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn server_errors_are_retried_until_the_server_answers() {
    let s = StandIn::start().await.unwrap();
    let c = client(&s, "standin-503-x2-then-ok", |c| c.retries = 3);
    let out = c.embed(&texts(&["river"])).await.unwrap();
    assert_eq!(out[0], vector("river", DEFAULT_DIM));
    assert_eq!(s.embeddings().requests().len(), 3);

    let c = client(&s, "standin-500", |c| c.retries = 2);
    let e = c.embed(&texts(&["river"])).await.unwrap_err();
    assert!(
        matches!(
            e,
            LlmError::Server {
                status: 500,
                attempts: 3,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.is_outage());
}

#[tokio::test]
async fn retry_after_is_honoured_and_a_wait_past_the_deadline_gives_up_at_once() {
    let s = StandIn::start().await.unwrap();
    let c = client(&s, "standin-429-then-ok", |_| {});
    let started = Instant::now();
    c.embed(&texts(&["river"])).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );

    let c = client(&s, "standin-429-long", |c| c.deadline_ms = 60_000);
    let started = Instant::now();
    let e = c.embed(&texts(&["river"])).await.unwrap_err();
    assert!(
        matches!(e, LlmError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(3600)),
        "{e:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(e.is_outage());
}

#[tokio::test]
async fn a_refused_text_is_not_retried_and_not_an_outage() {
    let s = StandIn::start().await.unwrap();
    let c = client(&s, "standin-max-words-3", |_| {});
    assert!(c.embed(&texts(&["short text"])).await.is_ok());
    let e = c
        .embed(&texts(&["this text has far too many words"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, LlmError::Refused { status: 400, message } if message.contains("too long")),
        "{e:?}"
    );
    assert!(!e.is_outage());
    assert_eq!(s.embeddings().requests().len(), 2, "no retry");
}

#[tokio::test]
async fn an_outage_is_an_outage_and_ends_when_the_server_is_back() {
    let s = StandIn::start().await.unwrap();
    let c = client(&s, "standin", |c| c.retries = 1);
    s.embeddings().set_down(true);
    let e = c.embed(&texts(&["river"])).await.unwrap_err();
    assert!(matches!(e, LlmError::Server { status: 503, .. }), "{e:?}");
    assert!(e.is_outage());
    s.embeddings().set_down(false);
    assert!(c.embed(&texts(&["river"])).await.is_ok());

    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let c = EmbeddingsClient::new(
        settings(&EmbeddingsConfig {
            retries: 1,
            backoff_initial_ms: 10,
            ..with(&format!("http://{closed}/v1"))
        })
        .unwrap(),
    )
    .unwrap();
    let e = c.embed(&texts(&["river"])).await.unwrap_err();
    assert!(
        matches!(e, LlmError::Unavailable { attempts: 2, .. }),
        "{e:?}"
    );
    assert!(e.is_outage());

    let c = client(&s, "standin-slow-2s", |c| {
        c.timeout_ms = 200;
        c.connect_timeout_ms = 100;
        c.retries = 0;
    });
    let e = c.embed(&texts(&["river"])).await.unwrap_err();
    assert!(matches!(e, LlmError::Timeout { .. }), "{e:?}");
    assert!(e.is_outage());
}

#[tokio::test]
async fn a_wrong_dimension_or_a_broken_body_is_a_bad_response() {
    let s = StandIn::start().await.unwrap();
    let c = client(&s, "standin-dim-8", |c| c.dim = Some(16));
    let e = c.embed(&texts(&["river"])).await.unwrap_err();
    assert!(
        matches!(&e, LlmError::BadResponse(m) if m.contains("8-dimensional")),
        "{e:?}"
    );
    assert!(!e.is_outage());
    let c = client(&s, "standin-malformed", |_| {});
    let e = c.embed(&texts(&["river"])).await.unwrap_err();
    assert!(matches!(e, LlmError::BadResponse(_)), "{e:?}");
}

#[tokio::test]
async fn the_key_is_sent_as_a_bearer_token() {
    let s = StandIn::start_with(crate::standin::StandinOptions {
        api_key: Some("sk-test".into()),
    })
    .await
    .unwrap();
    let no_key = client(&s, "standin", |_| {});
    let e = no_key.embed(&texts(&["river"])).await.unwrap_err();
    assert!(matches!(e, LlmError::Refused { status: 401, .. }), "{e:?}");
    let keyed = EmbeddingsClient::new(
        EmbeddingsConfig {
            api_key_env: "EMBED_KEY".into(),
            model: "standin".into(),
            ..with(&s.base_url())
        }
        .settings(&|_| Some("sk-test".into()))
        .unwrap(),
    )
    .unwrap();
    assert!(keyed.embed(&texts(&["river"])).await.is_ok());
}

#[test]
fn a_vector_per_token_is_refused_with_what_to_serve() {
    let c =
        EmbeddingsClient::new(EmbeddingsSettings::for_base("http://h/v1", "m").unwrap()).unwrap();
    let body = br#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[[0.1,0.2],[0.3,0.4]]}]}"#;
    let e = c.vectors(body, 1).unwrap_err();
    assert!(
        matches!(&e, LlmError::BadResponse(m) if m.contains("per token")),
        "{e:?}"
    );
    let body =
        br#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}]}"#;
    assert_eq!(c.vectors(body, 1).unwrap().0, vec![vec![0.1, 0.2]]);
    assert!(c.vectors(body, 2).is_err(), "one vector for two texts");
}
