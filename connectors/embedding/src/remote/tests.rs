use freshet_core::embed::{cache_key, EmbedError, Embedder};
use freshet_llm::standin::embeddings::{vector, DEFAULT_DIM};
use freshet_llm::standin::StandIn;

use crate::{EmbeddingConfig, EmbeddingModel, Error, Provider};

/// Equal up to float noise (the embedder normalises the stand-in's unit vectors again).
fn assert_close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    assert!(
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6),
        "{a:?} != {b:?}"
    );
}

/// A stand-in on its own runtime (the embedder blocks, so the tests are plain functions).
fn standin() -> (tokio::runtime::Runtime, StandIn) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let s = rt.block_on(StandIn::start()).unwrap();
    (rt, s)
}

fn remote(base_url: &str, model: &str) -> EmbeddingConfig {
    EmbeddingConfig {
        provider: Provider::Openai,
        base_url: base_url.into(),
        model: model.into(),
        backoff_initial_ms: 10,
        backoff_max_ms: 50,
        ..EmbeddingConfig::default()
    }
}

#[test]
fn remote_settings_are_checked_and_refused_for_the_local_model() {
    let e = EmbeddingConfig {
        base_url: "http://127.0.0.1:8080/v1".into(),
        ..EmbeddingConfig::default()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(e.contains("provider = \"openai\""), "{e}");
    let e = EmbeddingConfig {
        retries: 9,
        ..EmbeddingConfig::default()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(e.contains("provider = \"openai\""), "{e}");
    let e = remote("", "m").validate().unwrap_err().to_string();
    assert!(e.contains("embedding.base_url is empty"), "{e}");
    let e = remote("http://h/v1", "")
        .validate()
        .unwrap_err()
        .to_string();
    assert!(e.contains("embedding.model"), "{e}");
    assert!(remote("http://h/v1", "m").validate().is_ok());
    let c: EmbeddingConfig = serde_json::from_str(
        r#"{"provider": "openai", "base_url": "http://h/v1", "model": "m", "dim": 8}"#,
    )
    .unwrap();
    assert_eq!(c.provider, Provider::Openai);
    assert!(serde_json::from_str::<EmbeddingConfig>(r#"{"provider": "tei"}"#).is_err());
    let e = crate::FastEmbedder::load(&c).unwrap_err().to_string();
    assert!(e.contains("local ONNX model only"), "{e}");
    assert_eq!(
        remote("http://h/v1", "m").tokenizer_path(),
        EmbeddingConfig::default().model_dir.join("tokenizer.json")
    );
    let pinned = EmbeddingConfig {
        tokenizer: Some("/t/tokenizer.json".into()),
        ..remote("http://h/v1", "m")
    };
    assert_eq!(
        pinned.tokenizer_path(),
        std::path::Path::new("/t/tokenizer.json")
    );
}

#[test]
fn a_remote_model_embeds_through_the_server_with_its_own_model_id() {
    let (_rt, s) = standin();
    let mut m = EmbeddingModel::load(&remote(&s.base_url(), "standin")).unwrap();
    let host = s.base_url().trim_start_matches("http://").to_owned();
    assert_eq!(m.model_id(), format!("openai:{host}/standin"));
    assert_eq!(m.cache_id(), m.model_id());
    assert_eq!(m.dim(), DEFAULT_DIM, "learnt from the probe");
    let v = m.embed_passage_texts(&["the comet", "a river"]).unwrap();
    assert_close(&v[0], &vector("the comet", DEFAULT_DIM));
    assert_close(&m.embed_query("a river").unwrap(), &v[1]);
    // Another model, server or passage prefix is another vector space and other cache keys.
    let other = EmbeddingModel::load(&remote(&s.base_url(), "standin-dim-256")).unwrap();
    assert_ne!(other.model_id(), m.model_id());
    assert_ne!(
        cache_key(other.cache_id(), "x"),
        cache_key(m.cache_id(), "x")
    );
    let prefixed = EmbeddingModel::load(&EmbeddingConfig {
        passage_prefix: Some("passage: ".into()),
        query_prefix: Some("query: ".into()),
        ..remote(&s.base_url(), "standin")
    })
    .unwrap();
    assert_eq!(
        prefixed.model_id(),
        format!("openai:{host}/standin|passage_prefix:\"passage: \"")
    );
    let pinned = EmbeddingModel::load(&EmbeddingConfig {
        model_id: Some("team/bge".into()),
        ..remote(&s.base_url(), "standin")
    })
    .unwrap();
    assert_eq!(pinned.model_id(), "openai:team/bge");
    let sent: Vec<String> = s
        .embeddings()
        .requests()
        .iter()
        .flat_map(|r| r["input"].as_array().unwrap().clone())
        .map(|t| t.as_str().unwrap().to_owned())
        .collect();
    assert!(sent.contains(&"dimension probe".to_owned()), "{sent:?}");
    assert!(sent.contains(&"the comet".to_owned()), "{sent:?}");
}

#[test]
fn a_configured_dimension_is_checked_at_load() {
    let (_rt, s) = standin();
    let e = EmbeddingModel::load(&EmbeddingConfig {
        dim: Some(384),
        ..remote(&s.base_url(), "standin")
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("256-dimensional") && e.contains("embedding.base_url"),
        "{e}"
    );
}

#[test]
fn an_outage_is_about_no_text_and_a_refusal_may_be() {
    let (_rt, s) = standin();
    let mut m = EmbeddingModel::load(&EmbeddingConfig {
        retries: 1,
        ..remote(&s.base_url(), "standin-max-words-4")
    })
    .unwrap();
    s.embeddings().set_down(true);
    let e = m.embed_passages(&["the comet"]).unwrap_err();
    assert!(!e.may_be_about_texts, "{e}");
    assert!(e.message.contains("503"), "{e}");
    s.embeddings().set_down(false);
    assert!(m.embed_passages(&["the comet"]).is_ok());
    let e: EmbedError = m
        .embed_passages(&["one two three four five six"])
        .unwrap_err();
    assert!(e.may_be_about_texts, "{e}");
    assert!(e.message.contains("too long"), "{e}");
}

#[test]
fn a_server_that_does_not_answer_at_start_stops_the_load_with_what_to_check() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = EmbeddingModel::load(&EmbeddingConfig {
        retries: 0,
        ..remote(&format!("http://{closed}/v1"), "m")
    })
    .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("unreachable") && e.contains("embedding.base_url"),
        "{e}"
    );
}

#[test]
fn a_remote_model_embeds_from_inside_another_runtime() {
    let (rt, s) = standin();
    let config = remote(&s.base_url(), "standin");
    let v = rt
        .block_on(async move {
            let mut m = EmbeddingModel::load(&config)?;
            m.embed_query("the comet")
        })
        .unwrap();
    assert_close(&v, &vector("the comet", DEFAULT_DIM));
}
