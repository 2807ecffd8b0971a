//! The query node end to end: real pipeline, broker, Milvus and model, the real `freshet-query`
//! binary over HTTP. Every test owns its topic, collection and index (`freshet_tests::Case`).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use freshet_operators::chunk::ChunkKind;
use freshet_tests::proxy::{host_port, TcpProxy};
use freshet_tests::query::{request, QueryNode};
use freshet_tests::{Case, RIVER_WORDS};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
const VISIBLE: Duration = Duration::from_secs(30);
const MODES: [&str; 3] = ["bm25", "vector", "hybrid"];

fn doc(id: &str, title: &str, text: &str, meta: Value, acl: &[&str]) -> Value {
    json!({"op": "upsert", "id": id, "title": title, "text": text, "content_type": "text/plain",
           "source": format!("test://{id}"), "metadata": meta, "acl": acl})
}

fn results(v: &Value) -> &Vec<Value> {
    v["results"].as_array().expect("results array")
}

/// Publish before the node can see an index → ready without restart; every route finds the
/// document; updates replace text; deletes are never returned again; filters on both routes;
/// query syntax is plain text; bad requests get 4xx JSON; Pathway shape; metrics.
#[test]
fn publish_update_delete_through_every_route() -> Result<()> {
    let mut case = Case::new("query_lifecycle", 2)?;
    let node = case.start_query(&[])?;
    // No index yet: not ready, and retrieval says why with a 503.
    let r = node.get("/readyz")?;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()?["ready"], false);
    let r = node.post("/v1/retrieve", &json!({"query": "lava"}))?;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()?["error"]["code"], "unavailable");
    assert_eq!(node.get("/v1/index")?.status, 503);

    case.start_pipeline()?;
    let docs = [
        doc("volcano", "Volcanoes", "Volcanic eruptions eject lava, ash and gases when magma rises from chambers beneath the crust.", json!({"lang": "en", "year": 2020}), &[]),
        doc("bread", "Baking", "Sourdough bread rises because wild yeast and lactic acid bacteria ferment the dough overnight.", json!({"lang": "en", "year": 2021}), &[]),
        doc("comet", "Comets", "Comets are icy bodies that release gas and dust, forming a glowing tail as they approach the Sun.", json!({"lang": "fr", "year": 2020}), &[]),
        doc("dumpling", "饺子", "饺子是一种传统的中国食物，通常在春节期间和家人一起包饺子、吃饺子。", json!({"lang": "zh", "year": 2019}), &[]),
    ];
    for d in &docs {
        case.send_json(d["id"].as_str().unwrap(), d)?;
    }
    case.wait_indexed(WAIT)?;
    node.wait_ready(Duration::from_secs(60))?;
    // The pipeline counts the corpus by language: one chunk in four is Chinese, which the
    // English-only model does not cover. The count follows the commit's bookkeeping, which may
    // come a moment after the index shows the commit.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut m = case.metrics()?;
    while !m.contains_key("freshet_pipeline_corpus_chunks{language=\"zh\"}")
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(200));
        m = case.metrics()?;
    }
    assert_eq!(
        m.get("freshet_pipeline_corpus_chunks{language=\"zh\"}"),
        Some(&1.0),
        "{m:?}"
    );
    assert_eq!(
        m.get("freshet_pipeline_corpus_uncovered_share"),
        Some(&0.25),
        "{m:?}"
    );

    let lava = "volcanic eruption with lava and magma";
    for mode in MODES {
        let ids = node.wait_for(
            &json!({"query": lava, "mode": mode, "k": 3}),
            VISIBLE,
            |ids| ids.first().is_some_and(|d| d == "volcano"),
        )?;
        assert!(!ids.is_empty(), "{mode}");
    }
    // The node says which commit it serves: the offsets of the pipeline's last commit.
    let served = node.get("/v1/index")?.json()?;
    let committed = freshet_tantivy::ChunkIndexReader::open(case.tantivy_path())?
        .last_payload()?
        .expect("a commit");
    let topic = &case.kafka.topic;
    for (p, next) in &committed.offsets[topic] {
        assert_eq!(served["offsets"][topic][p.to_string()], *next, "{served}");
    }
    assert!(served["chunks"].as_u64().unwrap_or(0) >= 4, "{served}");
    // Chinese text is searched with the Chinese analyzer (jieba words, not character runs).
    let ids = node.doc_ids(&json!({"query": "春节吃饺子", "mode": "bm25", "k": 3}))?;
    assert_eq!(ids, ["dumpling"]);
    // The same query in hybrid mode, with the English-only model (its freshet-model.json says
    // so): the vector route is left out, and the response says why.
    let v = node.retrieve(&json!({"query": "春节吃饺子", "k": 3}))?;
    assert_eq!(
        v["language"],
        json!({"language": "zh", "detected_by": "script", "model_covers": false}),
        "{v}"
    );
    assert_eq!(v["left_out"][0]["route"], "vector", "{v}");
    assert!(v["timings_ms"].get("embed").is_none(), "{v}");
    assert_eq!(results(&v)[0]["doc_id"], "dumpling");
    assert!(
        results(&v).iter().all(|h| h["scores"]["vector"].is_null()),
        "{v}"
    );
    // Asked for both routes, it runs both.
    let v = node.retrieve(&json!({"query": "春节吃饺子", "k": 3, "language_routing": "all"}))?;
    assert!(v.get("left_out").is_none(), "{v}");
    assert!(
        results(&v).iter().any(|h| !h["scores"]["vector"].is_null()),
        "{v}"
    );
    let metrics = node.get("/metrics")?.body;
    assert!(
        metrics.contains(
            "freshet_query_routes_left_out_total{route=\"vector\",reason=\"language\"} 1"
        ),
        "{metrics}"
    );
    let v = node.retrieve(&json!({"query": lava, "k": 3}))?;
    assert_eq!(v["language"]["model_covers"], true, "{v}");
    assert!(v.get("left_out").is_none(), "{v}");
    let top = &results(&v)[0];
    assert_eq!(top["rank"], 1);
    assert_eq!(top["scores"]["bm25"]["rank"], 1, "{top}");
    assert_eq!(top["scores"]["vector"]["rank"], 1, "{top}");
    assert_eq!(top["scores"]["fused"]["rank"], 1, "{top}");
    assert!(top["text"].as_str().unwrap().contains("magma"));
    assert_eq!(top["title"], "Volcanoes");
    assert_eq!(top["source"], "test://volcano");
    assert_eq!(top["metadata"]["year"], 2020);
    // Weighted fusion (the default, 0.5 / 0.5 of min-max normalised scores): rank 1 in both
    // routes is the maximum of both, 1.0.
    let fused = top["score"].as_f64().unwrap();
    assert!((fused - 1.0).abs() < 1e-6, "{fused}");
    // RRF k=60 when asked: rank 1 in both routes.
    let v = node.retrieve(&json!({"query": lava, "k": 3, "fusion": {"method": "rrf"}}))?;
    let rrf = results(&v)[0]["score"].as_f64().unwrap();
    assert!((rrf - 2.0 / 61.0).abs() < 1e-6, "{rrf}");
    for stage in ["bm25", "vector", "embed", "fusion", "total"] {
        assert!(
            v["timings_ms"][stage].as_f64().is_some(),
            "timing {stage}: {v}"
        );
    }
    assert!(v["index"]["epoch"].as_u64().unwrap() > 0);

    // Filters apply inside both routes: only the matching document can come back, even for a
    // query that matches another one better (every document shares a term with it).
    let lava = "volcanic lava magma gases with dough under the sun";
    for mode in MODES {
        let ids = node.doc_ids(&json!({"query": lava, "mode": mode, "filter": {"lang": "fr"}}))?;
        assert_eq!(ids, ["comet"], "{mode}");
        let ids = node.doc_ids(
            &json!({"query": lava, "mode": mode, "filter": {"year": {"in": [2021, 1999]}}}),
        )?;
        assert_eq!(ids, ["bread"], "{mode}");
        // A long list (up to the 256 the node accepts) with mixed value types: Milvus 2.3.5 once
        // failed such a vector search, and the node answered 503.
        let mut years: Vec<serde_json::Value> = (1700..1954).map(|y| json!(y)).collect();
        years.push(json!(2021));
        years.push(json!("2020"));
        let ids =
            node.doc_ids(&json!({"query": lava, "mode": mode, "filter": {"year": {"in": years}}}))?;
        assert_eq!(ids, ["bread"], "{mode}");
        let ids = node.doc_ids(
            &json!({"query": lava, "mode": mode, "filter": {"lang": {"in": ["en"]}, "year": 2020}}),
        )?;
        assert_eq!(ids, ["volcano"], "{mode}");
        let ids = node.doc_ids(&json!({"query": lava, "mode": mode, "filter": {"lang": "de"}}))?;
        assert!(ids.is_empty(), "{mode}");
    }

    // Query syntax is plain text.
    for q in [
        "alpha (+)- thalassemia",
        "\"unbalanced",
        "AND OR NOT",
        "*:*",
        "title:lava^2 [a TO b] ~ \\ {}",
        "+-+-",
        "熔岩 火山",
    ] {
        for mode in MODES {
            let r = node.post("/v1/retrieve", &json!({"query": q, "mode": mode}))?;
            assert_eq!(r.status, 200, "{q:?} {mode}: {}", r.body);
        }
    }

    // Update: the old text disappears from both routes, the new one is found.
    let glacier = "Glaciers carve deep valleys as slow rivers of ice flow downhill.";
    case.send_json(
        "volcano",
        &doc(
            "volcano",
            "Volcanoes",
            glacier,
            json!({"lang": "en", "year": 2020}),
            &[],
        ),
    )?;
    for mode in MODES {
        node.wait_for(
            &json!({"query": "glacier ice carving valleys", "mode": mode, "k": 3}),
            VISIBLE,
            |ids| ids.first().is_some_and(|d| d == "volcano"),
        )?;
    }
    for mode in MODES {
        let v = node.retrieve(&json!({"query": lava, "mode": mode, "k": 10}))?;
        for h in results(&v) {
            assert!(
                !h["text"].as_str().unwrap().contains("magma"),
                "old text returned by {mode}: {h}"
            );
        }
    }
    let ids = node.doc_ids(&json!({"query": "lava magma", "mode": "bm25"}))?;
    assert!(!ids.contains(&"volcano".to_string()), "{ids:?}");

    // Delete (tombstone): never returned again, by any route.
    case.send("bread", None)?;
    let q = json!({"query": "sourdough bread yeast", "mode": "bm25"});
    node.wait_for(&q, VISIBLE, |ids| !ids.contains(&"bread".to_string()))?;
    for _ in 0..3 {
        for mode in MODES {
            let ids = node.doc_ids(&json!({"query": "sourdough bread yeast", "mode": mode}))?;
            assert!(!ids.contains(&"bread".to_string()), "{mode}: {ids:?}");
        }
    }

    // A Milvus row tantivy does not have (a Milvus write landed, its tantivy commit did not) is
    // never returned and takes no rank, whatever options ask for more candidates: here it is
    // the vector route's best hit.
    let comet_q = "icy comets release gas and dust near the sun";
    let comet = case
        .tantivy_chunks()?
        .into_iter()
        .find(|c| c.doc_id == "comet")
        .context("the comet chunk")?;
    let mut ghost = comet.clone();
    ghost.doc_id = "ghost".into();
    ghost.text = "a chunk only Milvus has".into();
    ghost.chunk_id = freshet_operators::chunk::chunk_id("ghost", ChunkKind::Leaf, &ghost.text, 0);
    let model =
        freshet_embedding::EmbeddingConfig::for_model_dir(freshet_tests::env("FRESHET_MODEL_DIR"));
    let qv = freshet_embedding::FastEmbedder::load(&model)?.embed_query(comet_q)?;
    case.milvus_upsert(vec![(ghost.clone(), qv.clone())])?;
    let direct = case.milvus_search(qv, 3)?;
    assert_eq!(direct[0].0, ghost.chunk_id, "{direct:?}");
    for extra in [
        json!({"mode": "vector"}),
        json!({"mode": "hybrid"}),
        json!({"mode": "vector", "k": 1}),
        json!({"mode": "hybrid", "expand": {"window": 1, "top_m": 3}}),
        json!({"mode": "vector", "parents": true}),
    ] {
        let mut body = json!({"query": comet_q, "k": 3});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let v = node.retrieve(&body)?;
        let hits = results(&v);
        assert!(
            hits.iter().all(|h| h["doc_id"] != "ghost"),
            "{body}: the Milvus-only row was returned: {v}"
        );
        assert_eq!(hits[0]["doc_id"], "comet", "{body}: {v}");
        assert_eq!(hits[0]["scores"]["vector"]["rank"], 1, "{body}: {v}");
    }

    // Bad requests: 4xx with a JSON error naming the problem.
    let bad: Vec<(Value, &str)> = vec![
        (json!({"query": ""}), "empty"),
        (json!({"query": "x", "k": 0}), "k must be"),
        (json!({"query": "x", "k": 1000}), "k must be"),
        (json!({"query": "x", "mode": "semantic"}), "unknown mode"),
        (json!({"query": "x", "filter": "lang=en"}), "filter"),
        (
            json!({"query": "x", "filter": {"lang": {"regex": "e.*"}}}),
            "operator",
        ),
        (json!({"query": "x", "rerank": true}), "reranker"),
        (json!({"query": 5}), "invalid request body"),
        (json!({"k": 5}), "query"),
    ];
    for (body, needle) in bad {
        let r = node.post("/v1/retrieve", &body)?;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        let msg = r.json()?["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(msg.contains(needle), "{body}: {msg}");
    }
    let r = request(&node.addr, "POST", "/v1/retrieve", &[], b"{\"query\": ")?;
    assert_eq!(r.status, 400, "{}", r.body);
    let big = json!({"query": "x".repeat(100_000)}).to_string();
    let r = request(&node.addr, "POST", "/v1/retrieve", &[], big.as_bytes())?;
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(r.json()?["error"]["code"], "too_large");
    let r = node.get("/v1/retrieve")?;
    assert_eq!(r.status, 405, "{}", r.body);
    assert!(r.json()?["error"]["message"].is_string());
    let r = node.get("/no/such/route")?;
    assert_eq!(r.status, 404);
    assert!(r.json()?["error"]["message"].is_string());
    let r = node.get("/openapi.json")?;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()?["openapi"], "3.1.0");

    // Pathway-compatible endpoint.
    let r = node.post(
        "/pathway/v1/retrieve",
        &json!({"query": "comet tail near the sun", "k": 2, "metadata_filter": "lang == 'fr'"}),
    )?;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json()?;
    let arr = v.as_array().context("pathway answer is an array")?;
    assert_eq!(arr.len(), 1, "{v}");
    assert_eq!(arr[0]["metadata"]["doc_id"], "comet");
    assert_eq!(arr[0]["metadata"]["path"], "test://comet");
    assert!(arr[0]["dist"].as_f64().unwrap() < 0.0);
    assert!(arr[0]["text"].as_str().unwrap().contains("icy bodies"));
    let r = node.post(
        "/pathway/v1/retrieve",
        &json!({"query": "comet glacier", "k": 5, "filepath_globpattern": "test://gla*"}),
    )?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.json()?.as_array().unwrap().is_empty(),
        "no source matches test://gla*"
    );
    let ids = node.pathway_doc_ids(
        &json!({"query": "comet glacier", "k": 5, "filepath_globpattern": "test://vol*"}),
    )?;
    assert_eq!(ids, ["volcano"]);
    let r = node.post(
        "/pathway/v1/retrieve",
        &json!({"query": "x", "metadata_filter": "lang != 'fr'"}),
    )?;
    assert_eq!(r.status, 400, "{}", r.body);
    // Conditions on the source as hits carry it (metadata.path): a substring, Pathway's
    // globmatch, equality.
    let q = "comet glacier dumpling";
    let pw = |filter: &str| {
        node.pathway_doc_ids(&json!({"query": q, "k": 5, "metadata_filter": filter}))
    };
    assert_eq!(pw("contains(path, 'olcan')")?, ["volcano"]);
    assert_eq!(
        pw("globmatch('test://[cd]*', path) && year == `2020`")?,
        ["comet"]
    );
    assert_eq!(pw("path == 'test://dumpling'")?, ["dumpling"]);
    assert!(pw("contains(path, 'no-such-source')")?.is_empty());
    // Inputs: each document's metadata, sorted by id (bread is deleted); statistics count
    // documents.
    let inputs = |body: Value| -> Result<Vec<Value>> {
        let r = node.post("/pathway/v1/inputs", &body)?;
        anyhow::ensure!(r.status == 200, "inputs {body} → {}: {}", r.status, r.body);
        Ok(r.json()?.as_array().cloned().unwrap_or_default())
    };
    let ids = |docs: &[Value]| -> Vec<String> {
        docs.iter()
            .map(|d| d["doc_id"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let all = inputs(json!({"metadata_filter": null, "filepath_globpattern": null}))?;
    assert_eq!(ids(&all), ["comet", "dumpling", "volcano"]);
    assert_eq!(
        all[0],
        json!({"doc_id": "comet", "path": "test://comet", "title": "Comets", "lang": "fr", "year": 2020})
    );
    assert_eq!(
        ids(&inputs(json!({"metadata_filter": "lang == 'en'"}))?),
        ["volcano"]
    );
    let status = inputs(json!({"filepath_globpattern": "test://d*", "return_status": true}))?;
    assert_eq!(ids(&status), ["dumpling"]);
    assert_eq!(status[0]["_indexing_status"], "INDEXED");
    let r = node.post(
        "/pathway/v1/inputs",
        &json!({"metadata_filter": "lang = 'en'"}),
    )?;
    assert_eq!(r.status, 400, "{}", r.body);
    let stats = node.post("/pathway/v1/statistics", &json!({}))?.json()?;
    assert_eq!(stats["file_count"], 3, "{stats}");

    // A repeated query text takes its vector from the node's query cache: same answer.
    let count = |m: &str, outcome: &str| -> f64 {
        let prefix = format!("freshet_query_query_embeddings_total{{outcome=\"{outcome}\"}} ");
        m.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let probe = json!({"query": "icy comet tails near the sun", "mode": "vector", "k": 3});
    let first = node.post("/v1/retrieve", &probe)?;
    assert_eq!(first.status, 200, "{}", first.body);
    let m = node.get("/metrics")?.body;
    let (hits, embedded) = (count(&m, "cache_hit"), count(&m, "embedded"));
    assert!(embedded >= 1.0, "{m}");
    let second = node.post("/v1/retrieve", &probe)?;
    assert_eq!(second.status, 200, "{}", second.body);
    let m = node.get("/metrics")?.body;
    assert_eq!(
        (count(&m, "cache_hit"), count(&m, "embedded")),
        (hits + 1.0, embedded),
        "the second request hits the cache:\n{m}\n{}",
        node.log_tail()
    );
    // The Milvus connector reports the node's vector searches (both probes searched Milvus).
    let milvus = |m: &str, series: &str| -> f64 {
        let prefix = format!("freshet_query_milvus_{series} ");
        m.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    for series in [
        "requests_total{op=\"search\",outcome=\"ok\"}",
        "request_seconds_count{op=\"search\"}",
    ] {
        assert!(milvus(&m, series) >= 2.0, "{series}:\n{m}");
    }
    let ids_scores = |v: &Value| -> Vec<(String, String)> {
        results(v)
            .iter()
            .map(|h| (h["chunk_id"].to_string(), h["score"].to_string()))
            .collect()
    };
    let (first, second) = (first.json()?, second.json()?);
    assert!(!results(&first).is_empty());
    assert_eq!(ids_scores(&first), ids_scores(&second));

    // Metrics.
    let m = node.get("/metrics")?.body;
    for name in [
        "freshet_query_requests_total{endpoint=\"retrieve\",mode=\"hybrid\",outcome=\"ok\"}",
        "freshet_query_requests_total{endpoint=\"retrieve\",mode=\"unknown\",outcome=\"bad_request\"}",
        "freshet_query_stage_seconds_bucket{le=",
        "freshet_query_index_commit_age_seconds",
        "freshet_query_index_epoch",
        "freshet_query_query_embeddings_total{outcome=\"embedded\"}",
        "freshet_query_ready 1",
    ] {
        assert!(m.contains(name), "metric {name} missing:\n{m}");
    }
    case.stop_pipeline()?;
    Ok(())
}

/// A principal never sees another group's documents, through any mode or option.
#[test]
fn acl_is_enforced_in_every_mode_and_option() -> Result<()> {
    let mut case = Case::new("query_acl", 1)?;
    case.start_pipeline()?;
    let text = |who: &str| {
        format!("Quarterly revenue report of the {who} team: revenue grew, costs fell, and the revenue forecast for next quarter is strong.")
    };
    let docs = [
        ("public", vec![]),
        ("team-a", vec!["group:a"]),
        ("team-b", vec!["group:b"]),
        ("team-ab", vec!["group:a", "group:b"]),
    ];
    for (id, acl) in &docs {
        case.send_json(id, &doc(id, "Revenue", &text(id), json!({}), acl))?;
    }
    case.wait_indexed(WAIT)?;
    // The requests name their principals: a node behind an authenticating proxy (keys and
    // tokens bound to principals: auth_e2e).
    let node = case.start_query(&[("FRESHET_QUERY_TRUST_REQUEST_PRINCIPALS", "true".into())])?;
    node.wait_ready(Duration::from_secs(60))?;
    let q = "quarterly revenue report forecast";
    node.wait_for(
        &json!({"query": q, "principals": ["group:a", "group:b"], "mode": "vector"}),
        VISIBLE,
        |ids| ids.len() == 4,
    )?;
    let visible = |principals: Option<Vec<&str>>| -> BTreeSet<&str> {
        docs.iter()
            .filter(|(_, acl)| {
                acl.is_empty()
                    || principals
                        .as_ref()
                        .is_some_and(|p| acl.iter().any(|a| p.contains(a)))
            })
            .map(|(id, _)| *id)
            .collect()
    };
    for principals in [
        None,
        Some(vec!["group:a"]),
        Some(vec!["group:b"]),
        Some(vec!["group:c"]),
    ] {
        let allowed = visible(principals.clone());
        for mode in MODES {
            for extra in [
                json!({}),
                json!({"expand": {"window": 2, "top_m": 10}}),
                json!({"parents": true}),
                json!({"pack": {"budget_tokens": 1000}}),
                json!({"bm25_top_k": 1, "vector_top_k": 1, "k": 1}),
            ] {
                let mut body = json!({"query": q, "mode": mode, "k": 10});
                if let Some(p) = &principals {
                    body["principals"] = json!(p);
                }
                for (k, v) in extra.as_object().unwrap() {
                    body[k] = v.clone();
                }
                let got = node.doc_ids(&body)?;
                let got: BTreeSet<&str> = got.iter().map(String::as_str).collect();
                if body["k"] == 1 {
                    // Top-1 is computed over visible chunks only (filter inside the search).
                    assert_eq!(got.len(), 1, "{body}");
                    assert!(got.is_subset(&allowed), "{body}: {got:?} ⊄ {allowed:?}");
                } else {
                    assert_eq!(got, allowed, "{body}");
                }
            }
        }
    }
    // The Pathway endpoint carries no principals: public documents only.
    let ids = node.pathway_doc_ids(&json!({"query": q, "k": 10}))?;
    assert_eq!(ids, ["public"]);
    case.stop_pipeline()?;
    Ok(())
}

/// A long Markdown report: sections of three ~120-token paragraphs each.
fn report(paragraphs: usize) -> String {
    let words = &RIVER_WORDS[..16];
    let mut out = String::from("# Field report\n\n");
    for p in 0..paragraphs {
        if p % 3 == 0 {
            out.push_str(&format!("## Section {}\n\n", p / 3));
        }
        let body: Vec<&str> = (0..100)
            .map(|i| words[(p * 5 + i * 3) % words.len()])
            .collect();
        out.push_str(&format!(
            "Observation marker{p} noted. {}.\n\n",
            body.join(" ")
        ));
    }
    out
}

/// A tiny `/rerank` server in TEI's shape: score = occurrences of "banana" in the text.
fn tei_server(seen: Arc<Mutex<Vec<Value>>>) -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?.to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; len];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let texts: Vec<String> = req["texts"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|t| t.as_str().unwrap_or("").to_lowercase())
                        .collect()
                })
                .unwrap_or_default();
            seen.lock().unwrap().push(req);
            let answer: Vec<Value> = texts
                .iter()
                .enumerate()
                .map(|(i, t)| json!({"index": i, "score": t.matches("banana").count() as f32}))
                .collect();
            let out = serde_json::to_string(&answer).unwrap();
            let mut s = reader.into_inner();
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
                out.len()
            );
        }
    });
    Ok(format!("http://{addr}/rerank"))
}

/// Rerank (local stand-in cross-encoder and a remote TEI-style API), context expansion,
/// parent-child retrieval and context packing.
#[test]
fn rerank_expand_parents_and_pack() -> Result<()> {
    let mut case = Case::new("query_stages", 1)?;
    // Plain text gets parent-child chunking, Markdown the heading-aware splitter.
    case.extra_env.push((
        "FRESHET_CHUNKING_PER_CONTENT_TYPE".into(),
        r#"{"text/plain" = "parent_child", "text/markdown" = "markdown"}"#.into(),
    ));
    case.start_pipeline()?;
    let fruit = [
        (
            "f1",
            "Pie: one apple, sugar and butter, then another apple on top.",
        ),
        (
            "f2",
            "Orchard notes. Apple apple apple, said the farmer at harvest.",
        ),
        (
            "f3",
            "Bread needs a ripe banana, a second banana and one apple.",
        ),
    ];
    for (id, text) in fruit {
        case.send_json(
            id,
            &json!({"op": "upsert", "id": id, "title": "Kitchen", "text": text,
            "content_type": "text/markdown", "source": format!("test://{id}")}),
        )?;
    }
    let long_plain: String = (0..40)
        .map(|i| {
            format!("Sentence {i} talks about topic{i} with several ordinary filler words here.")
        })
        .collect::<Vec<_>>()
        .join(" ");
    case.send_json(
        "plain",
        &json!({"op": "upsert", "id": "plain", "title": "Plain",
        "text": long_plain, "content_type": "text/plain", "source": "test://plain"}),
    )?;
    case.send_json(
        "report",
        &json!({"op": "upsert", "id": "report", "title": "Report",
        "text": report(9), "content_type": "text/markdown", "source": "test://report"}),
    )?;
    case.wait_indexed(WAIT)?;
    let chunks = case.tantivy_chunks()?;

    // Local cross-encoder: a generated stand-in whose score is the number of passage tokens
    // that also occur in the query (tests/fixtures/make_standin_reranker.py).
    let model = case.standin_reranker()?;
    let node = case.start_query(&[
        ("FRESHET_QUERY_RERANK_BACKEND", "local".into()),
        (
            "FRESHET_QUERY_RERANK_MODEL_DIR",
            model.display().to_string(),
        ),
    ])?;
    node.wait_ready(Duration::from_secs(60))?;
    let q = json!({"query": "apple", "mode": "bm25", "k": 3, "rerank": {"candidates": 10}});
    node.wait_for(&q, VISIBLE, |ids| ids.len() == 3)?;
    let v = node.retrieve(&q)?;
    let got: Vec<(String, f64, u64)> = results(&v)
        .iter()
        .map(|h| {
            (
                h["doc_id"].as_str().unwrap().to_owned(),
                h["scores"]["rerank"]["score"].as_f64().unwrap(),
                h["scores"]["rerank"]["rank"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("f2".into(), 3.0, 1),
            ("f1".into(), 2.0, 2),
            ("f3".into(), 1.0, 3)
        ],
        "{v}"
    );
    assert_eq!(results(&v)[0]["score"].as_f64(), Some(3.0));
    assert!(v["timings_ms"]["rerank"].as_f64().is_some());
    // Without rerank the scores carry no rerank stage.
    let v = node.retrieve(&json!({"query": "apple", "mode": "bm25", "k": 3}))?;
    assert!(results(&v)[0]["scores"]["rerank"].is_null());
    drop(node);

    // Remote TEI-style API: scores by "banana" count.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let url = tei_server(seen.clone())?;
    let node = case.start_query(&[
        ("FRESHET_QUERY_RERANK_BACKEND", "remote".into()),
        ("FRESHET_QUERY_RERANK_URL", url),
        ("FRESHET_QUERY_RERANK_BY_DEFAULT", "true".into()),
    ])?;
    node.wait_ready(Duration::from_secs(60))?;
    let v = node.retrieve(&json!({"query": "apple", "mode": "bm25", "k": 3}))?;
    assert_eq!(results(&v)[0]["doc_id"], "f3", "{v}");
    assert_eq!(
        results(&v)[0]["scores"]["rerank"]["score"].as_f64(),
        Some(2.0)
    );
    {
        let seen = seen.lock().unwrap();
        let last = seen.last().context("the rerank server was called")?;
        assert_eq!(last["query"], "apple");
        assert_eq!(last["texts"].as_array().map(Vec::len), Some(3));
    }
    let v = node.retrieve(&json!({"query": "apple", "mode": "bm25", "k": 3, "rerank": false}))?;
    assert!(results(&v)[0]["scores"]["rerank"].is_null());

    // Context expansion: the hit plus its neighbours in the same section, merged.
    let v = node.retrieve(
        &json!({"query": "marker4", "mode": "bm25", "k": 1, "rerank": false,
        "expand": {"window": 1, "top_m": 1}}),
    )?;
    let top = &results(&v)[0];
    let hit = chunks
        .iter()
        .find(|c| c.chunk_id == top["chunk_id"].as_str().unwrap())
        .context("the hit is in the index")?;
    assert!(hit.text.contains("marker4 "), "{}", hit.text);
    let mut neighbours: Vec<&freshet_operators::chunk::Chunk> = chunks
        .iter()
        .filter(|c| {
            c.doc_id == "report"
                && c.section == hit.section
                && c.index + 1 >= hit.index
                && c.index <= hit.index + 1
        })
        .collect();
    neighbours.sort_by_key(|c| c.index);
    let expected: Vec<&str> = neighbours.iter().map(|c| c.chunk_id.as_str()).collect();
    assert!(
        expected.len() >= 2,
        "the hit has a neighbour in its section"
    );
    let ids: Vec<&str> = top["passage_chunk_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert_eq!(ids, expected, "{top}");
    let text = top["text"].as_str().unwrap();
    for id in &expected {
        let c = chunks.iter().find(|c| c.chunk_id == *id).unwrap();
        let head: String = c.text.chars().take(40).collect();
        assert!(text.contains(&head), "passage lacks chunk {id}");
    }
    assert!(
        !text.contains("Section 2") && !text.contains("marker6 "),
        "crossed a section"
    );

    // Parent-child: children are searched, parents returned, deduplicated.
    let v = node.retrieve(
        &json!({"query": "topic7 topic8 topic9 ordinary filler", "mode": "bm25",
        "k": 5, "rerank": false, "parents": true}),
    )?;
    let res = results(&v);
    assert!(!res.is_empty());
    let mut seen_parents = BTreeSet::new();
    for h in res.iter().filter(|h| h["doc_id"] == "plain") {
        assert_eq!(h["kind"], "parent", "{h}");
        let pid = h["chunk_id"].as_str().unwrap();
        assert!(seen_parents.insert(pid.to_owned()), "parent {pid} twice");
        let children = h["matched_children"].as_array().unwrap();
        assert!(!children.is_empty());
        for c in children {
            let child = chunks
                .iter()
                .find(|x| x.chunk_id == c.as_str().unwrap())
                .unwrap();
            assert_eq!(child.kind, ChunkKind::Leaf);
            assert_eq!(child.parent_id.as_deref(), Some(pid));
        }
        let parent = chunks.iter().find(|x| x.chunk_id == pid).unwrap();
        assert_eq!(h["text"].as_str().unwrap(), parent.text);
    }
    assert!(!seen_parents.is_empty());
    let v = node.retrieve(&json!({"query": "topic7", "mode": "bm25", "k": 3, "rerank": false}))?;
    assert_eq!(results(&v)[0]["kind"], "leaf");

    // Packing: whole passages within the budget, deterministic.
    let body = json!({"query": "river delta sediment marker2", "mode": "hybrid", "k": 5,
        "rerank": false, "pack": {"budget_tokens": 300, "order": "edges_first"}});
    let a = node.retrieve(&body)?;
    let b = node.retrieve(&body)?;
    assert_eq!(a["context"], b["context"]);
    let context = a["context"].as_str().unwrap();
    assert!(a["context_tokens"].as_u64().unwrap() <= 300);
    let cites = a["citations"].as_array().unwrap();
    assert!(!cites.is_empty());
    assert!(context.starts_with("[1] "), "{context}");
    for c in cites {
        let idx = c["result_index"].as_u64().unwrap() as usize;
        let passage = results(&a)[idx]["text"].as_str().unwrap();
        assert!(context.contains(passage), "passage {idx} not packed whole");
        assert!(context.contains(&format!("[{}] ", c["number"])));
    }
    if cites.len() >= 2 {
        // edges_first: the second best closes the context.
        let second = cites.iter().find(|c| c["number"] == 2).unwrap();
        let idx = second["result_index"].as_u64().unwrap() as usize;
        assert!(context.ends_with(results(&a)[idx]["text"].as_str().unwrap()));
    }
    case.stop_pipeline()?;
    Ok(())
}

/// API keys, when configured, guard every /v1 route; health, readiness and metrics stay open.
#[test]
fn api_keys_guard_v1_routes() -> Result<()> {
    let case = Case::new("query_auth", 1)?;
    let node: QueryNode =
        case.start_query(&[("FRESHET_QUERY_API_KEYS", r#"["s3cret"]"#.into())])?;
    let body = br#"{"query":"x"}"#;
    let r = request(&node.addr, "POST", "/v1/retrieve", &[], body)?;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.json()?["error"]["message"]
        .as_str()
        .unwrap()
        .contains("API key"));
    let r = request(
        &node.addr,
        "POST",
        "/v1/retrieve",
        &[("Authorization", "Bearer wrong")],
        body,
    )?;
    assert_eq!(r.status, 401);
    // The right key passes authentication (the index does not exist yet: 503, not 401).
    for h in [("Authorization", "Bearer s3cret"), ("X-API-Key", "s3cret")] {
        let r = request(&node.addr, "POST", "/v1/retrieve", &[h], body)?;
        assert_eq!(r.status, 503, "{}", r.body);
    }
    assert_eq!(node.get("/healthz")?.status, 200);
    assert_eq!(node.get("/metrics")?.status, 200);
    Ok(())
}

#[test]
fn milvus_outage_answers_503_or_bm25_alone_and_the_node_recovers() -> Result<()> {
    let mut case = Case::new("query_outage", 1)?;
    case.start_pipeline()?;
    for (id, text) in [
        (
            "glacier",
            "Glaciers carve valleys as the ice slowly flows downhill.",
        ),
        (
            "delta",
            "A river delta forms where sediment settles at the mouth.",
        ),
    ] {
        case.send_json(id, &doc(id, id, text, json!({}), &[]))?;
    }
    case.wait_indexed(WAIT)?;
    // The node reaches Milvus through a proxy this test can cut.
    let proxy = TcpProxy::start(&host_port(&freshet_tests::env("FRESHET_MILVUS_URL"))?)?;
    let node = case.start_query(&[
        ("FRESHET_MILVUS_URL", format!("http://{}", proxy.addr)),
        ("FRESHET_MILVUS_TIMEOUT", "3s".into()),
        ("FRESHET_QUERY_REQUEST_TIMEOUT_MS", "8000".into()),
    ])?;
    node.wait_ready(Duration::from_secs(60))?;
    let ice = json!({"query": "ice flowing downhill", "mode": "vector", "k": 1});
    assert_eq!(node.doc_ids(&ice)?, ["glacier"]);

    proxy.cut();
    // Vector retrieval, and hybrid retrieval that does not accept a partial answer, answer 503
    // with a reason; BM25 does not need Milvus.
    for req in [
        json!({"query": "ice", "mode": "vector"}),
        json!({"query": "ice", "mode": "hybrid", "allow_partial": false}),
    ] {
        let r = node.post("/v1/retrieve", &req)?;
        assert_eq!(r.status, 503, "{req}: {}", r.body);
        let v = r.json()?;
        assert_eq!(v["error"]["code"], "unavailable", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("milvus")),
            "{v}"
        );
    }
    let bm25 = json!({"query": "ice flowing downhill", "mode": "bm25", "k": 1});
    assert_eq!(node.doc_ids(&bm25)?, ["glacier"]);
    // Hybrid by default answers from BM25 alone and says so.
    let r = node.post(
        "/v1/retrieve",
        &json!({"query": "ice flowing downhill", "k": 2}),
    )?;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json()?;
    assert_eq!(v["degraded"][0]["route"], "vector", "{v}");
    assert!(
        v["degraded"][0]["reason"]
            .as_str()
            .is_some_and(|m| m.contains("milvus")),
        "{v}"
    );
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{v}"); // "delta" shares no term with the query
    assert_eq!(results[0]["doc_id"], "glacier");
    assert_eq!(results[0]["scores"]["bm25"]["rank"], 1, "{v}");
    assert!(results[0]["scores"]["vector"].is_null(), "{v}");
    let m = node.get("/metrics")?.body;
    let degraded =
        "freshet_query_requests_total{endpoint=\"retrieve\",mode=\"hybrid\",outcome=\"degraded\"} 1";
    assert!(m.contains(degraded), "{degraded} missing:\n{m}");
    // Readiness notices (the failed searches ask for a re-check at once).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = node.get("/readyz")?;
        if r.status == 503 {
            assert!(r.body.contains("milvus"), "{}", r.body);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still ready with Milvus cut off: {}",
            r.body
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Back without a restart.
    proxy.restore();
    node.wait_ready(Duration::from_secs(60))?;
    assert_eq!(node.doc_ids(&ice)?, ["glacier"]);
    Ok(())
}
