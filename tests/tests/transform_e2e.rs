//! Query transformation end to end: the real pipeline, broker, Milvus and model, the real
//! `freshet-query` binary, and the deterministic stand-in language model in process
//! (`freshet_llm::standin`, which records every request it gets). Multi-query rankings are the
//! RRF of the separate searches of the queries the response reports; HyDE's vector route is
//! the passage's and its BM25 route the question's, for the questions the classifier picks; a
//! follow-up is searched as its standalone question; a second identical request does not call
//! the model; every failure of the model falls back to the question; no rewrite ever sees a
//! passage or widens what the caller may read.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::Result;
use freshet_tests::llm::LiveStandIn;
use freshet_tests::query::QueryNode;
use freshet_tests::Case;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
const VISIBLE: Duration = Duration::from_secs(60);

fn doc(id: &str, text: &str, acl: &[&str]) -> Value {
    json!({"op": "upsert", "id": id, "title": id, "text": text, "content_type": "text/plain",
           "source": format!("test://{id}"), "metadata": {}, "acl": acl})
}

const DOCS: [(&str, &str, &[&str]); 7] = [
    ("kessler", "Marie Kessler later founded the Alpine Glaciology Institute in Zurich and taught there until 1950.", &[]),
    ("zorblax", "The Zorblax glacier was found by Marie Kessler in 1921 during a survey of the eastern valleys.", &[]),
    ("retreat", "Glacier retreat accelerates when summer temperatures rise, and meltwater lubricates the glacier bed.", &[]),
    ("volcanic", "Volcanic ash darkens the snow and speeds up melting on glaciers near an eruption.", &[]),
    ("river", "A river carries sediment from the mountains to the sea and shapes its valley over time.", &[]),
    ("zh", "冰川退缩的原因包括气温上升和降水减少，融水也会加快冰川的流动。", &[]),
    ("salary", "Confidential: Marie Kessler salary records and the retreat budget of the institute.", &["group:hr"]),
];

/// A case with the documents indexed, and the stand-in on its own runtime.
fn setup(name: &str) -> Result<(Case, LiveStandIn)> {
    let mut case = Case::new(name, 1)?;
    case.start_pipeline()?;
    for (id, text, acl) in DOCS {
        case.send_json(id, &doc(id, text, acl))?;
    }
    case.wait_indexed(WAIT)?;
    Ok((case, LiveStandIn::start()?))
}

fn node_with(
    case: &Case,
    standin: &LiveStandIn,
    model: &str,
    extra: &[(&str, &str)],
) -> Result<QueryNode> {
    let mut settings = vec![
        ("FRESHET_LLM_BASE_URL", standin.base_url()),
        ("FRESHET_LLM_MODEL", model.to_owned()),
        ("FRESHET_LLM_RETRIES", "1".to_owned()),
        ("FRESHET_LLM_BACKOFF_INITIAL_MS", "50".to_owned()),
        ("FRESHET_LLM_BACKOFF_MAX_MS", "50".to_owned()),
        ("FRESHET_TRANSFORM_TIMEOUT_MS", "2500".to_owned()),
        ("FRESHET_QUERY_TRUST_REQUEST_PRINCIPALS", "true".to_owned()),
    ];
    for (k, v) in extra {
        settings.push((k, v.to_string()));
    }
    let node = case.start_query(&settings)?;
    node.wait_ready(Duration::from_secs(60))?;
    // Every public document is searchable through both routes.
    node.wait_for(
        &json!({"query": "glacier", "mode": "vector", "k": 20}),
        VISIBLE,
        |ids| ids.len() >= 6,
    )?;
    Ok(node)
}

fn chunk_ids(v: &Value) -> Vec<String> {
    v["results"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|h| h["chunk_id"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn doc_ids(v: &Value) -> Vec<String> {
    v["results"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|h| h["doc_id"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// RRF (k = 60) of rankings of chunk ids, ordered as the node orders (score, best rank, id).
fn rrf(rankings: &[Vec<String>]) -> Vec<String> {
    let mut score: HashMap<&str, (f64, usize)> = HashMap::new();
    for r in rankings {
        for (i, id) in r.iter().enumerate() {
            let e = score.entry(id).or_insert((0.0, usize::MAX));
            e.0 += 1.0 / (60.0 + (i + 1) as f64);
            e.1 = e.1.min(i + 1);
        }
    }
    let mut ids: Vec<(&str, (f64, usize))> = score.into_iter().collect();
    ids.sort_by(|a, b| {
        b.1 .0
            .total_cmp(&a.1 .0)
            .then(a.1 .1.cmp(&b.1 .1))
            .then(a.0.cmp(b.0))
    });
    ids.into_iter().map(|(id, _)| id.to_owned()).collect()
}

fn metric(node: &QueryNode, line: &str) -> Result<f64> {
    let body = node.get("/metrics")?.body;
    Ok(body
        .lines()
        .find(|l| l.starts_with(line))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0))
}

#[test]
fn multi_query_hyde_conversations_and_the_cache_through_the_real_node() -> Result<()> {
    let (mut case, standin) = setup("transform")?;
    let node = node_with(&case, &standin, "standin", &[])?;

    // Multi-query: the ranking is the RRF of the separate searches of every query reported.
    let q = "volcanic glacier retreat";
    let r = node.retrieve(&json!({"query": q, "k": 20, "transform": {"multi_query": 3}}))?;
    let t = &r["transform"];
    let queries: Vec<String> = serde_json::from_value(t["queries"].clone())?;
    assert_eq!(queries, [q, "volcanic", "glacier", "retreat"], "{t}");
    assert!(r["timings_ms"]["transform"].as_f64().is_some(), "{r}");
    let separate: Vec<Vec<String>> = queries
        .iter()
        .map(|q| {
            node.retrieve(&json!({"query": q, "k": 100}))
                .map(|r| chunk_ids(&r))
        })
        .collect::<Result<_>>()?;
    assert_eq!(chunk_ids(&r), rrf(&separate), "{r}");
    assert!(
        separate[1] != separate[0],
        "the rewrites search something else"
    );
    // Each result's route ranks are those of the query that ranked it best.
    let top = &r["results"][0];
    assert!(top["scores"]["fused"]["score"].as_f64().unwrap() > 0.0);

    // HyDE under auto: an analytical question's vector route embeds the passage; BM25 keeps the
    // question's words.
    let q = "Why do glaciers retreat in summer?";
    let r = node.retrieve(&json!({"query": q, "k": 20, "transform": {"hyde": "auto"}}))?;
    let t = &r["transform"];
    assert_eq!(t["hyde_used"], true, "{t}");
    assert_eq!(t["hyde_reason"], "auto: analytical: \"why\"", "{t}");
    let passage = t["hyde_passage"].as_str().unwrap().to_owned();
    assert!(passage.contains("consequences"), "{passage}");
    // (chunk id, rank, score) of a route, by rank.
    let route = |r: &Value, route: &str| -> Vec<(String, u64, String)> {
        let mut v: Vec<(String, u64, String)> = r["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|h| {
                let s = &h["scores"][route];
                s["rank"].as_u64().map(|rank| {
                    (
                        h["chunk_id"].as_str().unwrap().to_owned(),
                        rank,
                        s["score"].to_string(),
                    )
                })
            })
            .collect();
        v.sort_by_key(|(_, rank, _)| *rank);
        v
    };
    let by_passage = node.retrieve(&json!({"query": passage, "mode": "vector", "k": 20}))?;
    let by_question = node.retrieve(&json!({"query": q, "mode": "bm25", "k": 20}))?;
    assert_eq!(route(&r, "vector"), route(&by_passage, "vector"));
    assert_eq!(route(&r, "bm25"), route(&by_question, "bm25"));
    assert!(!route(&r, "bm25").is_empty());
    let plain = node.retrieve(&json!({"query": q, "mode": "vector", "k": 20}))?;
    assert_ne!(
        route(&plain, "vector"),
        route(&by_passage, "vector"),
        "the passage's vector is not the question's"
    );
    // Factual and identifier-like questions keep their own vectors (and cost no call).
    for (q, why) in [
        ("Who found the Zorblax glacier?", "auto: factual"),
        ("RFC 7231", "auto: identifier-like"),
    ] {
        let before = standin.requests().len();
        let r = node.retrieve(&json!({"query": q, "transform": {"hyde": "auto"}}))?;
        assert_eq!(r["transform"]["hyde_used"], false, "{q}: {r}");
        assert!(
            r["transform"]["hyde_reason"]
                .as_str()
                .unwrap()
                .starts_with(why),
            "{r}"
        );
        assert_eq!(standin.requests().len(), before, "{q}: no call");
    }
    // Chinese: analytical, HyDE runs when the vector route does (language_routing all; the
    // English model's route is left out under auto, and HyDE says so).
    let r = node.retrieve(
        &json!({"query": "为什么冰川会退缩？", "language_routing": "all",
                                  "transform": {"hyde": "auto"}}),
    )?;
    assert_eq!(r["transform"]["hyde_used"], true, "{r}");
    let r =
        node.retrieve(&json!({"query": "为什么冰川会退缩？", "transform": {"hyde": "auto"}}))?;
    assert_eq!(r["transform"]["hyde_used"], false, "{r}");
    assert!(
        r["transform"]["hyde_reason"]
            .as_str()
            .unwrap()
            .contains("vector route"),
        "{r}"
    );

    // A follow-up is searched as its standalone question.
    let history = json!([
        {"role": "user", "content": "Who found the Zorblax glacier?"},
        {"role": "assistant", "content": "Marie Kessler found it in 1921."}
    ]);
    let r = node.retrieve(&json!({"query": "What happened to her later?", "history": history}))?;
    let standalone = "What happened to Marie Kessler later?";
    assert_eq!(r["transform"]["standalone_query"], standalone, "{r}");
    assert_eq!(
        doc_ids(&r),
        doc_ids(&node.retrieve(&json!({"query": standalone}))?)
    );
    assert_eq!(doc_ids(&r)[0], "kessler", "{r}");

    // The cache: the same request again calls nobody.
    let body = json!({"query": "volcanic glacier retreat", "k": 20,
                      "transform": {"multi_query": 3, "hyde": "on"}, "history": history});
    let first = node.retrieve(&body)?;
    let calls = standin.requests().len();
    let second = node.retrieve(&body)?;
    assert_eq!(
        standin.requests().len(),
        calls,
        "the second request called the model"
    );
    assert_eq!(
        second["transform"]["cached"],
        json!(["condense", "multi_query", "hyde"])
    );
    assert_eq!(second["transform"]["llm_calls"], 0);
    assert_eq!(chunk_ids(&first), chunk_ids(&second));
    assert!(
        metric(
            &node,
            "freshet_query_transform_steps_total{step=\"hyde\",outcome=\"cache_hit\"}"
        )? >= 1.0
    );
    assert!(
        metric(
            &node,
            "freshet_query_stage_seconds_count{stage=\"transform\"}"
        )? >= 1.0
    );

    // A request's transformation is checked.
    let bad = node.post(
        "/v1/retrieve",
        &json!({"query": "q", "transform": {"multi_query": 99}}),
    )?;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let bad = node.post(
        "/v1/retrieve",
        &json!({"query": "q", "history": [{"role": "system", "content": "x"}]}),
    )?;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("history[0].role"), "{}", bad.body);
    case.stop_pipeline()?;
    Ok(())
}

#[test]
fn rewrites_never_see_passages_nor_widen_the_callers_acl() -> Result<()> {
    let (mut case, standin) = setup("transform_acl")?;
    let node = node_with(&case, &standin, "standin", &[])?;
    let history = json!([{"role": "user", "content": "Tell me about Marie Kessler."}]);
    let body = |principals: Value| {
        json!({"query": "Marie Kessler salary retreat budget", "k": 20, "principals": principals,
               "transform": {"multi_query": 4, "hyde": "on"}, "history": history})
    };
    // The "salary" rewrite would find the HR document if a rewrite searched beyond the caller.
    for principals in [json!([]), json!(["group:eng"])] {
        let r = node.retrieve(&body(principals.clone()))?;
        let queries = r["transform"]["queries"].as_array().unwrap();
        assert!(queries.iter().any(|q| q == "salary"), "{r}");
        let ids: BTreeSet<String> = doc_ids(&r).into_iter().collect();
        assert!(!ids.contains("salary"), "{principals}: {ids:?}");
        assert!(ids.contains("kessler"), "{ids:?}");
    }
    // The same request by HR finds it: the rewrites search with the caller's principals.
    let r = node.retrieve(&body(json!(["group:hr"])))?;
    assert!(doc_ids(&r).contains(&"salary".to_owned()), "{r}");
    // The rewrites searched with the caller's principals inside the searches: the last check
    // before an answer leaves the node had nothing to drop.
    assert_eq!(
        metric(&node, "freshet_query_chunks_dropped_total{reason=\"acl\"}")?,
        0.0
    );
    // No prompt ever held a passage: the model saw questions and the conversation only.
    let requests = standin.requests();
    assert!(!requests.is_empty());
    for req in &requests {
        let text = req.to_string();
        for passage_words in ["Confidential", "Alpine Glaciology Institute", "sediment"] {
            assert!(
                !text.contains(passage_words),
                "a prompt held a passage: {text}"
            );
        }
    }
    case.stop_pipeline()?;
    Ok(())
}

#[test]
fn every_failure_of_the_model_falls_back_to_the_question() -> Result<()> {
    let (mut case, standin) = setup("transform_faults")?;
    let history = json!([{"role": "user", "content": "Who found the Zorblax glacier?"},
                         {"role": "assistant", "content": "Marie Kessler found it."}]);
    let q = "What happened to her later?";
    let body = json!({"query": q, "k": 20, "history": history,
                      "transform": {"multi_query": 2, "hyde": "on"}});
    for (model, class) in [
        ("standin-500", "server_error"),
        ("standin-429", "rate_limited"),
        ("standin-stall-after-1", "timeout"),
        ("standin-malformed", "bad_response"),
    ] {
        let node = node_with(&case, &standin, model, &[])?;
        let started = Instant::now();
        let r = node.post("/v1/retrieve", &body)?;
        assert_eq!(r.status, 200, "{model}: {}", r.body);
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "{model}: past its share"
        );
        let r = r.json()?;
        let degraded = r["degraded"].as_array().unwrap();
        assert!(
            degraded.iter().all(|d| d["route"] == "transform"),
            "{model}: {r}"
        );
        assert!(
            degraded[0]["reason"]
                .as_str()
                .unwrap()
                .starts_with("condense"),
            "{r}"
        );
        assert_eq!(r["transform"]["queries"], json!([q]), "{model}: {r}");
        assert_eq!(r["transform"]["hyde_used"], false);
        // The answer is the plain retrieval of the question as sent.
        let plain = node.retrieve(&json!({"query": q, "k": 20}))?;
        assert_eq!(chunk_ids(&r), chunk_ids(&plain), "{model}");
        let line =
            format!("freshet_query_transform_steps_total{{step=\"condense\",outcome=\"{class}\"}}");
        assert!(metric(&node, &line)? >= 1.0, "{model}: {line}");
        let line = "freshet_query_requests_total{endpoint=\"retrieve\",mode=\"hybrid\",outcome=\"degraded\"}";
        assert!(metric(&node, line)? >= 1.0, "{model}");
    }
    // Without [llm], asking for a transformation is a 400 that says so.
    let node = case.start_query(&[])?;
    node.wait_ready(Duration::from_secs(60))?;
    let r = node.post(
        "/v1/retrieve",
        &json!({"query": q, "transform": {"multi_query": 2}}),
    )?;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("[llm]"), "{}", r.body);
    case.stop_pipeline()?;
    Ok(())
}
