//! A re-index that changes the embedding model (docs/reindex.md): generation `a` embedded with
//! all-MiniLM-L6-v2 (int8), a shadow `b` embedded with multilingual-e5-small (int8) from the
//! same topic, and a query node following the serving pointer through a switch to `b`, a
//! rollback to `a` and a switch to `b` again while queries run from several threads. No request
//! may fail, every answer must come from one generation, and its vector route must have
//! embedded the query with that generation's model: a document's own text, asked as a query,
//! is the nearest vector with a high similarity only in the space it was embedded in (a query
//! embedded with the other model still finds ids, at about random similarity).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use freshet_tests::query::{request, QueryNode};
use freshet_tests::{env, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(240);

/// One chunk each under both models' chunkings, queried by their exact text.
const DOCS: [(&str, &str); 6] = [
    (
        "lighthouse",
        "A lighthouse warns ships of rocks at night with a turning beam of light.",
    ),
    (
        "kiln",
        "A kiln fires clay pots and bricks at very high heat until they harden.",
    ),
    (
        "loom",
        "A loom weaves threads of wool and cotton into long bolts of cloth.",
    ),
    (
        "glacier",
        "Glaciers flow slowly downhill under their own weight and carve deep valleys.",
    ),
    (
        "volcano",
        "Volcanoes erupt when magma rises through cracks in the crust of the earth.",
    ),
    (
        "orchard",
        "Apple orchards are pruned in late winter so that light reaches every branch.",
    ),
];

/// The least cosine similarity of a document's own text to its chunk, embedded with one model
/// (the chunk's vector also holds its title): measured about 0.9 for both models; a query
/// embedded with the other model is near 0.
const SAME_MODEL: f64 = 0.75;

fn doc(id: &str, text: &str) -> Value {
    json!({"op": "upsert", "id": id, "title": id, "text": text, "content_type": "text/plain",
           "source": format!("test://{id}")})
}

/// One answer seen by the query threads: the document asked for, and what came back.
struct Seen {
    asked: &'static str,
    mode: &'static str,
    status: u16,
    generation: Option<String>,
    /// (chunk id, doc id, vector similarity) of each result.
    results: Vec<(String, String, Option<f64>)>,
    body: String,
}

/// Asks each document's exact text, in vector and hybrid mode, from `threads` threads until
/// `stop`.
fn query_load(
    addr: &str,
    threads: usize,
    stop: &Arc<AtomicBool>,
    seen: &Arc<Mutex<Vec<Seen>>>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..threads)
        .map(|t| {
            let (addr, stop, seen) = (addr.to_string(), stop.clone(), seen.clone());
            std::thread::spawn(move || {
                let mut i = t;
                while !stop.load(Ordering::SeqCst) {
                    let (asked, text) = DOCS[i % DOCS.len()];
                    let mode = if (i / DOCS.len()).is_multiple_of(2) {
                        "vector"
                    } else {
                        "hybrid"
                    };
                    i += 1;
                    let body = json!({"query": text, "k": 3, "mode": mode});
                    let r = request(
                        &addr,
                        "POST",
                        "/v1/retrieve",
                        &[],
                        body.to_string().as_bytes(),
                    );
                    let s = match r {
                        Ok(r) => {
                            let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
                            let results = v["results"]
                                .as_array()
                                .map(|a| {
                                    a.iter()
                                        .map(|h| {
                                            (
                                                h["chunk_id"].as_str().unwrap_or("").to_owned(),
                                                h["doc_id"].as_str().unwrap_or("").to_owned(),
                                                h["scores"]["vector"]["score"].as_f64(),
                                            )
                                        })
                                        .collect()
                                })
                                .unwrap_or_default();
                            Seen {
                                asked,
                                mode,
                                status: r.status,
                                generation: v["index"]["generation"].as_str().map(str::to_owned),
                                results,
                                body: r.body,
                            }
                        }
                        Err(e) => Seen {
                            asked,
                            mode,
                            status: 0,
                            generation: None,
                            results: Vec::new(),
                            body: format!("{e:#}"),
                        },
                    };
                    seen.lock().unwrap().push(s);
                }
            })
        })
        .collect()
}

/// The query models the node holds (`freshet_query_embedding_models`).
fn models_loaded(node: &QueryNode) -> Result<f64> {
    let metrics = node.get("/metrics")?.body;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("freshet_query_embedding_models "))
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no freshet_query_embedding_models: {metrics}"))
}

fn wait_models(node: &QueryNode, n: f64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while models_loaded(node)? != n {
        if Instant::now() > deadline {
            bail!("{} query models loaded, not {n}", models_loaded(node)?);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// The node's resident memory (MiB).
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn chunk_ids(case: &Case) -> Result<BTreeSet<String>> {
    Ok(case
        .tantivy_chunks()?
        .into_iter()
        .map(|c| c.chunk_id)
        .collect())
}

/// `freshet reindex <args>` with `case`'s configuration, which must succeed.
fn reindex(case: &Case, args: &[&str], pointer: &Path, alias: &str) -> Result<String> {
    let out = case.reindex(args, pointer, alias)?;
    if !out.success {
        bail!("freshet reindex {args:?} failed: {}", out.output);
    }
    Ok(out.output)
}

#[test]
fn switch_and_roll_back_embedding_models_under_query_load() -> Result<()> {
    let minilm = env("FRESHET_INT8_MODEL_DIR");
    let e5 = format!("{}-int8", env("FRESHET_E5_MODEL_DIR"));
    for dir in [&minilm, &e5] {
        assert!(
            Path::new(dir).join("model.onnx").exists(),
            "no exported model at {dir}: run deploy/install.sh --e5"
        );
    }
    let mut case = Case::new("reindex_model", 1)?;
    // The gate is tests/tests/reindex_e2e.rs's; here every switch is made without one.
    let no_gate = (
        "FRESHET_REINDEX_REQUIRE_GATE".to_string(),
        "false".to_string(),
    );
    case.extra_env = vec![
        ("FRESHET_EMBEDDING_MODEL_DIR".to_string(), minilm.clone()),
        no_gate.clone(),
    ];
    case.start_pipeline()?;
    for (id, text) in DOCS {
        case.send_json(id, &doc(id, text))?;
    }
    case.wait_indexed(WAIT)?;
    let pointer = case.dir().join("serving.json");
    let alias = format!("{}_served", case.collection);

    // The shadow: the same chunking, another model (so the cache copied from a gives it
    // nothing: its keys name the model).
    let mut shadow = case.shadow("b", &[("FRESHET_EMBEDDING_MODEL_DIR", e5.as_str())])?;
    shadow.produced_as(&case);
    shadow.start_pipeline()?;
    shadow.wait_indexed(WAIT)?;

    reindex(&case, &["switch", "--to", "a"], &pointer, &alias)?;
    let recorded: Value = serde_json::from_slice(&std::fs::read(&pointer)?)?;
    assert_eq!(
        recorded["serving"]["embedding"]["model_dir"], minilm,
        "the pointer names a's model: {recorded}"
    );

    // The node's own [embedding] is MiniLM (the first generation's); it learns e5 from the
    // pointer. Every query embedded anew: a request spends that time between pinning its
    // generation and searching Milvus, where a switch can fall.
    let node = case.start_query(&[
        ("FRESHET_EMBEDDING_MODEL_DIR", minilm.clone()),
        (
            "FRESHET_QUERY_SERVING_POINTER",
            pointer.display().to_string(),
        ),
        ("FRESHET_QUERY_QUERY_CACHE_ENTRIES", "0".to_string()),
    ])?;
    node.wait_ready(Duration::from_secs(60))?;
    node.wait_generation("a", Duration::from_secs(90))?;
    assert_eq!(models_loaded(&node)?, 1.0);
    // The node's memory, sampled through the switches.
    let pid = node.pid();
    let (sampling, peak) = (
        Arc::new(AtomicBool::new(true)),
        Arc::new(Mutex::new(0.0f64)),
    );
    let sampler = {
        let (sampling, peak) = (sampling.clone(), peak.clone());
        std::thread::spawn(move || {
            while sampling.load(Ordering::SeqCst) {
                let mut p = peak.lock().unwrap();
                *p = p.max(rss_mib(pid));
                drop(p);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let rss_a = rss_mib(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let load = query_load(&node.addr, 3, &stop, &seen);
    std::thread::sleep(Duration::from_secs(2));

    reindex(&shadow, &["switch", "--to", "b"], &pointer, &alias)?;
    node.wait_generation("b", Duration::from_secs(90))?;
    let index = node.get("/v1/index")?.json()?;
    assert_eq!(index["generation"], "b", "{index}");
    // a's model goes once no request pins a any more.
    wait_models(&node, 1.0)?;
    std::thread::sleep(Duration::from_secs(2));
    let rss_b = rss_mib(pid);

    let out = reindex(&shadow, &["rollback"], &pointer, &alias)?;
    assert!(out.contains("serving generation a"), "{out}");
    node.wait_generation("a", Duration::from_secs(90))?;
    wait_models(&node, 1.0)?;
    std::thread::sleep(Duration::from_secs(2));
    let rss_back = rss_mib(pid);
    reindex(&shadow, &["switch", "--to", "b"], &pointer, &alias)?;
    node.wait_generation("b", Duration::from_secs(90))?;
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.join().expect("query thread");
    }
    wait_models(&node, 1.0)?;
    sampling.store(false, Ordering::SeqCst);
    sampler.join().expect("memory sampler");
    eprintln!(
        "query node memory: {rss_a:.0} MiB serving a (MiniLM), {rss_b:.0} MiB serving b (e5) \
         after a's model was dropped, {rss_back:.0} MiB back on a after b's was dropped, \
         {:.0} MiB at the peak of the switches",
        *peak.lock().unwrap()
    );
    case.drop_alias(&alias)?;

    let (ids_a, ids_b) = (chunk_ids(&case)?, chunk_ids(&shadow)?);
    let seen = seen.lock().unwrap();
    let mut served = BTreeSet::new();
    let mut lowest: std::collections::BTreeMap<String, f64> = Default::default();
    for s in seen.iter() {
        assert_eq!(s.status, 200, "a request failed: {}", s.body);
        let g = s.generation.as_deref().unwrap_or("none");
        served.insert(g.to_owned());
        let own = match g {
            "a" => &ids_a,
            "b" => &ids_b,
            other => panic!("an answer of generation {other}: {}", s.body),
        };
        let (top_chunk, top_doc, top_vector) = s
            .results
            .first()
            .with_context(|| format!("no results: {}", s.body))?;
        assert!(
            own.contains(top_chunk),
            "a chunk not of generation {g}: {}",
            s.body
        );
        // The vector route embedded the query with the pinned generation's model: the
        // document's own chunk is the nearest, with a high similarity.
        let sim = top_vector.with_context(|| format!("no vector score: {}", s.body))?;
        assert!(
            sim >= SAME_MODEL && top_doc == s.asked,
            "generation {g}, {} query for {}: top {top_doc} at similarity {sim}: the query was \
             not embedded with {g}'s model\n{}",
            s.mode,
            s.asked,
            s.body
        );
        let low = lowest.entry(g.to_owned()).or_insert(f64::MAX);
        *low = low.min(sim);
    }
    assert_eq!(served, BTreeSet::from(["a".to_string(), "b".to_string()]));
    let metrics = node.get("/metrics")?.body;
    assert!(
        metrics.contains("freshet_query_index_switches_total 3"),
        "{metrics}"
    );
    eprintln!(
        "{} answers under load, each from one generation with its model; lowest top vector \
         similarity per generation: {lowest:?}",
        seen.len()
    );
    Ok(())
}
