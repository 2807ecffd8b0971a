//! The service over a real socket: HTTPS with a certificate made for the test, to a real
//! client (reqwest with rustls) that trusts it.

use std::time::Duration;

use super::*;
use crate::produce::Publisher;
use freshet_kafka::Placed;
use freshet_kafka::{DocumentRecord, Produce};

struct Accepting;

impl Produce for Accepting {
    fn topic(&self) -> &str {
        "docs"
    }
    fn produce(&self, records: &[DocumentRecord]) -> freshet_kafka::Result<Vec<Placed>> {
        Ok(records
            .iter()
            .enumerate()
            .map(|(i, _)| Placed {
                partition: 0,
                offset: i as i64,
            })
            .collect())
    }
}

impl Publisher for Accepting {
    fn ready(&self) -> Result<(), String> {
        Ok(())
    }
}

#[tokio::test]
async fn serves_https_with_the_configured_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.signing_key.serialize_pem()).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env: Vec<(String, String)> = [
        ("FRESHET_INGEST_LISTEN", format!("127.0.0.1:{port}")),
        (
            "FRESHET_INGEST_TLS_CERT_FILE",
            cert_file.display().to_string(),
        ),
        (
            "FRESHET_INGEST_TLS_KEY_FILE",
            key_file.display().to_string(),
        ),
        (
            "FRESHET_INGEST_KEYS",
            r#"[{name = "a", key = "key-a", id_prefixes = ["a/"], may_publish_public = true}]"#
                .to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let config = Config::load_with_env(None, &env).unwrap();
    let app = App::with_env(config, Arc::new(Accepting), &|_| None).unwrap();
    let server = tokio::spawn(serve(app));
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert.cert.pem().as_bytes()).unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!("https://localhost:{port}/v1/documents/a%2F1");
    let mut answer = None;
    for _ in 0..100 {
        match client
            .put(&url)
            .header("x-api-key", "key-a")
            .header("content-type", "application/json")
            .body(r#"{"text":"over TLS"}"#)
            .send()
            .await
        {
            Ok(r) => {
                answer = Some(r);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let r = answer.expect("the service answers over HTTPS");
    assert_eq!(r.status(), 200);
    // Plain HTTP on the same port gets no answer.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);
    server.abort();
}
