//! The router without a broker: a fake [`Publisher`] records what would be produced, or fails
//! like an unreachable broker.

use std::sync::Mutex;

use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

use super::*;
use freshet_kafka::Produce;

#[derive(Default)]
struct Fake {
    sent: Mutex<Vec<DocumentRecord>>,
    down: bool,
}

impl Produce for Fake {
    fn topic(&self) -> &str {
        "docs"
    }
    fn produce(&self, records: &[DocumentRecord]) -> freshet_kafka::Result<Vec<Placed>> {
        if self.down {
            return Err(freshet_kafka::Error::Fatal("broker down".into()));
        }
        let mut sent = self.sent.lock().unwrap();
        let mut out = Vec::new();
        for r in records {
            out.push(Placed {
                partition: 0,
                offset: sent.len() as i64,
            });
            sent.push(r.clone());
        }
        Ok(out)
    }
}

impl Publisher for Fake {
    fn ready(&self) -> Result<(), String> {
        if self.down {
            Err("broker down".into())
        } else {
            Ok(())
        }
    }
}

fn app_with(fake: Arc<Fake>, env: &[(&str, &str)]) -> Router {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = Config::load_with_env(None, &env).unwrap();
    router(App::with_env(config, fake, &|_| None).unwrap())
}

async fn call(
    router: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = router
        .clone()
        .oneshot(req.body(Body::from(body.to_vec())).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, v)
}

const JSON: (&str, &str) = ("content-type", "application/json");

/// Method, URI, headers, body, expected status and error code.
type Case = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
    Vec<u8>,
    u16,
    &'static str,
);

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn put_an_envelope_answers_where_it_was_written() {
    let fake = Arc::new(Fake::default());
    let r = app_with(fake.clone(), &[]);
    let body = br#"{"title":"T","text":"hello"}"#;
    let (s, v) = call(&r, "PUT", "/v1/documents/a%2Fb", &[JSON], body).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v,
        json!({"id": "a/b", "op": "upsert", "topic": "docs", "partition": 0, "offset": 0})
    );
    let sent = fake.sent.lock().unwrap();
    assert_eq!(sent[0].id, "a/b");
    assert_eq!(sent[0].value.as_deref(), Some(&body[..]));
}

#[tokio::test]
async fn put_a_file_and_delete() {
    let fake = Arc::new(Fake::default());
    let r = app_with(fake.clone(), &[]);
    let (s, v) = call(
        &r,
        "PUT",
        "/v1/documents/readme?source=https%3A%2F%2Fx&acl=group%3Aa",
        &[("content-type", "text/markdown")],
        b"# Readme\n\ntext",
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = call(&r, "DELETE", "/v1/documents/readme", &[], b"").await;
    assert_eq!(
        (s, v["op"].as_str(), v["offset"].as_i64()),
        (200, Some("delete"), Some(1))
    );
    let sent = fake.sent.lock().unwrap();
    let doc: Value = serde_json::from_slice(sent[0].value.as_deref().unwrap()).unwrap();
    assert_eq!(doc["title"], "Readme");
    assert_eq!(doc["source"], "https://x");
    assert_eq!(doc["acl"], json!(["group:a"]));
    assert_eq!((sent[1].id.as_str(), &sent[1].value), ("readme", &None));
}

#[tokio::test]
async fn every_malformed_input_is_a_json_4xx_and_nothing_is_produced() {
    let fake = Arc::new(Fake::default());
    let r = app_with(fake.clone(), &[("FRESHET_INGEST_MAX_BODY_BYTES", "100")]);
    let cases: Vec<Case> = vec![
        (
            "PUT",
            "/v1/documents/a",
            vec![JSON],
            b"{".to_vec(),
            400,
            "invalid_document",
        ),
        (
            "PUT",
            "/v1/documents/a",
            vec![JSON],
            br#"{"id":"b"}"#.to_vec(),
            400,
            "invalid_document",
        ),
        (
            "PUT",
            "/v1/documents/a",
            vec![JSON],
            br#"{"op":"delete"}"#.to_vec(),
            400,
            "bad_request",
        ),
        (
            "PUT",
            "/v1/documents/a?title=x",
            vec![JSON],
            b"{}".to_vec(),
            400,
            "bad_request",
        ),
        (
            "PUT",
            "/v1/documents/a?bogus=1",
            vec![("content-type", "text/plain")],
            b"x".to_vec(),
            400,
            "bad_request",
        ),
        (
            "PUT",
            "/v1/documents/a",
            vec![("content-type", "image/png")],
            b"x".to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            "PUT",
            "/v1/documents/a",
            vec![],
            b"x".to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            "PUT",
            "/v1/documents/a",
            vec![JSON],
            vec![b' '; 101],
            413,
            "too_large",
        ),
        (
            "POST",
            "/v1/documents:batch",
            vec![("content-type", "text/csv")],
            b"{}".to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/v1/documents:batch",
            vec![],
            b"\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            "POST",
            "/v1/documents:batch",
            vec![],
            b"{\"id\":\"a\"}\n[1]\n".to_vec(),
            400,
            "invalid_batch",
        ),
        (
            "GET",
            "/v1/documents/a",
            vec![],
            Vec::new(),
            405,
            "method_not_allowed",
        ),
        ("POST", "/v1/nothing", vec![], Vec::new(), 404, "not_found"),
    ];
    for (method, uri, headers, body, status, want) in cases {
        let (s, v) = call(&r, method, uri, &headers, &body).await;
        assert_eq!((s, code(&v)), (status, want), "{method} {uri}: {v}");
        assert!(v["error"]["message"].is_string(), "{v}");
    }
    let (_, v) = call(&r, "PUT", "/v1/documents/a", &[JSON], br#"{"id":"b"}"#).await;
    assert_eq!(v["error"]["class"], "id_mismatch");
    let (_, v) = call(
        &r,
        "POST",
        "/v1/documents:batch",
        &[],
        b"{\"id\":\"a\"}\n[1]\n",
    )
    .await;
    assert_eq!(
        v["error"]["lines"],
        json!([{"line": 2, "class": "malformed_json", "message": "record value is not a JSON object: expected an object, found an array"}])
    );
    assert!(fake.sent.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_batch_answers_per_line_and_is_limited() {
    let fake = Arc::new(Fake::default());
    let r = app_with(fake.clone(), &[("FRESHET_INGEST_MAX_BATCH_DOCUMENTS", "2")]);
    let body = b"{\"id\":\"a\",\"text\":\"x\"}\n\n{\"op\":\"delete\",\"id\":\"b\"}\n";
    let (s, v) = call(
        &r,
        "POST",
        "/v1/documents:batch",
        &[("content-type", "application/x-ndjson")],
        body,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["documents"], 2);
    assert_eq!(
        v["results"],
        json!([
            {"line": 1, "id": "a", "op": "upsert", "partition": 0, "offset": 0},
            {"line": 3, "id": "b", "op": "delete", "partition": 0, "offset": 1}
        ])
    );
    let three = b"{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n";
    let (s, v) = call(&r, "POST", "/v1/documents:batch", &[], three).await;
    assert_eq!((s, code(&v)), (413, "too_many_documents"), "{v}");
}

const KEYS: &str = r#"[
    {name = "crm", key = "key-crm", id_prefixes = ["crm/"], may_grant = ["group:sales"], may_delete = true},
    {name = "kb", key = "key-kb", id_prefixes = ["kb/"], may_publish_public = true},
    {name = "slow", key = "key-slow", id_prefixes = ["kb/"], may_publish_public = true, burst = 1, rate_per_second = 0.001},
]"#;

#[tokio::test]
async fn keys_guard_the_v1_routes_only() {
    let fake = Arc::new(Fake::default());
    let r = app_with(fake.clone(), &[("FRESHET_INGEST_KEYS", KEYS)]);
    let body = br#"{"text":"x","acl":["group:sales"]}"#;
    for (method, uri, headers) in [
        ("PUT", "/v1/documents/crm%2F1", vec![JSON]),
        (
            "PUT",
            "/v1/documents/crm%2F1",
            vec![JSON, ("x-api-key", "nope")],
        ),
        (
            "DELETE",
            "/v1/documents/crm%2F1",
            vec![("authorization", "Bearer k3")],
        ),
        ("POST", "/v1/documents:batch", vec![]),
        // One credential: two headers are refused even when both are right.
        (
            "PUT",
            "/v1/documents/crm%2F1",
            vec![
                JSON,
                ("x-api-key", "key-crm"),
                ("authorization", "Bearer key-crm"),
            ],
        ),
        (
            "PUT",
            "/v1/documents/crm%2F1",
            vec![JSON, ("authorization", "Basic key-crm")],
        ),
    ] {
        let (s, v) = call(&r, method, uri, &headers, body).await;
        assert_eq!(
            (s, code(&v)),
            (401, "unauthorized"),
            "{method} {uri} {headers:?}: {v}"
        );
    }
    let (s, v) = call(
        &r,
        "PUT",
        "/v1/documents/crm%2F1",
        &[JSON, ("x-api-key", "key-crm")],
        body,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let (s, _) = call(
        &r,
        "DELETE",
        "/v1/documents/crm%2F1",
        &[("authorization", "Bearer key-crm")],
        b"",
    )
    .await;
    assert_eq!(s, 200);
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        let (s, _) = call(&r, "GET", path, &[], b"").await;
        assert_eq!(s, 200, "{path}");
    }
    let (_, v) = call(&r, "GET", "/readyz", &[], b"").await;
    assert_eq!(
        (&v["auth"], &v["auth_warnings"]),
        (&json!("keys"), &json!([])),
        "{v}"
    );
    // The key's limit: one request, then 429 with Retry-After.
    let kb = [JSON, ("x-api-key", "key-slow")];
    let (s, v) = call(&r, "PUT", "/v1/documents/kb%2F1", &kb, br#"{"text":"x"}"#).await;
    assert_eq!(s, 200, "{v}");
    let resp = r
        .clone()
        .oneshot(
            Request::put("/v1/documents/kb%2F1")
                .header("x-api-key", "key-slow")
                .header("content-type", "application/json")
                .body(Body::from(&br#"{"text":"x"}"#[..]))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().get("retry-after").is_some());
    assert_eq!(fake.sent.lock().unwrap().len(), 3);
}

/// Method, URI, headers, body, and what the 403's message names.
type Refused = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
    &'static [u8],
    &'static str,
);

/// Every write path applies the writer's rules; a refusal is a JSON 403 naming what is not
/// allowed, and nothing of the request is produced.
#[tokio::test]
async fn every_write_path_is_held_to_the_writers_rules() {
    let fake = Arc::new(Fake::default());
    let r = app_with(fake.clone(), &[("FRESHET_INGEST_KEYS", KEYS)]);
    let crm = ("x-api-key", "key-crm");
    let ndjson = ("content-type", "application/x-ndjson");
    let md = ("content-type", "text/markdown");
    #[rustfmt::skip]
    let refused: Vec<Refused> = vec![
        // Outside its prefixes: the folder watcher's ids, another key's.
        ("PUT", "/v1/documents/notes%2Fa.md", vec![JSON, crm], br#"{"text":"x","acl":["group:sales"]}"#, "\"notes/a.md\""),
        ("PUT", "/v1/documents/kb%2F1?acl=group%3Asales", vec![md, crm], b"# x", "\"kb/1\""),
        ("DELETE", "/v1/documents/kb%2F1", vec![crm], b"", "\"kb/1\""),
        // A principal it may not grant, in an envelope or an upload's query string.
        ("PUT", "/v1/documents/crm%2F1", vec![JSON, crm], br#"{"text":"x","acl":["group:sales","group:hr"]}"#, "group:hr"),
        ("PUT", "/v1/documents/crm%2F1?acl=group%3Aexec", vec![md, crm], b"# x", "group:exec"),
        // No acl, or public said so: a public document, which it may not publish.
        ("PUT", "/v1/documents/crm%2F1", vec![JSON, crm], br#"{"text":"x"}"#, "public"),
        ("PUT", "/v1/documents/crm%2F1", vec![md, crm], b"# x", "public"),
        ("PUT", "/v1/documents/crm%2F1", vec![JSON, crm], br#"{"text":"x","acl":"public"}"#, "public"),
        ("PUT", "/v1/documents/crm%2F1?public=true", vec![md, crm], b"# x", "public"),
        // A batch: one line out of bounds refuses all of it.
        ("POST", "/v1/documents:batch", vec![ndjson, crm],
         b"{\"id\":\"crm/1\",\"text\":\"a\",\"acl\":[\"group:sales\"]}\n{\"op\":\"delete\",\"id\":\"kb/9\"}\n", "line 2"),
        ("PUT", "/v1/documents/kb%2F2", vec![JSON, ("x-api-key", "key-kb")], br#"{"text":"x","acl":["group:sales"]}"#, "group:sales"),
        ("DELETE", "/v1/documents/kb%2F2", vec![("x-api-key", "key-kb")], b"", "may not delete"),
    ];
    for (method, uri, headers, body, names) in refused {
        let (s, v) = call(&r, method, uri, &headers, body).await;
        assert_eq!((s, code(&v)), (403, "forbidden"), "{method} {uri}: {v}");
        let m = v["error"]["message"].as_str().unwrap_or("");
        assert!(m.contains(names), "{method} {uri}: {m}");
    }
    assert!(
        fake.sent.lock().unwrap().is_empty(),
        "nothing refused is produced"
    );
    let (_, v) = call(
        &r,
        "POST",
        "/v1/documents:batch",
        &[ndjson, crm],
        b"{\"id\":\"kb/1\",\"acl\":[\"group:sales\"]}\n{\"id\":\"crm/2\",\"acl\":[\"group:sales\"]}\n{\"id\":\"crm/3\"}\n",
    )
    .await;
    let lines: Vec<i64> = v["error"]["lines"]
        .as_array()
        .map(|l| l.iter().filter_map(|l| l["line"].as_i64()).collect())
        .unwrap_or_default();
    assert_eq!(lines, [1, 3], "{v}");
    // Inside its bounds every path writes.
    for (method, uri, headers, body) in [
        (
            "PUT",
            "/v1/documents/crm%2F1",
            vec![JSON, crm],
            &br#"{"text":"x","acl":["group:sales"]}"#[..],
        ),
        (
            "PUT",
            "/v1/documents/crm%2F2?acl=group%3Asales",
            vec![md, crm],
            b"# x",
        ),
        (
            "POST",
            "/v1/documents:batch",
            vec![ndjson, crm],
            b"{\"id\":\"crm/3\",\"acl\":[\"group:sales\"]}\n{\"op\":\"delete\",\"id\":\"crm/1\"}\n",
        ),
        ("DELETE", "/v1/documents/crm%2F2", vec![crm], b""),
    ] {
        let (s, v) = call(&r, method, uri, &headers, body).await;
        assert_eq!(s, 200, "{method} {uri}: {v}");
    }
    assert_eq!(fake.sent.lock().unwrap().len(), 5);
    let (_, v) = call(&r, "GET", "/metrics", &[], b"").await;
    assert!(
        v.as_str()
            .unwrap()
            .contains(r#"freshet_ingest_auth_rejections_total{key="crm",reason="forbidden"} 11"#),
        "{v}"
    );
}

/// The credential is checked before the body is read: a wrong key with a body that never ends
/// (or a huge announced one) is answered 401 at once.
#[tokio::test]
async fn credentials_are_checked_before_the_body_is_read() {
    let fake = Arc::new(Fake::default());
    let r = app_with(fake.clone(), &[("FRESHET_INGEST_KEYS", KEYS)]);
    for (method, uri) in [
        ("PUT", "/v1/documents/crm%2F1"),
        ("POST", "/v1/documents:batch"),
    ] {
        let endless = futures_util::stream::pending::<Result<Bytes, std::io::Error>>();
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("x-api-key", "wrong")
            .header("content-type", "application/json")
            .header("content-length", "1000000")
            .body(Body::from_stream(endless))
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(5), r.clone().oneshot(req))
            .await
            .expect("answered without reading the body")
            .unwrap();
        assert_eq!(resp.status(), 401, "{method} {uri}");
    }
    assert!(fake.sent.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_unauthenticated_service_says_so_in_readyz() {
    let r = app_with(Arc::new(Fake::default()), &[]);
    let (s, v) = call(&r, "GET", "/readyz", &[], b"").await;
    assert_eq!((s, &v["auth"]), (200, &json!("none")), "{v}");
    assert!(v["auth_warnings"][0]
        .as_str()
        .unwrap_or("")
        .contains("no authentication"));
}

#[tokio::test]
async fn a_broker_outage_is_a_503_and_not_ready() {
    let fake = Arc::new(Fake {
        down: true,
        ..Fake::default()
    });
    let r = app_with(fake, &[]);
    let (s, v) = call(&r, "PUT", "/v1/documents/a", &[JSON], br#"{"text":"x"}"#).await;
    assert_eq!((s, code(&v)), (503, "unavailable"), "{v}");
    let (s, v) = call(&r, "POST", "/v1/documents:batch", &[], b"{\"id\":\"a\"}").await;
    assert_eq!((s, code(&v)), (503, "unavailable"), "{v}");
    let (s, v) = call(&r, "GET", "/readyz", &[], b"").await;
    assert_eq!((s, &v["ready"]), (503, &json!(false)));
    let (_, v) = call(&r, "GET", "/metrics", &[], b"").await;
    let text = v.as_str().unwrap();
    assert!(
        text.contains("freshet_ingest_produce_errors_total 2"),
        "{text}"
    );
    assert!(
        text.contains(
            r#"freshet_ingest_requests_total{route="/v1/documents/{id}",status="503"} 1"#
        ),
        "{text}"
    );
}

#[tokio::test]
async fn every_documented_route_is_routed() {
    let r = app_with(Arc::new(Fake::default()), &[]);
    for (path, method) in crate::openapi::ROUTES {
        let uri = path.replace("{id}", "x");
        let (s, v) = call(&r, &method.to_uppercase(), &uri, &[], b"").await;
        assert!(s != 404 && s != 405, "{method} {path}: {s} {v}");
    }
    let (_, v) = call(&r, "GET", "/metrics", &[], b"").await;
    assert!(v
        .as_str()
        .unwrap()
        .contains(r#"route="/openapi.json",status="200""#));
}

/// A misspelt ACL key is a 400 with the decoder's class; under `[limits] require_acl` so is a
/// document that states no ACL, in every form a write takes, and nothing is produced;
/// `"acl": "public"` and `public=true` are written.
#[tokio::test]
async fn acl_mistakes_are_400s_with_their_class() {
    let fake = Arc::new(Fake::default());
    let r = app_with(fake.clone(), &[("FRESHET_LIMITS_REQUIRE_ACL", "true")]);
    let class = |v: &Value| v["error"]["class"].as_str().unwrap_or("").to_owned();
    let text = ("content-type", "text/plain");
    let refused: [((&str, &str), &[u8], &str); 4] = [
        (JSON, br#"{"text":"x","ACL":["group:hr"]}"#, "invalid_field"),
        (JSON, br#"{"text":"x"}"#, "missing_acl"),
        (JSON, br#"{"text":"x","acl":[]}"#, "missing_acl"),
        (text, b"x", "missing_acl"),
    ];
    for (header, body, want) in refused {
        let (s, v) = call(&r, "PUT", "/v1/documents/a", &[header], body).await;
        assert_eq!(
            (s, code(&v), class(&v).as_str()),
            (400, "invalid_document", want),
            "{v}"
        );
    }
    let ndjson = ("content-type", "application/x-ndjson");
    let batch = b"{\"id\":\"a\",\"acl\":\"public\"}\n{\"id\":\"b\",\"permissions\":[\"g\"]}\n";
    let (s, v) = call(&r, "POST", "/v1/documents:batch", &[ndjson], batch).await;
    assert_eq!((s, code(&v)), (400, "invalid_batch"), "{v}");
    assert_eq!(v["error"]["lines"][0]["class"], "invalid_field", "{v}");
    assert!(fake.sent.lock().unwrap().is_empty());

    let (s, v) = call(
        &r,
        "PUT",
        "/v1/documents/p",
        &[JSON],
        br#"{"text":"x","acl":"public"}"#,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = call(
        &r,
        "PUT",
        "/v1/documents/q?public=true",
        &[("content-type", "text/plain")],
        b"x",
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let sent = fake.sent.lock().unwrap();
    let doc: Value = serde_json::from_slice(sent[1].value.as_deref().unwrap()).unwrap();
    assert_eq!(doc["acl"], "public");
}
