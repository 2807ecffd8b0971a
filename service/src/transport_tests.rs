use std::time::Duration;

use super::*;
use crate::listen::serve;

#[test]
fn loopback_hosts_are_this_machine() {
    for h in [
        "localhost",
        "LOCALHOST",
        "a.localhost",
        "127.0.0.1",
        "127.1.2.3",
        "::1",
        "[::1]",
    ] {
        assert!(is_loopback_host(h), "{h}");
    }
    for h in [
        "",
        "example.com",
        "localhost.example.com",
        "10.0.0.1",
        "0.0.0.0",
        "::",
    ] {
        assert!(!is_loopback_host(h), "{h}");
    }
}

#[test]
fn a_listener_beyond_loopback_without_tls_is_warned_about() {
    let w = |listen: &str, tls: bool| listen_warning("the node", "x.listen", listen, tls);
    for quiet in ["127.0.0.1:8080", "[::1]:80", "localhost:8080"] {
        assert_eq!(w(quiet, false), None, "{quiet}");
    }
    for loud in [
        "0.0.0.0:8080",
        "[::]:80",
        "10.1.2.3:80",
        "node.example.com:80",
    ] {
        let m = w(loud, false).unwrap_or_default();
        assert!(
            m.contains(loud) && m.contains("tls_cert_file"),
            "{loud}: {m}"
        );
        assert_eq!(w(loud, true), None, "{loud} with TLS");
    }
}

/// A certificate for `localhost` and its key, as PEM files in `dir`.
fn self_signed(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, Vec<u8>) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.cert.pem()).unwrap();
    std::fs::write(&k, cert.signing_key.serialize_pem()).unwrap();
    (c, k, cert.cert.pem().into_bytes())
}

#[test]
fn tls_settings_are_both_or_neither_and_must_read() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, _) = self_signed(dir.path());
    let none = Path::new("");
    assert!(server_config("x", none, none).unwrap().is_none());
    assert!(server_config("x", &cert, &key).unwrap().is_some());
    for (c, k, why) in [
        (cert.as_path(), none, "go together"),
        (none, key.as_path(), "go together"),
        (key.as_path(), key.as_path(), "no certificate"),
        (cert.as_path(), cert.as_path(), "no private key"),
        (
            dir.path().join("nope").as_path(),
            key.as_path(),
            "cannot read",
        ),
    ] {
        let e = server_config("x", c, k).unwrap_err();
        assert!(format!("{e:#}").contains(why), "{why}: {e:#}");
    }
    // A key that is not the certificate's.
    let other = tempfile::tempdir().unwrap();
    let (_, other_key, _) = self_signed(other.path());
    let e = server_config("x", &cert, &other_key).unwrap_err();
    assert!(format!("{e:#}").contains("does not fit"), "{e:#}");
}

/// A real TLS client (reqwest with rustls) trusting the generated certificate gets the answer;
/// a plain-HTTP client on the same port gets none.
#[tokio::test]
async fn serve_speaks_tls_with_the_configured_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, cert_pem) = self_signed(dir.path());
    let tls = server_config("x", &cert, &key).unwrap();
    let app = axum::Router::new().route("/hello", axum::routing::get(|| async { "hello" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, app, tls, async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&cert_pem).unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let r = client
        .get(format!("https://localhost:{port}/hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "hello");
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(format!("http://localhost:{port}/hello"))
        .send()
        .await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);
    // A client that does not trust the certificate refuses the connection.
    let untrusting = reqwest::Client::new()
        .get(format!("https://localhost:{port}/hello"))
        .send()
        .await;
    assert!(untrusting.is_err());
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(15), server)
        .await
        .expect("the server stops")
        .unwrap()
        .unwrap();
}
