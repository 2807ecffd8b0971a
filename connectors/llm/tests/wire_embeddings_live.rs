//! The embeddings client against a real OpenAI-compatible server implementation, not the
//! stand-in: vectors in the server's own shape, in order, one per text, batched or not. Built
//! only with the `wire` feature, which deploy/test.sh turns on (through freshet-tests/live) after
//! starting llama.cpp's server with embeddings on (deploy/start-llama.sh); by hand, start a
//! server and name it (docs/models.md, "Wire compatibility"):
//!
//! ```sh
//! FRESHET_EMBED_WIRE_URL=http://127.0.0.1:8083/v1 FRESHET_EMBED_WIRE_MODEL=tiny-embed \
//!   cargo test -p freshet-llm --features wire --test wire_embeddings_live
//! ```
//!
//! It fails, never skips, without them.

use freshet_llm::{EmbeddingsClient, EmbeddingsConfig};

fn client(batch_size: usize) -> EmbeddingsClient {
    let url = std::env::var("FRESHET_EMBED_WIRE_URL")
        .expect("FRESHET_EMBED_WIRE_URL: the base URL of the server under test");
    let model = std::env::var("FRESHET_EMBED_WIRE_MODEL")
        .expect("FRESHET_EMBED_WIRE_MODEL: the embedding model it serves");
    let settings = EmbeddingsConfig {
        base_url: url,
        model,
        batch_size,
        ..EmbeddingsConfig::default()
    }
    .settings(&|_| None)
    .unwrap();
    EmbeddingsClient::new(settings).unwrap()
}

fn texts() -> Vec<String> {
    ["the cat is a cat.", "a dog.", "the answer is [1].", "cat"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (n(a) * n(b))
}

#[tokio::test]
async fn vectors_come_one_per_text_in_order_batched_or_not() {
    let batched = client(3);
    let all = batched.embed(&texts()).await.unwrap();
    assert_eq!(all.len(), 4);
    let dim = batched.dim().expect("learnt from the answer");
    assert!(dim > 0 && all.iter().all(|v| v.len() == dim), "dim {dim}");
    let single = client(1);
    for (t, v) in texts().iter().zip(&all) {
        let alone = single.embed(std::slice::from_ref(t)).await.unwrap();
        let c = cosine(&alone[0], v);
        assert!(c > 0.999, "{t:?}: cosine {c} between alone and batched");
    }
    let c = cosine(&all[0], &all[1]);
    assert!(c < 0.9999, "different texts, different vectors ({c})");
}

#[tokio::test]
async fn a_wrong_dimension_is_a_bad_response() {
    let url = std::env::var("FRESHET_EMBED_WIRE_URL").expect("FRESHET_EMBED_WIRE_URL");
    let model = std::env::var("FRESHET_EMBED_WIRE_MODEL").expect("FRESHET_EMBED_WIRE_MODEL");
    let wrong_dim = EmbeddingsClient::new(
        EmbeddingsConfig {
            base_url: url,
            model,
            dim: Some(1),
            ..EmbeddingsConfig::default()
        }
        .settings(&|_| None)
        .unwrap(),
    )
    .unwrap();
    let e = wrong_dim.embed(&texts()).await.unwrap_err();
    assert_eq!(e.class(), "bad_response", "{e}");
    assert!(!e.is_outage());
}
