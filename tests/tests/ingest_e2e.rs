//! The ingest service end to end: the real `freshet-ingest` binary against the real broker, and,
//! for the write-then-search path, the real pipeline and query node. Every test owns its topic
//! (`freshet_tests::Case`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use freshet_tests::http::answer_to_head;
use freshet_tests::ingest::free_tcp_port;
use freshet_tests::query::QueryNode;
use freshet_tests::{workspace_root, Case};
use serde_json::{json, Value};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const KEY: (&str, &str) = ("X-API-Key", "secret");
/// The longest a write may take to become searchable (the first commit waits for the
/// pipeline's start-up).
const WAIT_MS: u64 = 120_000;

/// A request that must be refused: method, path, headers, body, status, `error.code` and
/// `error.class`.
type Refusal = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
    Vec<u8>,
    u16,
    &'static str,
    Option<&'static str>,
);

/// Every refusal is a JSON error with the right status and code, nothing refused is produced,
/// the keys guard every write, and the open routes answer.
#[test]
fn every_refusal_is_a_json_error_and_keys_guard_the_writes() -> Result<()> {
    let case = Case::new("ingest_refusals", 2)?;
    let svc = case.start_ingest(&[
        (
            "FRESHET_INGEST_KEYS",
            r#"[{name = "all", key = "secret", id_prefixes = ["*"], may_grant = ["*"], may_publish_public = true, may_delete = true}]"#.into(),
        ),
        ("FRESHET_INGEST_MAX_BODY_BYTES", "4096".into()),
        ("FRESHET_INGEST_MAX_BATCH_DOCUMENTS", "3".into()),
        ("FRESHET_LIMITS_MAX_TITLE_BYTES", "16".into()),
    ])?;
    let md = ("Content-Type", "text/markdown");
    let ndjson = ("Content-Type", "application/x-ndjson");
    let doc = br#"{"title":"T","text":"x"}"#.to_vec();
    #[rustfmt::skip]
    let cases: Vec<Refusal> = vec![
        ("PUT", "/v1/documents/a", vec![JSON], doc.clone(), 401, "unauthorized", None),
        ("PUT", "/v1/documents/a", vec![JSON, ("X-API-Key", "wrong")], doc.clone(), 401, "unauthorized", None),
        ("PUT", "/v1/documents/a", vec![JSON, ("Authorization", "Bearer wrong")], doc.clone(), 401, "unauthorized", None),
        ("DELETE", "/v1/documents/a", vec![], Vec::new(), 401, "unauthorized", None),
        ("POST", "/v1/documents:batch", vec![ndjson], b"{\"id\":\"a\"}".to_vec(), 401, "unauthorized", None),
        ("PUT", "/v1/documents/a", vec![JSON, KEY], b"{\"text\":".to_vec(), 400, "invalid_document", Some("malformed_json")),
        ("PUT", "/v1/documents/a", vec![JSON, KEY], br#"{"id":"b"}"#.to_vec(), 400, "invalid_document", Some("id_mismatch")),
        ("PUT", "/v1/documents/a", vec![JSON, KEY], br#"{"op":"merge"}"#.to_vec(), 400, "invalid_document", Some("unknown_op")),
        ("PUT", "/v1/documents/a", vec![JSON, KEY], br#"{"title":"a title over sixteen bytes"}"#.to_vec(), 400, "invalid_document", Some("field_too_large")),
        ("PUT", "/v1/documents/a", vec![JSON, KEY], br#"{"acl":[""]}"#.to_vec(), 400, "invalid_document", Some("invalid_field")),
        ("PUT", "/v1/documents/a", vec![JSON, KEY], br#"{"op":"delete"}"#.to_vec(), 400, "bad_request", None),
        ("PUT", "/v1/documents/a", vec![md, KEY], b"\xff\xfe".to_vec(), 400, "invalid_document", Some("invalid_utf8")),
        ("PUT", "/v1/documents/a?titel=x", vec![md, KEY], b"# A".to_vec(), 400, "bad_request", None),
        ("PUT", "/v1/documents/a?metadata=%5B1%5D", vec![md, KEY], b"# A".to_vec(), 400, "bad_request", None),
        ("PUT", "/v1/documents/a", vec![("Content-Type", "image/png"), KEY], b"png".to_vec(), 415, "unsupported_media_type", None),
        ("PUT", "/v1/documents/a", vec![KEY], b"no type".to_vec(), 415, "unsupported_media_type", None),
        ("PUT", "/v1/documents/a", vec![JSON, KEY], vec![b' '; 5000], 413, "too_large", None),
        ("POST", "/v1/documents:batch", vec![("Content-Type", "text/csv"), KEY], b"{\"id\":\"a\"}".to_vec(), 415, "unsupported_media_type", None),
        ("POST", "/v1/documents:batch", vec![ndjson, KEY], b"\n\n".to_vec(), 400, "bad_request", None),
        ("POST", "/v1/documents:batch", vec![ndjson, KEY], b"{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n{\"id\":\"d\"}\n".to_vec(), 413, "too_many_documents", None),
        ("DELETE", "/v1/documents/%FF", vec![KEY], Vec::new(), 400, "bad_request", None),
        ("GET", "/v1/documents/a", vec![KEY], Vec::new(), 405, "method_not_allowed", None),
        ("POST", "/v1/documents/a", vec![JSON, KEY], doc.clone(), 405, "method_not_allowed", None),
        ("GET", "/v1/documents/a/status", vec![KEY], Vec::new(), 404, "not_found", None),
        ("GET", "/nothing", vec![], Vec::new(), 404, "not_found", None),
    ];
    for (method, path, headers, body, status, code, class) in cases {
        let r = svc.call(method, path, &headers, &body)?;
        let v = r.json()?;
        assert_eq!(r.status, status, "{method} {path}: {}", r.body);
        assert_eq!(v["error"]["code"], code, "{method} {path}: {}", r.body);
        assert!(v["error"]["message"].is_string(), "{}", r.body);
        if let Some(class) = class {
            assert_eq!(v["error"]["class"], class, "{method} {path}: {}", r.body);
        }
    }
    // One bad line refuses the whole batch, with every bad line listed.
    let r = svc.call(
        "POST",
        "/v1/documents:batch",
        &[ndjson, KEY],
        b"{\"id\":\"ok\",\"text\":\"fine\"}\n{\"text\":\"no id\"}\n[]\n",
    )?;
    assert_eq!(r.status, 400, "{}", r.body);
    let lines: Vec<(i64, String)> = r.json()?["error"]["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|l| {
            (
                l["line"].as_i64().unwrap_or(0),
                l["class"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            (2, "missing_id".to_string()),
            (3, "malformed_json".to_string())
        ]
    );

    // Nothing refused was produced: the first records that are are at offset 0 of their
    // partitions.
    let ids = ["a", "b", "c"];
    let body: String = ids
        .iter()
        .map(|i| format!("{{\"id\":\"{i}\",\"text\":\"t\"}}\n"))
        .collect();
    let w = svc.write(
        "POST",
        "/v1/documents:batch",
        &[ndjson, KEY],
        body.as_bytes(),
    )?;
    let mut first: BTreeMap<i64, i64> = BTreeMap::new();
    for (i, r) in w["results"].as_array().expect("results").iter().enumerate() {
        assert_eq!(r["id"], ids[i]);
        let (p, o) = (
            r["partition"].as_i64().unwrap(),
            r["offset"].as_i64().unwrap(),
        );
        let e = first.entry(p).or_insert(o);
        *e = (*e).min(o);
    }
    assert!(first.values().all(|o| *o == 0), "{w}");

    for path in ["/healthz", "/readyz", "/openapi.json", "/metrics"] {
        assert_eq!(svc.call("GET", path, &[], b"")?.status, 200, "{path}");
    }
    let api = svc.call("GET", "/openapi.json", &[], b"")?.json()?;
    assert!(
        api["paths"]["/v1/documents:batch"]["post"].is_object(),
        "{api}"
    );
    let metrics = svc.call("GET", "/metrics", &[], b"")?.body;
    for line in [
        r#"freshet_ingest_requests_total{route="/v1/documents/{id}",status="401"} 4"#,
        r#"freshet_ingest_auth_rejections_total{key="none",reason="unauthorized"} 3"#,
        r#"freshet_ingest_requests_total{route="/v1/documents:batch",status="200"} 1"#,
        r#"freshet_ingest_documents_total{op="upsert"} 3"#,
        // The Kafka connector reports the service's produce calls (a series of a labelled
        // counter exists once counted).
        r#"freshet_ingest_kafka_produce_calls_total{outcome="ok"} "#,
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
    Ok(())
}

/// Each key writes within its bounds only (ids, ACL principals, public, delete); a refusal is a
/// JSON 403 and nothing of it reaches the topic; a wrong key is refused before the body is
/// read; without keys the service will not listen beyond loopback unless told to.
#[test]
fn keys_write_within_their_bounds_only() -> Result<()> {
    let case = Case::new("ingest_rules", 1)?;
    let svc = case.start_ingest(&[(
        "FRESHET_INGEST_KEYS",
        r#"[{name = "crm", key = "key-crm", id_prefixes = ["crm/"], may_grant = ["group:sales"], may_delete = true}]"#.into(),
    )])?;
    let crm = ("X-API-Key", "key-crm");
    let ndjson = ("Content-Type", "application/x-ndjson");
    for (method, path, headers, body, names) in [
        ("PUT", "/v1/documents/notes%2Fa.md", vec![JSON, crm], &br#"{"text":"x","acl":["group:sales"]}"#[..], "notes/a.md"),
        ("PUT", "/v1/documents/crm%2F1", vec![JSON, crm], br#"{"text":"x","acl":["group:hr"]}"#, "group:hr"),
        ("PUT", "/v1/documents/crm%2F1", vec![("Content-Type", "text/markdown"), crm], b"# public", "public"),
        ("DELETE", "/v1/documents/wiki%2F1", vec![crm], b"", "wiki/1"),
        ("POST", "/v1/documents:batch", vec![ndjson, crm], b"{\"id\":\"crm/1\",\"acl\":[\"group:sales\"]}\n{\"id\":\"other/2\",\"acl\":[\"group:sales\"]}\n", "line 2"),
    ] {
        let r = svc.call(method, path, &headers, body)?;
        assert_eq!(r.status, 403, "{method} {path}: {}", r.body);
        let v = r.json()?;
        assert_eq!(v["error"]["code"], "forbidden", "{v}");
        assert!(v["error"]["message"].as_str().unwrap_or("").contains(names), "{v}");
    }
    // Within its bounds it writes; the first record is at offset 0: nothing refused was produced.
    let w = svc.write(
        "PUT",
        "/v1/documents/crm%2F1",
        &[JSON, crm],
        br#"{"text":"x","acl":["group:sales"]}"#,
    )?;
    assert_eq!(w["offset"], 0, "{w}");
    svc.write("DELETE", "/v1/documents/crm%2F1", &[crm], b"")?;
    let ready = svc.call("GET", "/readyz", &[], b"")?.json()?;
    assert_eq!(ready["auth"], "keys", "{ready}");

    // A wrong key announcing a huge body it never sends: 401 at once.
    let head = answer_to_head(&svc.addr, "PUT /v1/documents/crm%2F2 HTTP/1.1\r\nHost: x\r\nX-API-Key: wrong\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");

    // No keys, beyond loopback: refuses to start, unless allowed.
    let wide = format!("0.0.0.0:{}", free_tcp_port());
    let out = case.ingest_refusing_to_start(&[("FRESHET_INGEST_LISTEN", wide.clone())])?;
    assert!(out.contains("allow_unauthenticated"), "{out}");
    let open = case.start_ingest(&[
        ("FRESHET_INGEST_LISTEN", wide),
        ("FRESHET_INGEST_ALLOW_UNAUTHENTICATED", "true".into()),
    ])?;
    let ready = open.call("GET", "/readyz", &[], b"")?.json()?;
    let warnings = ready["auth_warnings"].to_string();
    assert!(
        ready["auth"] == "none"
            && warnings.contains("no authentication")
            && warnings.contains("without TLS"),
        "{ready}"
    );
    assert!(
        open.log_tail().contains("no authentication configured"),
        "{}",
        open.log_tail()
    );
    Ok(())
}

/// With the broker unreachable, a write fails with a 503 after the producer's timeout (never a
/// 200 without an acknowledgement) and the service is not ready.
#[test]
fn a_broker_outage_is_a_503() -> Result<()> {
    let case = Case::new("ingest_outage", 1)?;
    let dead = format!("127.0.0.1:{}", free_tcp_port());
    let svc = case.start_ingest(&[
        ("FRESHET_KAFKA_BROKERS", dead),
        ("FRESHET_INGEST_PRODUCE_TIMEOUT_MS", "1500".into()),
        ("FRESHET_INGEST_READY_TIMEOUT_MS", "500".into()),
    ])?;
    let start = Instant::now();
    let r = svc.call("PUT", "/v1/documents/a", &[JSON], br#"{"text":"x"}"#)?;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()?["error"]["code"], "unavailable");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    let r = svc.call("GET", "/readyz", &[], b"")?;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()?["ready"], false);
    let metrics = svc.call("GET", "/metrics", &[], b"")?.body;
    assert!(
        metrics.contains("freshet_ingest_produce_errors_total 1"),
        "{metrics}"
    );
    Ok(())
}

fn bm25(node: &QueryNode, query: &str, principals: &[&str]) -> Result<Vec<Value>> {
    let v =
        node.retrieve(&json!({"query": query, "mode": "bm25", "k": 5, "principals": principals}))?;
    Ok(v["results"].as_array().cloned().unwrap_or_default())
}

fn ids(hits: &[Value]) -> Vec<&str> {
    hits.iter()
        .map(|h| h["doc_id"].as_str().unwrap_or(""))
        .collect()
}

/// Waits on the query node for every record `written` describes (one answer or a batch's).
fn wait_all(node: &QueryNode, written: &Value) -> Result<()> {
    let records = match written["results"].as_array() {
        Some(rs) => rs
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r["topic"] = written["topic"].clone();
                r
            })
            .collect(),
        None => vec![written.clone()],
    };
    for w in &records {
        let r = node.wait_offset(w, WAIT_MS)?;
        assert_eq!(r.status, 200, "waiting for {w}: {}", r.body);
        let v = r.json()?;
        assert!(v["committed_offset"].as_i64() > w["offset"].as_i64(), "{v}");
    }
    Ok(())
}

/// A client writes, waits for its offset on the query node, then finds what it wrote: a JSON
/// envelope, a Markdown file with an ACL, a PDF; a batch that adds and deletes; a DELETE.
#[test]
fn a_client_waits_for_its_offset_then_finds_the_document() -> Result<()> {
    let mut case = Case::new("ingest_flow", 2)?;
    case.start_pipeline()?;
    // The requests name their principals: a node behind an authenticating proxy.
    let node = case.start_query(&[("FRESHET_QUERY_TRUST_REQUEST_PRINCIPALS", "true".into())])?;
    let svc = case.start_ingest(&[])?;

    let w = svc.write(
        "PUT",
        "/v1/documents/volcano",
        &[JSON],
        json!({"title": "Volcanoes", "text": "Volcanic eruptions eject lava and ash when magma rises.", "metadata": {"lang": "en"}}).to_string().as_bytes(),
    )?;
    assert_eq!(
        (w["id"].as_str(), w["op"].as_str()),
        (Some("volcano"), Some("upsert"))
    );
    assert_eq!(w["topic"], case.kafka.topic.as_str());
    wait_all(&node, &w)?;
    assert_eq!(ids(&bm25(&node, "lava magma eruptions", &[])?), ["volcano"]);

    let w = svc.write(
        "PUT",
        "/v1/documents/notes%2Fglaciers.md?source=https%3A%2F%2Fexample.org%2Fglaciers&acl=group%3Ageo&metadata=%7B%22lang%22%3A%22en%22%7D",
        &[("Content-Type", "text/markdown; charset=utf-8")],
        b"# Glaciers\n\nGlaciers carve fjords and moraines as the ice flows downhill.\n",
    )?;
    assert_eq!(w["id"], "notes/glaciers.md");
    wait_all(&node, &w)?;
    assert!(
        bm25(&node, "glaciers fjords moraines", &[])?.is_empty(),
        "the ACL hides it"
    );
    let hits = bm25(&node, "glaciers fjords moraines", &["group:geo"])?;
    assert_eq!(ids(&hits), ["notes/glaciers.md"]);
    assert_eq!(hits[0]["title"], "Glaciers");
    assert_eq!(hits[0]["source"], "https://example.org/glaciers");

    let pdf = std::fs::read(workspace_root().join("deploy/sample/river-survey.pdf"))?;
    let w = svc.write(
        "PUT",
        "/v1/documents/survey?title=River%20Survey",
        &[("Content-Type", "application/pdf")],
        &pdf,
    )?;
    wait_all(&node, &w)?;
    let hits = bm25(&node, "snowmelt gauges peaked April", &[])?;
    assert_eq!(ids(&hits).first(), Some(&"survey"), "{hits:?}");
    assert_eq!(hits[0]["page_start"], 2, "{}", hits[0]);

    let batch = "{\"id\":\"comet\",\"title\":\"Comets\",\"text\":\"Comets are icy bodies with a glowing tail of dust.\"}\n\
                 {\"id\":\"bread\",\"text\":\"Sourdough bread rises with wild yeast.\"}\n\
                 {\"op\":\"delete\",\"id\":\"volcano\"}\n";
    let w = svc.write(
        "POST",
        "/v1/documents:batch",
        &[("Content-Type", "application/x-ndjson")],
        batch.as_bytes(),
    )?;
    assert_eq!(w["documents"], 3, "{w}");
    wait_all(&node, &w)?;
    assert_eq!(
        ids(&bm25(&node, "comets icy glowing tail", &[])?),
        ["comet"]
    );
    assert_eq!(ids(&bm25(&node, "sourdough yeast", &[])?), ["bread"]);
    assert!(
        bm25(&node, "lava magma eruptions", &[])?.is_empty(),
        "deleted by the batch"
    );

    let w = svc.write("DELETE", "/v1/documents/comet", &[], b"")?;
    assert_eq!(w["op"], "delete");
    wait_all(&node, &w)?;
    assert!(
        bm25(&node, "comets icy glowing tail", &[])?.is_empty(),
        "deleted"
    );

    // A wait for an offset not yet written times out with a JSON 504.
    let far = json!({"topic": case.kafka.topic, "partition": 0, "offset": 1_000_000});
    let r = node.wait_offset(&far, 300)?;
    assert_eq!(r.status, 504, "{}", r.body);
    assert_eq!(r.json()?["error"]["code"], "timeout");
    let r = node.get("/v1/index/wait?topic=t&partition=0")?;
    assert_eq!(r.status, 400, "{}", r.body);
    Ok(())
}
