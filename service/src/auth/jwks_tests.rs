use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;

use super::*;
use crate::auth::jwt::{JwtConfig, Verifier};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/jwt")
        .join(name)
}

/// The RSA (RS256) or EC (ES256) fixture key.
fn signing_key(alg: Algorithm) -> EncodingKey {
    if alg == Algorithm::RS256 {
        EncodingKey::from_rsa_pem(&std::fs::read(fixture("rsa-private.pem")).unwrap()).unwrap()
    } else {
        EncodingKey::from_ec_pem(&std::fs::read(fixture("ec-private.pem")).unwrap()).unwrap()
    }
}

fn jwks(keys: &[(Algorithm, &str)]) -> String {
    let keys = keys
        .iter()
        .map(|(alg, kid)| {
            let mut jwk = Jwk::from_encoding_key(&signing_key(*alg), *alg).unwrap();
            jwk.common.key_id = Some((*kid).into());
            jwk
        })
        .collect();
    serde_json::to_string(&JwkSet { keys }).unwrap()
}

fn token(alg: Algorithm, kid: &str) -> String {
    let claims = json!({"iss": "https://idp.test", "aud": "freshet", "sub": "alice",
        "exp": jsonwebtoken::get_current_timestamp() + 600, "groups": ["a"]});
    let header = Header {
        kid: Some(kid.into()),
        ..Header::new(alg)
    };
    encode(&header, &claims, &signing_key(alg)).unwrap()
}

/// An identity provider's JWKS endpoint whose document (or failure) the test sets; counts GETs.
struct Idp {
    url: String,
    body: Arc<Mutex<Option<String>>>,
    gets: Arc<Mutex<usize>>,
}

async fn idp(body: Option<String>) -> Idp {
    let body = Arc::new(Mutex::new(body));
    let gets = Arc::new(Mutex::new(0));
    let (b, g) = (body.clone(), gets.clone());
    let app = axum::Router::new().route(
        "/certs",
        axum::routing::get(move || {
            let (b, g) = (b.clone(), g.clone());
            async move {
                *g.lock().unwrap() += 1;
                match b.lock().unwrap().clone() {
                    Some(doc) => (axum::http::StatusCode::OK, doc),
                    None => (axum::http::StatusCode::BAD_GATEWAY, "down".to_string()),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/certs", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Idp { url, body, gets }
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{what} did not happen within 5 s");
}

#[tokio::test]
async fn the_node_verifies_tokens_with_keys_from_the_issuers_jwks_url() {
    let idp = idp(Some(jwks(&[(Algorithm::RS256, "k1")]))).await;
    let cfg = JwtConfig {
        issuer: "https://idp.test".into(),
        audience: vec!["freshet".into()],
        jwks_url: idp.url.clone(),
        ..JwtConfig::default()
    };
    let v = Verifier::from_config(&cfg, "query.jwt", &|_| None)
        .unwrap()
        .unwrap();
    let remote = v.remote().unwrap().clone();
    assert!(remote.status().unwrap_err().contains("not fetched yet"));
    assert!(
        v.verify(&token(Algorithm::RS256, "k1")).is_err(),
        "no keys yet"
    );
    remote.spawn().unwrap();
    eventually("the first fetch", || remote.status().is_ok()).await;
    let claims = v.verify(&token(Algorithm::RS256, "k1")).unwrap();
    assert_eq!(claims.subject, "alice");
    assert!(claims.principals.contains("group:a"));
}

/// A rotation: the issuer publishes a new key; the first token naming it is refused and makes
/// the node fetch again (no sooner than the minimum pause), after which it verifies. The old key
/// is gone with the new document.
#[tokio::test]
async fn an_unknown_kid_fetches_the_jwks_again_and_a_rotation_takes_effect() {
    let idp = idp(Some(jwks(&[(Algorithm::RS256, "k1")]))).await;
    let remote = Arc::new(RemoteJwks::new(
        idp.url.clone(),
        "query.jwt.jwks_url".into(),
        Duration::from_secs(3600),
        Duration::from_millis(300),
    ));
    remote.spawn().unwrap();
    eventually("the first fetch", || remote.status().is_ok()).await;
    let has = |kid: &str| remote.keys().iter().any(|k| k.kid.as_deref() == Some(kid));
    assert!(has("k1") && !has("k2"));

    *idp.body.lock().unwrap() = Some(jwks(&[(Algorithm::ES256, "k2")]));
    assert_eq!(*idp.gets.lock().unwrap(), 1, "no fetch before it is needed");
    remote.unknown_kid();
    eventually("the fetch after an unknown kid", || has("k2")).await;
    assert!(!has("k1"), "the rotated-out key is gone");
    assert_eq!(*idp.gets.lock().unwrap(), 2);
}

/// A failing endpoint: not ready with the reason, retried; a later failure keeps the keys.
#[tokio::test]
async fn a_failing_jwks_url_is_retried_and_keeps_what_was_fetched() {
    let idp = idp(None).await;
    let remote = Arc::new(RemoteJwks::new(
        idp.url.clone(),
        "query.jwt.jwks_url".into(),
        Duration::from_millis(200),
        Duration::from_millis(100),
    ));
    remote.spawn().unwrap();
    eventually("a failed fetch", || {
        remote
            .status()
            .is_err_and(|e| e.contains("502") && e.contains("not fetched yet"))
    })
    .await;
    *idp.body.lock().unwrap() = Some(jwks(&[(Algorithm::RS256, "k1")]));
    eventually("the retry", || remote.status().is_ok()).await;
    *idp.body.lock().unwrap() = None;
    let gets = *idp.gets.lock().unwrap();
    eventually("a refresh that fails", || {
        *idp.gets.lock().unwrap() > gets + 1
    })
    .await;
    assert!(remote.status().is_ok());
    assert_eq!(remote.keys().len(), 1, "the keys fetched before stay");
}
