//! Remote embeddings end to end (`[embedding] provider = "openai"`): the real pipeline and
//! query node binaries, broker and Milvus, embedding through the OpenAI-compatible stand-in
//! served in this process (`freshet_llm::standin`, `POST /v1/embeddings`, deterministic hashed
//! bag-of-words vectors). Indexing and vector search through it, an outage of it (the pipeline
//! stalls without advancing offsets and resumes; the query node answers hybrid from BM25,
//! marked degraded), a text it refuses (dead-lettered), and a model switch on a collection
//! written with another model (refused).

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use freshet_kafka::{dlq_headers, Record};
use freshet_llm::standin::StandIn;
use freshet_tests::query::QueryNode;
use freshet_tests::{env, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);

/// The stand-in, served by its own runtime for the whole test.
struct Server {
    standin: StandIn,
    _runtime: tokio::runtime::Runtime,
}

fn standin() -> Result<Server> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let standin = runtime.block_on(StandIn::start())?;
    Ok(Server {
        standin,
        _runtime: runtime,
    })
}

/// `FRESHET_EMBEDDING_*` for a remote `model` at `server`, quick to retry.
fn remote(server: &Server, model: &str) -> Vec<(String, String)> {
    let tokenizer = std::path::Path::new(&env("FRESHET_MODEL_DIR")).join("tokenizer.json");
    [
        ("FRESHET_EMBEDDING_PROVIDER", "openai".to_string()),
        ("FRESHET_EMBEDDING_BASE_URL", server.standin.base_url()),
        ("FRESHET_EMBEDDING_MODEL", model.to_string()),
        ("FRESHET_EMBEDDING_LANGUAGES", "[\"all\"]".to_string()),
        (
            "FRESHET_EMBEDDING_TOKENIZER",
            tokenizer.display().to_string(),
        ),
        ("FRESHET_EMBEDDING_RETRIES", "1".to_string()),
        ("FRESHET_EMBEDDING_BACKOFF_INITIAL_MS", "50".to_string()),
        ("FRESHET_EMBEDDING_BACKOFF_MAX_MS", "200".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn doc(id: &str, title: &str, text: &str) -> Value {
    json!({"op": "upsert", "id": id, "title": title, "text": text, "content_type": "text/plain",
           "source": format!("test://{id}")})
}

fn start_query(case: &Case, settings: &[(String, String)]) -> Result<QueryNode> {
    let s: Vec<(&str, String)> = settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    case.start_query(&s)
}

/// Every text the stand-in was asked to embed.
fn embedded_texts(server: &Server) -> Vec<String> {
    server
        .standin
        .embeddings()
        .requests()
        .iter()
        .filter_map(|r| r["input"].as_array().cloned())
        .flatten()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect()
}

fn header(rec: &Record, name: &str) -> Option<String> {
    rec.header(name)
        .flatten()
        .map(|v| String::from_utf8_lossy(v).to_string())
}

/// Indexes through the remote model and finds the documents by vector search on the node,
/// whose queries go through the same server; an outage of the server on the query side makes
/// the vector route unavailable (hybrid answers from BM25, marked degraded; vector mode 503).
#[test]
fn documents_indexed_through_a_remote_model_are_found_by_vector_search() -> Result<()> {
    let server = standin()?;
    let mut case = Case::new("remote_embed_search", 2)?;
    let settings = remote(&server, "standin");
    case.extra_env = settings.clone();
    case.start_pipeline()?;
    for d in [
        doc("volcano", "Volcanoes", "Volcanic eruptions eject lava, ash and gases when magma rises from chambers beneath the crust."),
        doc("bread", "Baking", "Sourdough bread rises because wild yeast and lactic acid bacteria ferment the dough overnight."),
        doc("comet", "Comets", "Comets are icy bodies that release gas and dust, forming a glowing tail as they approach the Sun."),
        doc("dumpling", "饺子", "饺子是一种传统的中国食物，通常在春节期间和家人一起包饺子、吃饺子。"),
    ] {
        case.send_json(d["id"].as_str().unwrap_or_default(), &d)?;
    }
    case.wait_indexed(WAIT)?;
    let texts = embedded_texts(&server);
    ensure!(
        texts.iter().any(|t| t.contains("Sourdough bread rises")),
        "the chunks were embedded by the server: {texts:?}"
    );
    let m = case.metrics()?;
    let ok = m
        .get("freshet_pipeline_remote_embedding_requests_total{outcome=\"ok\"}")
        .copied()
        .unwrap_or(0.0);
    ensure!(ok >= 1.0, "{m:?}");

    let node = start_query(&case, &settings)?;
    node.wait_ready(Duration::from_secs(60))?;
    for (query, want) in [
        ("lava and magma of volcanic eruptions", "volcano"),
        ("wild yeast ferment the dough", "bread"),
        ("icy comets approach the Sun", "comet"),
        ("春节吃饺子", "dumpling"),
    ] {
        let ids = node.wait_for(
            &json!({"query": query, "mode": "vector", "k": 2}),
            Duration::from_secs(30),
            |ids| ids.first().is_some_and(|d| d == want),
        )?;
        ensure!(ids[0] == want, "{query}: {ids:?}");
        ensure!(
            embedded_texts(&server).iter().any(|t| t == query),
            "the node embedded {query:?} through the server"
        );
    }
    // The languages are declared "all": a Chinese query keeps its vector route.
    let r = node.retrieve(&json!({"query": "饺子是什么食物", "mode": "hybrid", "k": 2}))?;
    ensure!(r["language"]["model_covers"] == true, "{r}");

    // The server goes away: hybrid answers from BM25, saying so; vector alone cannot answer.
    server.standin.embeddings().set_down(true);
    let r =
        node.retrieve(&json!({"query": "sourdough bread overnight", "mode": "hybrid", "k": 2}))?;
    ensure!(r["results"][0]["doc_id"] == "bread", "{r}");
    let degraded = r["degraded"].as_array().context("degraded")?;
    ensure!(
        degraded.iter().any(|d| d["route"] == "vector"
            && d["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("embedding server")),
        "{r}"
    );
    let r = node.post(
        "/v1/retrieve",
        &json!({"query": "magma chambers beneath the crust", "mode": "vector"}),
    )?;
    ensure!(r.status == 503, "{} {}", r.status, r.body);
    // Back: the vector route answers again.
    server.standin.embeddings().set_down(false);
    let ids = node
        .doc_ids(&json!({"query": "magma chambers beneath the crust", "mode": "vector", "k": 1}))?;
    ensure!(ids == ["volcano"], "{ids:?}");
    Ok(())
}

/// While the server is down the pipeline stalls: nothing is committed past the records it
/// cannot embed, /readyz says why, nothing is dead-lettered; when it is back the pipeline goes
/// on by itself and indexes them.
#[test]
fn a_provider_outage_stalls_the_pipeline_until_the_provider_is_back() -> Result<()> {
    let server = standin()?;
    let mut case = Case::new("remote_embed_outage", 1)?;
    case.extra_env = remote(&server, "standin");
    case.send_json(
        "first",
        &doc("first", "Alder", "Alder trees grow along the river banks."),
    )?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;

    server.standin.embeddings().set_down(true);
    let before = server.standin.embeddings().requests().len();
    case.send_json(
        "second",
        &doc(
            "second",
            "Basalt",
            "Basalt columns form when lava cools slowly.",
        ),
    )?;
    // The pipeline keeps asking and commits nothing past the record.
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        ensure!(
            !case.is_indexed(),
            "indexed while the embedding server was down"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    ensure!(
        server.standin.embeddings().requests().len() >= before + 3,
        "the pipeline retries"
    );
    let stalls = case.metric("freshet_pipeline_stall_retries_total{at=\"embedding_server\"}")?;
    ensure!(stalls >= 1.0, "stall_retries_total: {stalls}");
    let (status, body) = case.endpoint("/readyz")?;
    ensure!(
        status == 503 && body.contains("embedding server"),
        "{status} {body}"
    );
    let outages =
        case.metric("freshet_pipeline_remote_embedding_requests_total{outcome=\"server_error\"}")?;
    ensure!(outages >= 1.0, "server_error requests: {outages}");

    server.standin.embeddings().set_down(false);
    case.wait_indexed(WAIT)?;
    let ids: Vec<String> = case
        .tantivy_chunks()?
        .into_iter()
        .map(|c| c.doc_id)
        .collect();
    ensure!(ids.contains(&"second".to_string()), "{ids:?}");
    let dlq = case.dlq_records(1, Duration::from_secs(5))?;
    ensure!(
        dlq.is_empty(),
        "nothing is dead-lettered: {} records",
        dlq.len()
    );
    let (status, _) = case.endpoint("/readyz")?;
    ensure!(status == 200, "ready again");
    Ok(())
}

/// A text the server refuses (400, too long for the model) is dead-lettered as
/// `embedding_failed` at the `embed` stage; the other documents are indexed.
#[test]
fn a_text_the_provider_refuses_is_dead_lettered() -> Result<()> {
    let server = standin()?;
    let mut case = Case::new("remote_embed_refused", 1)?;
    case.extra_env = remote(&server, "standin-max-words-40");
    let long = "The surveyors walked the whole valley from the northern ridge to the southern \
                lake and counted every alder, birch, willow and pine they passed, writing the \
                numbers in a notebook that grew heavier with each page of careful figures, \
                while the river beside them rose with the melting snow of the late spring.";
    case.send_json(
        "good1",
        &doc("good1", "Alder", "Alder trees grow along the river banks."),
    )?;
    case.send_json("long", &doc("long", "Survey", long))?;
    case.send_json(
        "good2",
        &doc("good2", "Birch", "Birch bark peels in thin white sheets."),
    )?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    let ids: Vec<String> = case
        .tantivy_chunks()?
        .into_iter()
        .map(|c| c.doc_id)
        .collect();
    ensure!(
        ids.contains(&"good1".into()) && ids.contains(&"good2".into()),
        "{ids:?}"
    );
    ensure!(!ids.contains(&"long".into()), "{ids:?}");
    let dlq = case.dlq_records(1, Duration::from_secs(60))?;
    ensure!(dlq.len() == 1, "{} dead letters", dlq.len());
    let r = &dlq[0];
    ensure!(r.key.as_deref() == Some(b"long".as_slice()), "{:?}", r.key);
    ensure!(header(r, dlq_headers::ERROR_CLASS).as_deref() == Some("embedding_failed"));
    ensure!(header(r, dlq_headers::ERROR_STAGE).as_deref() == Some("embed"));
    let message = header(r, dlq_headers::ERROR_MESSAGE).unwrap_or_default();
    ensure!(
        message.contains("too long") && message.contains("400"),
        "{message}"
    );
    Ok(())
}

/// A collection written with one remote model refuses another (of the same dimension): the
/// pipeline stops at start with what to do, a query node does not search it and says why.
#[test]
fn another_model_on_an_existing_collection_is_refused() -> Result<()> {
    let server = standin()?;
    let mut case = Case::new("remote_embed_switch", 1)?;
    case.extra_env = remote(&server, "standin");
    case.send_json(
        "first",
        &doc("first", "Alder", "Alder trees grow along the river banks."),
    )?;
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    case.stop_pipeline()?;

    case.extra_env = remote(&server, "standin-dim-256");
    case.start_pipeline()?;
    let status = case.wait_exit(Duration::from_secs(120))?;
    ensure!(!status.success(), "the pipeline must stop");
    let log = std::fs::read_to_string(case.dir.join("pipeline.log"))?;
    let host = server
        .standin
        .base_url()
        .trim_start_matches("http://")
        .to_owned();
    ensure!(
        log.contains(&format!("openai:{host}/standin\\\""))
            || log.contains(&format!("\"openai:{host}/standin\"")),
        "names the model that wrote it: {}",
        case.log_tail()
    );
    ensure!(
        log.contains("holds vectors of model") && log.contains("configure [embedding]"),
        "says what to do: {}",
        case.log_tail()
    );

    // A query node with the other model does not search the collection: /readyz and the
    // vector route say why. The vector route needs the tantivy commit loaded too (it reads the
    // hits' stored chunks), so wait for that before asking it.
    let node = start_query(&case, &remote(&server, "standin-dim-256"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = node.get("/readyz")?;
        let body: Value = serde_json::from_str(&r.body).unwrap_or_default();
        if r.status == 503
            && body["tantivy"] == "ok"
            && body["milvus"]
                .as_str()
                .is_some_and(|m| m.contains("holds vectors of model"))
        {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "/readyz: {} {}",
            r.status,
            r.body
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = node.post(
        "/v1/retrieve",
        &json!({"query": "alder trees", "mode": "vector"}),
    )?;
    ensure!(
        r.status == 503 && r.body.contains("holds vectors of model"),
        "{} {}",
        r.status,
        r.body
    );
    drop(node);

    // The local model on the same collection is refused the same way.
    case.extra_env.clear();
    case.start_pipeline()?;
    let status = case.wait_exit(Duration::from_secs(120))?;
    ensure!(!status.success(), "the pipeline must stop");
    Ok(())
}
