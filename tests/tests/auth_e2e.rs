//! Authentication of the query node end to end: real pipeline, broker, Milvus and model, the
//! real `freshet-query` binary over HTTP. Keys and tokens bound to group A never see group B's
//! document, in any mode, option or endpoint; naming a principal not held is a 403; an
//! unauthenticated node serves public documents only and says so; `/metrics` behind the admin
//! key and on its own address; 429 past a key's rate and past its requests in flight; a wrong key
//! refused before its body is read; RS256 tokens verified with keys fetched from the issuer's
//! JWKS URL (beside an encryption key), with groups in a namespaced claim.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{anyhow, Result};
use freshet_tests::http::answer_to_head;
use freshet_tests::query::{pathway_doc_ids, request, QueryNode, Reply};
use freshet_tests::{free_port, workspace_root, Case};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
const VISIBLE: Duration = Duration::from_secs(30);
const MODES: [&str; 3] = ["bm25", "vector", "hybrid"];
const JWT_SECRET: &str = "auth-e2e hs256 secret";
const QUERY: &str = "quarterly revenue report forecast";

/// Three documents: public, group A's, group B's; each text names its document.
fn index_documents(case: &mut Case) -> Result<()> {
    case.start_pipeline()?;
    for (id, acl) in [
        ("public", vec![]),
        ("team-a", vec!["group:a"]),
        ("team-b", vec!["group:b"]),
    ] {
        let text = format!("Quarterly revenue report of the {id} team: revenue grew, costs fell, and the revenue forecast for next quarter is strong.");
        let doc = json!({"op": "upsert", "id": id, "title": "Revenue", "text": text,
            "content_type": "text/plain", "source": format!("test://{id}"), "metadata": {},
            "acl": acl});
        case.send_json(id, &doc)?;
    }
    case.wait_indexed(WAIT)
}

fn token(groups: Value, exp_offset: i64) -> Result<String> {
    let exp = jsonwebtoken::get_current_timestamp() as i64 + exp_offset;
    let claims = json!({"iss": "https://idp.test", "aud": "freshet", "sub": "alice",
                        "exp": exp, "groups": groups});
    Ok(encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )?)
}

fn post(node: &QueryNode, path: &str, cred: &str, body: &Value) -> Result<Reply> {
    let auth = format!("Bearer {cred}");
    let headers: Vec<(&str, &str)> = if cred.is_empty() {
        vec![]
    } else {
        vec![("Authorization", &auth)]
    };
    request(
        &node.addr,
        "POST",
        path,
        &headers,
        body.to_string().as_bytes(),
    )
}

fn get(addr: &str, path: &str, cred: &str) -> Result<Reply> {
    let key;
    let headers: Vec<(&str, &str)> = if cred.is_empty() {
        vec![]
    } else {
        key = cred.to_owned();
        vec![("X-API-Key", &key)]
    };
    request(addr, "GET", path, &headers, b"")
}

/// Document ids of a successful `/v1/retrieve`, and the packed context if any.
fn retrieve(node: &QueryNode, cred: &str, body: &Value) -> Result<(BTreeSet<String>, String)> {
    let r = post(node, "/v1/retrieve", cred, body)?;
    anyhow::ensure!(r.status == 200, "{body} → {}: {}", r.status, r.body);
    let v = r.json()?;
    let ids = v["results"]
        .as_array()
        .ok_or_else(|| anyhow!("no results: {v}"))?
        .iter()
        .map(|h| h["doc_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    Ok((ids, v["context"].as_str().unwrap_or_default().to_owned()))
}

fn pathway_ids(node: &QueryNode, cred: &str, body: &Value) -> Result<BTreeSet<String>> {
    let r = post(node, "/pathway/v1/retrieve", cred, body)?;
    anyhow::ensure!(r.status == 200, "pathway {body} → {}: {}", r.status, r.body);
    Ok(pathway_doc_ids(&r)?.into_iter().collect())
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// A 403 with the JSON error and no data.
fn assert_forbidden(r: &Reply, what: &str) -> Result<()> {
    assert_eq!(r.status, 403, "{what}: {}", r.body);
    let v = r.json()?;
    assert_eq!(v["error"]["code"], "forbidden", "{what}: {v}");
    assert!(
        v.get("results").is_none() && !r.body.contains("team-b team"),
        "{what}: {v}"
    );
    Ok(())
}

/// Chunks of the case's index visible to `principals` (public ones included).
fn visible_chunks(case: &Case, principals: &[&str]) -> Result<u64> {
    Ok(case
        .tantivy_chunks()?
        .iter()
        .filter(|c| c.acl.is_empty() || c.acl.iter().any(|a| principals.contains(&a.as_str())))
        .count() as u64)
}

/// Documents of the case's index visible to `principals` (each once, however many chunks).
fn visible_documents(case: &Case, principals: &[&str]) -> Result<u64> {
    Ok(case
        .tantivy_chunks()?
        .iter()
        .filter(|c| c.acl.is_empty() || c.acl.iter().any(|a| principals.contains(&a.as_str())))
        .map(|c| c.doc_id.clone())
        .collect::<BTreeSet<_>>()
        .len() as u64)
}

/// The document ids `/pathway/v1/inputs` lists for `cred`.
fn pathway_inputs(node: &QueryNode, cred: &str, body: &Value) -> Result<BTreeSet<String>> {
    let r = post(node, "/pathway/v1/inputs", cred, body)?;
    anyhow::ensure!(r.status == 200, "inputs {body} → {}: {}", r.status, r.body);
    Ok(r.json()?
        .as_array()
        .ok_or_else(|| anyhow::anyhow!("inputs answer is not an array: {}", r.body))?
        .iter()
        .map(|d| d["doc_id"].as_str().unwrap_or_default().to_owned())
        .collect())
}

/// A key and a token bound to group A get nothing of group B anywhere; naming B is a 403.
#[test]
fn credentials_for_group_a_never_see_group_b() -> Result<()> {
    let mut case = Case::new("auth_bound", 1)?;
    index_documents(&mut case)?;
    let admin_addr = format!("127.0.0.1:{}", free_port());
    let keys = r#"[{name = "team-a", key = "key-a", principals = ["group:a"]},
        {name = "all", key = "key-all", principals = ["group:a", "group:b"]},
        {name = "slow", key = "key-slow", principals = ["group:a"], rate_per_second = 0.2, burst = 2},
        {name = "single", key = "key-single", principals = ["group:a"], max_concurrent = 1}]"#;
    let node = case.start_query(&[
        ("FRESHET_QUERY_KEYS", keys.into()),
        ("FRESHET_QUERY_API_KEYS", r#"["legacy-key"]"#.into()),
        (
            "FRESHET_QUERY_JWT",
            r#"{issuer = "https://idp.test", audience = ["freshet"], hs256_secret_env = "AUTH_E2E_JWT_SECRET"}"#.into(),
        ),
        ("AUTH_E2E_JWT_SECRET", JWT_SECRET.into()),
        ("FRESHET_QUERY_ADMIN_KEYS", r#"["admin-key"]"#.into()),
        ("FRESHET_QUERY_ADMIN_LISTEN", admin_addr.clone()),
        ("FRESHET_QUERY_RERANK_BACKEND", "local".into()),
        (
            "FRESHET_QUERY_RERANK_MODEL_DIR",
            case.standin_reranker()?.display().to_string(),
        ),
    ])?;
    node.wait_ready(Duration::from_secs(60))?;
    // Everything is searchable for a key holding both groups.
    let deadline = std::time::Instant::now() + VISIBLE;
    let all = json!({"query": QUERY, "mode": "vector", "k": 10});
    while retrieve(&node, "key-all", &all)?.0 != set(&["public", "team-a", "team-b"]) {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "not all documents visible"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let ready = node.get("/readyz")?.json()?;
    assert_eq!(ready["auth"], "keys+jwt", "{ready}");
    assert!(
        ready["auth_warnings"]
            .to_string()
            .contains("query.api_keys"),
        "{ready}"
    );

    let jwt_a = token(json!(["a"]), 600)?;
    let of_a = set(&["public", "team-a"]);
    for cred in ["key-a", jwt_a.as_str()] {
        for mode in MODES {
            for extra in [
                json!({}),
                json!({"rerank": {"candidates": 10}}),
                json!({"expand": {"window": 2, "top_m": 10}}),
                json!({"parents": true}),
                json!({"pack": {"budget_tokens": 1000}}),
                json!({"fusion": {"method": "rrf"}}),
                json!({"filter": {}, "bm25_top_k": 1, "vector_top_k": 1, "k": 1}),
            ] {
                for (principals, expected) in [
                    (None, of_a.clone()),
                    (Some(json!(["group:a"])), of_a.clone()),
                    (Some(json!([])), set(&["public"])),
                ] {
                    let mut body = json!({"query": QUERY, "mode": mode, "k": 10});
                    for (k, v) in extra.as_object().unwrap() {
                        body[k] = v.clone();
                    }
                    if let Some(p) = &principals {
                        body["principals"] = p.clone();
                    }
                    let (got, context) = retrieve(&node, cred, &body)?;
                    assert!(!got.contains("team-b"), "{body}: {got:?}");
                    assert!(!context.contains("team-b"), "{body}: {context}");
                    if body["k"] == 1 {
                        assert_eq!(got.len(), 1, "{body}");
                        assert!(got.is_subset(&expected), "{body}: {got:?}");
                    } else {
                        assert_eq!(got, expected, "{body}");
                    }
                    // Widening is refused, alone or beside a held principal.
                    for wider in [json!(["group:b"]), json!(["group:a", "group:b"])] {
                        body["principals"] = wider;
                        assert_forbidden(
                            &post(&node, "/v1/retrieve", cred, &body)?,
                            &body.to_string(),
                        )?;
                    }
                }
            }
        }
        // The Pathway endpoint searches with all of the credential's principals.
        assert_eq!(
            pathway_ids(&node, cred, &json!({"query": QUERY, "k": 10}))?,
            of_a
        );
        let glob = json!({"query": QUERY, "k": 10, "filepath_globpattern": "test://team-*"});
        assert_eq!(pathway_ids(&node, cred, &glob)?, set(&["team-a"]));
        // Inputs list visible documents only, and so do the counts.
        assert_eq!(pathway_inputs(&node, cred, &json!({}))?, of_a);
        let filtered = json!({"metadata_filter": "contains(path, 'team')", "return_status": true});
        assert_eq!(pathway_inputs(&node, cred, &filtered)?, set(&["team-a"]));
        let stats = post(&node, "/pathway/v1/statistics", cred, &json!({}))?.json()?;
        assert_eq!(
            stats["file_count"],
            visible_documents(&case, &["group:a"])?,
            "{stats}"
        );
        let auth = format!("Bearer {cred}");
        let index = request(
            &node.addr,
            "GET",
            "/v1/index",
            &[("Authorization", &auth)],
            b"",
        )?;
        assert_eq!(
            index.json()?["chunks"],
            visible_chunks(&case, &["group:a"])?
        );
    }
    let stats = post(&node, "/pathway/v1/statistics", "key-all", &json!({}))?.json()?;
    assert_eq!(
        stats["file_count"],
        visible_documents(&case, &["group:a", "group:b"])?
    );
    assert_eq!(
        pathway_inputs(&node, "key-all", &json!({}))?,
        set(&["public", "team-a", "team-b"])
    );
    assert!(visible_chunks(&case, &["group:a"])? < visible_chunks(&case, &["group:a", "group:b"])?);

    // A bare key: public documents only; naming a group is a 403.
    let q = json!({"query": QUERY, "k": 10});
    assert_eq!(retrieve(&node, "legacy-key", &q)?.0, set(&["public"]));
    assert_eq!(pathway_ids(&node, "legacy-key", &q)?, set(&["public"]));
    assert_eq!(
        pathway_inputs(&node, "legacy-key", &json!({}))?,
        set(&["public"])
    );
    let named = json!({"query": QUERY, "principals": ["group:a"]});
    assert_forbidden(
        &post(&node, "/v1/retrieve", "legacy-key", &named)?,
        "legacy",
    )?;

    // Missing, wrong or expired credentials: 401 on every API route.
    let expired = token(json!(["a", "b"]), -600)?;
    let forged = encode(
        &Header::new(Algorithm::HS256),
        &json!({"iss": "https://idp.test", "aud": "freshet", "sub": "eve", "exp": 4_000_000_000u64, "groups": ["b"]}),
        &EncodingKey::from_secret(b"a guessed secret"),
    )?;
    for cred in ["", "key-x", "admin-key", expired.as_str(), forged.as_str()] {
        for path in [
            "/v1/retrieve",
            "/pathway/v1/retrieve",
            "/pathway/v1/statistics",
            "/pathway/v1/inputs",
        ] {
            let r = post(&node, path, cred, &q)?;
            assert_eq!(r.status, 401, "{path} {cred:.12}: {}", r.body);
            assert_eq!(r.json()?["error"]["code"], "unauthorized");
        }
        assert_eq!(get(&node.addr, "/v1/index", cred)?.status, 401);
    }

    // The credential is checked before the body is read: a wrong key announcing a huge body it
    // never sends is answered 401 at once.
    for path in ["/v1/retrieve", "/pathway/v1/retrieve"] {
        let head = answer_to_head(&node.addr, &format!("POST {path} HTTP/1.1\r\nHost: x\r\nX-API-Key: key-x\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n"))?;
        assert!(head.starts_with("HTTP/1.1 401"), "{path}: {head:?}");
    }

    // 429 past the key's rate (0.2/s, burst 2), with Retry-After; other keys unaffected.
    let bm25 = json!({"query": QUERY, "mode": "bm25"});
    for _ in 0..2 {
        assert_eq!(post(&node, "/v1/retrieve", "key-slow", &bm25)?.status, 200);
    }
    let r = post(&node, "/v1/retrieve", "key-slow", &bm25)?;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.json()?["error"]["code"], "too_many_requests");
    let wait: u64 = r
        .header("retry-after")
        .ok_or_else(|| anyhow!("no Retry-After: {}", r.head))?
        .parse()?;
    assert!((1..=5).contains(&wait), "{wait}");
    assert_eq!(post(&node, "/v1/retrieve", "key-a", &bm25)?.status, 200);

    // 429 past the key's requests in flight (1): a wait for a record never written holds the
    // key's slot for 5 s; meanwhile its next request is refused, and after it, admitted.
    let wait_path = format!(
        "/v1/index/wait?topic={}&partition=0&offset=1000000&timeout_ms=5000",
        case.kafka.topic
    );
    let addr = node.addr.clone();
    let holder = std::thread::spawn(move || get(&addr, &wait_path, "key-single"));
    std::thread::sleep(Duration::from_millis(1500));
    let refused = post(&node, "/v1/retrieve", "key-single", &bm25)?;
    let held = holder
        .join()
        .map_err(|_| anyhow!("the waiting request panicked"))??;
    assert_eq!(
        held.status, 504,
        "the wait held the slot and timed out: {}",
        held.body
    );
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(
        refused.body.contains("too many requests in flight"),
        "{}",
        refused.body
    );
    assert!(refused.header("retry-after").is_some(), "{}", refused.head);
    assert_eq!(
        post(&node, "/v1/retrieve", "key-single", &bm25)?.status,
        200
    );

    // /metrics: only on the admin address, only with the admin key.
    assert_eq!(get(&node.addr, "/metrics", "admin-key")?.status, 404);
    assert_eq!(get(&admin_addr, "/metrics", "")?.status, 401);
    assert_eq!(get(&admin_addr, "/metrics", "key-all")?.status, 401);
    let m = get(&admin_addr, "/metrics", "admin-key")?;
    assert_eq!(m.status, 200);
    assert!(
        m.body
            .contains(r#"auth_rejections_total{key="team-a",reason="forbidden"}"#),
        "{}",
        m.body
    );
    assert!(m
        .body
        .contains(r#"auth_rejections_total{key="slow",reason="rate_limited"} 1"#));
    assert!(m
        .body
        .contains(r#"auth_rejections_total{key="single",reason="concurrency_limited"}"#));
    assert!(
        !m.body.contains("key-a") && !m.body.contains("alice"),
        "no secret or subject"
    );
    assert_eq!(get(&admin_addr, "/healthz", "")?.status, 200);
    assert_eq!(get(&admin_addr, "/readyz", "")?.status, 200);
    case.stop_pipeline()?;
    Ok(())
}

/// Without keys or an issuer the node warns, says so in /readyz, and serves public documents
/// only: principals in the request are refused, not trusted.
#[test]
fn an_unauthenticated_node_serves_public_documents_only() -> Result<()> {
    let mut case = Case::new("auth_none", 1)?;
    index_documents(&mut case)?;
    let node = case.start_query(&[("FRESHET_QUERY_ADMIN_KEYS", r#"["admin-key"]"#.into())])?;
    assert!(
        node.log_tail().contains("no authentication configured"),
        "{}",
        node.log_tail()
    );
    node.wait_ready(Duration::from_secs(60))?;
    let ready = node.get("/readyz")?.json()?;
    assert_eq!(ready["auth"], "none", "{ready}");
    assert!(ready["auth_warnings"][0]
        .as_str()
        .unwrap_or("")
        .contains("no authentication"));
    let q = json!({"query": QUERY, "mode": "vector", "k": 10});
    node.wait_for(&q, VISIBLE, |ids| ids == ["public"])?;
    for mode in MODES {
        let body = json!({"query": QUERY, "mode": mode, "k": 10});
        assert_eq!(retrieve(&node, "", &body)?.0, set(&["public"]), "{mode}");
        // A credential changes nothing on such a node.
        assert_eq!(
            retrieve(&node, "key-a", &body)?.0,
            set(&["public"]),
            "{mode}"
        );
        let named = json!({"query": QUERY, "mode": mode, "principals": ["group:b"]});
        assert_forbidden(&node.post("/v1/retrieve", &named)?, mode)?;
    }
    assert_eq!(
        pathway_ids(&node, "", &json!({"query": QUERY, "k": 10}))?,
        set(&["public"])
    );
    let stats = node.post("/pathway/v1/statistics", &json!({}))?.json()?;
    assert_eq!(stats["file_count"], visible_documents(&case, &[])?);
    assert_eq!(pathway_inputs(&node, "", &json!({}))?, set(&["public"]));
    // /metrics on the API port, behind the admin key.
    assert_eq!(get(&node.addr, "/metrics", "")?.status, 401);
    assert_eq!(get(&node.addr, "/metrics", "admin-key")?.status, 200);
    case.stop_pipeline()?;
    Ok(())
}

/// Serves `body` as a JWKS document at `http://127.0.0.1:<port>/certs` from a thread, as an
/// identity provider does; returns the URL.
fn serve_jwks(body: String) -> Result<String> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}/certs", listener.local_addr()?);
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    Ok(url)
}

/// Tokens signed with a key the issuer publishes at its JWKS URL are verified and bound to
/// their groups; a token naming a key the issuer does not publish is a 401. The JWKS holds an
/// encryption key beside the signing one (as a Keycloak realm's does), and the groups are in a
/// namespaced claim whose name holds dots (as Auth0 puts them); a token without that claim
/// sees public documents only.
#[test]
fn tokens_verified_with_the_issuers_jwks_url_are_bound_to_their_groups() -> Result<()> {
    let mut case = Case::new("auth_jwks", 1)?;
    index_documents(&mut case)?;
    let pem = std::fs::read(workspace_root().join("service/tests/fixtures/jwt/rsa-private.pem"))?;
    let key = EncodingKey::from_rsa_pem(&pem)?;
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&key, Algorithm::RS256)?;
    jwk.common.key_id = Some("idp-1".into());
    let sig = serde_json::to_value(&jwk)?;
    let mut enc = sig.clone();
    enc["kid"] = json!("idp-enc");
    enc["alg"] = json!("RSA-OAEP");
    enc["use"] = json!("enc");
    let url = serve_jwks(json!({"keys": [enc, sig]}).to_string())?;
    let node = case.start_query(&[(
        "FRESHET_QUERY_JWT",
        format!(
            r#"{{issuer = "https://idp.test", audience = ["freshet"], jwks_url = "{url}", groups_claim = "https://freshet.test/groups"}}"#
        ),
    )])?;
    node.wait_ready(Duration::from_secs(60))?;
    let ready = node.get("/readyz")?.json()?;
    assert_eq!(
        (&ready["auth"], &ready["jwks"]),
        (&json!("jwt"), &json!("ok"))
    );
    let rs256 = |kid: &str, groups: Value| -> Result<String> {
        let mut claims = json!({"iss": "https://idp.test", "aud": "freshet", "sub": "bob",
            "exp": jsonwebtoken::get_current_timestamp() + 600});
        if !groups.is_null() {
            claims["https://freshet.test/groups"] = groups;
        }
        let header = Header {
            kid: Some(kid.into()),
            ..Header::new(Algorithm::RS256)
        };
        Ok(encode(&header, &claims, &key)?)
    };
    let jwt_a = rs256("idp-1", json!(["a"]))?;
    let deadline = std::time::Instant::now() + VISIBLE;
    for mode in MODES {
        let body = json!({"query": QUERY, "mode": mode, "k": 10});
        loop {
            let (ids, _) = retrieve(&node, &jwt_a, &body)?;
            assert!(!ids.contains("team-b"), "{mode}: {ids:?}");
            if ids == set(&["public", "team-a"]) {
                break;
            }
            anyhow::ensure!(std::time::Instant::now() < deadline, "{mode}: {ids:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let b = json!({"query": QUERY, "mode": mode, "principals": ["group:b"]});
        assert_forbidden(&post(&node, "/v1/retrieve", &jwt_a, &b)?, mode)?;
    }
    let no_groups = rs256("idp-1", Value::Null)?;
    let q = json!({"query": QUERY, "mode": "bm25", "k": 10});
    assert_eq!(retrieve(&node, &no_groups, &q)?.0, set(&["public"]));
    let unknown = rs256("idp-2", json!(["a", "b"]))?;
    let r = post(&node, "/v1/retrieve", &unknown, &json!({"query": QUERY}))?;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.body.contains("idp-2"), "{}", r.body);
    Ok(())
}
