//! Re-indexing without downtime (docs/reindex.md): two generations of one corpus built by two
//! pipelines from the same topic (chunking A, and a shadow with smaller chunks, B), a query
//! node following the serving pointer, and switches back and forth while queries run from
//! several threads. No request may fail, and every answer must come from one generation.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Result};
use freshet_tests::query::{request, QueryNode};
use freshet_tests::Case;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);

const TOPICS: [(&str, &str); 6] = [
    ("glacier", "Glaciers form where snow accumulates faster than it melts, compacting into dense ice that flows slowly downhill under its own weight. Crevasses open where the ice bends over bedrock steps, and meltwater carves channels beneath the glacier that carry sediment to outwash plains far below the snout."),
    ("volcano", "Volcanoes erupt when magma rises through cracks in the crust, releasing lava, ash and gases. Shield volcanoes build gentle slopes from fluid basalt flows, while stratovolcanoes alternate explosive ash layers with sticky lava, and their eruptions can bury valleys under pyroclastic flows within minutes."),
    ("bread", "Sourdough bread rises because wild yeast and lactic acid bacteria ferment the dough overnight. Bakers feed the starter with flour and water every day, fold the dough to build gluten strength, and bake the loaves in a hot covered pot so that steam keeps the crust soft while the crumb expands."),
    ("comet", "Comets are icy bodies from the outer solar system that release gas and dust when they approach the Sun. The solar wind pushes the released material into a glowing tail that points away from the Sun, and the debris they leave along their orbits becomes the meteor showers seen from Earth each year."),
    ("orchard", "Apple orchards are pruned in late winter so that light reaches every branch in summer. Growers graft young trees onto dwarfing rootstocks, thin the fruitlets after blossom to raise the size of the remaining apples, and pick each variety by hand when its seeds turn brown and its flesh softens."),
    ("harbour", "A harbour protects ships from waves with breakwaters of stacked rock or concrete blocks. Pilots guide large vessels through dredged channels marked by buoys, tugboats push them against the quay, and cranes unload containers onto trucks and trains that carry the cargo inland within hours."),
];

/// Short documents: one chunk under both chunkings, so the shadow finds their vectors in the
/// embedding cache.
const SHORT: [(&str, &str); 3] = [
    ("lighthouse", "A lighthouse warns ships of rocks at night."),
    ("kiln", "A kiln fires clay pots at high heat."),
    ("loom", "A loom weaves thread into cloth."),
];

fn doc(id: &str, text: &str) -> Value {
    json!({"op": "upsert", "id": id, "title": id, "text": text, "content_type": "text/plain",
           "source": format!("test://{id}")})
}

/// One answer seen by the query threads.
struct Seen {
    status: u16,
    generation: Option<String>,
    chunk_ids: Vec<String>,
    body: String,
}

/// Runs hybrid and vector retrievals from `threads` threads until `stop`.
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
                    let (topic, _) = TOPICS[i % TOPICS.len()];
                    let mode = if i % 2 == 0 { "hybrid" } else { "vector" };
                    let body = json!({"query": format!("{topic} how does it work"), "k": 8,
                                      "mode": mode});
                    i += 1;
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
                            Seen {
                                status: r.status,
                                generation: v["index"]["generation"].as_str().map(str::to_owned),
                                chunk_ids: v["results"]
                                    .as_array()
                                    .map(|a| {
                                        a.iter()
                                            .map(|h| {
                                                h["chunk_id"].as_str().unwrap_or("").to_owned()
                                            })
                                            .collect()
                                    })
                                    .unwrap_or_default(),
                                body: r.body,
                            }
                        }
                        Err(e) => Seen {
                            status: 0,
                            generation: None,
                            chunk_ids: Vec::new(),
                            body: format!("{e:#}"),
                        },
                    };
                    seen.lock().unwrap().push(s);
                }
            })
        })
        .collect()
}

fn chunk_ids(case: &Case) -> Result<BTreeSet<String>> {
    Ok(case
        .tantivy_chunks()?
        .into_iter()
        .map(|c| c.chunk_id)
        .collect())
}

/// The BEIR-style set and the canary file of the gate over the corpus above: one query per
/// long document and one for a short one, each answered by its document.
fn gate_files(dir: &Path) -> Result<(String, String)> {
    let set = dir.join("gate-set");
    std::fs::create_dir_all(set.join("qrels"))?;
    let mut corpus = String::new();
    for (id, text) in TOPICS.iter().chain(&SHORT) {
        corpus += &format!("{}\n", json!({"_id": id, "title": id, "text": text}));
    }
    std::fs::write(set.join("corpus.jsonl"), corpus)?;
    let questions = [
        ("glacier", "how does ice flow downhill and open crevasses"),
        (
            "volcano",
            "what erupts from shield volcanoes and stratovolcanoes",
        ),
        ("bread", "how does sourdough ferment overnight"),
        ("comet", "why does a comet grow a glowing tail near the Sun"),
        ("orchard", "when are apple trees pruned and grafted"),
        (
            "harbour",
            "how do breakwaters and tugboats protect ships in port",
        ),
        ("lighthouse", "what warns ships of rocks at night"),
    ];
    let (mut queries, mut qrels, mut canary) = (
        String::new(),
        "query-id\tcorpus-id\tscore\n".to_string(),
        String::new(),
    );
    for (id, q) in questions {
        queries += &format!("{}\n", json!({"_id": format!("q-{id}"), "text": q}));
        qrels += &format!("q-{id}\t{id}\t1\n");
        canary += &format!(
            "{}\n",
            json!({"query": q, "mode": "hybrid", "relevant": [id]})
        );
    }
    std::fs::write(set.join("queries.jsonl"), queries)?;
    std::fs::write(set.join("qrels/test.tsv"), qrels)?;
    let canary_path = dir.join("canary.jsonl");
    std::fs::write(&canary_path, canary)?;
    Ok((set.display().to_string(), canary_path.display().to_string()))
}

/// `freshet-tools gate` of `candidate` (against `serving`), writing the verdict to `out`.
fn run_gate(
    case: &Case,
    candidate: &QueryNode,
    serving: Option<&QueryNode>,
    files: &(String, String),
    out: &Path,
) -> Result<(bool, String)> {
    let out_s = out.display().to_string();
    let args = [
        "--dataset",
        files.0.as_str(),
        "--canary",
        files.1.as_str(),
        "--floor",
        "0.5",
        "--tolerance",
        "0.05",
        "--out",
        out_s.as_str(),
    ];
    let r = case.gate(&candidate.addr, serving.map(|n| n.addr.as_str()), &args)?;
    Ok((r.success, r.output))
}

fn dropped_missing(node: &QueryNode) -> Result<f64> {
    let metrics = node.get("/metrics")?.body;
    Ok(metrics
        .lines()
        .find_map(|l| l.strip_prefix("freshet_query_chunks_dropped_total{reason=\"missing\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0))
}

/// `freshet reindex <args>` with `case`'s configuration, which must succeed.
fn reindex(case: &Case, args: &[&str], pointer: &Path, alias: &str) -> Result<String> {
    let out = case.reindex(args, pointer, alias)?;
    if !out.success {
        bail!("freshet reindex {args:?} failed: {}", out.output);
    }
    Ok(out.output)
}

/// `freshet reindex <args>` with `case`'s configuration, which must be refused.
fn refused(case: &Case, args: &[&str], pointer: &Path, alias: &str) -> Result<String> {
    let out = case.reindex(args, pointer, alias)?;
    if out.success {
        bail!("freshet reindex {args:?} was not refused: {}", out.output);
    }
    Ok(out.output)
}

#[test]
fn switch_and_roll_back_generations_under_query_load() -> Result<()> {
    let mut case = Case::new("reindex_switch", 1)?;
    case.start_pipeline()?;
    for (id, text) in TOPICS.iter().chain(&SHORT) {
        case.send_json(id, &doc(id, text))?;
    }
    case.wait_indexed(WAIT)?;
    let pointer = case.dir().join("serving.json");
    let alias = format!("{}_served", case.collection);

    // The shadow: smaller chunks, from the beginning of the same topic, with a copy of the
    // serving generation's embedding cache.
    let mut shadow = case.shadow(
        "b",
        &[
            ("FRESHET_CHUNKING_MAX_TOKENS", "48"),
            ("FRESHET_CHUNKING_OVERLAP_TOKENS", "8"),
        ],
    )?;
    shadow.produced_as(&case);
    shadow.start_pipeline()?;
    shadow.wait_indexed(WAIT)?;
    let m = shadow.metrics()?;
    let count = |outcome: &str| {
        m.get(&format!(
            "freshet_pipeline_embedding_texts_total{{outcome=\"{outcome}\"}}"
        ))
        .copied()
        .unwrap_or(0.0)
    };
    let (hit, embedded) = (count("cache_hit"), count("embedded"));
    eprintln!("shadow build: {hit} cache hits, {embedded} embedded");
    assert!(
        hit >= SHORT.len() as f64,
        "the shadow re-used no cached vectors of unchanged chunks: {m:?}"
    );
    let (ids_a, ids_b) = (chunk_ids(&case)?, chunk_ids(&shadow)?);
    assert!(
        ids_b.len() > ids_a.len(),
        "B has smaller chunks: {ids_a:?} {ids_b:?}"
    );

    // The gate scores a generation through a node serving it: a first generation against the
    // floor alone.
    let files = gate_files(&case.dir())?;
    let node_a = case.start_query(&[])?;
    node_a.wait_ready(Duration::from_secs(60))?;
    let verdict_a = case.dir().join("verdict-a.json");
    let (passed, out) = run_gate(&case, &node_a, None, &files, &verdict_a)?;
    assert!(passed, "{out}");
    drop(node_a);

    // The first pointer: generation a, only with a verdict.
    let why = refused(&case, &["switch", "--to", "a"], &pointer, &alias)?;
    assert!(why.contains("no retrieval gate"), "{why}");
    let verdict_a_s = verdict_a.display().to_string();
    reindex(
        &case,
        &["switch", "--to", "a", "--gate", &verdict_a_s],
        &pointer,
        &alias,
    )?;
    assert_eq!(
        case.alias_target(&alias)?.as_deref(),
        Some(case.collection.as_str())
    );

    // A shadow behind the topic is refused, and so is a configuration whose index and
    // collection do not belong together.
    shadow.stop_pipeline()?;
    case.send_json(
        "kiln",
        &doc("kiln", "A kiln fires clay pots and bricks at high heat."),
    )?;
    case.wait_indexed(WAIT)?;
    let why = refused(&shadow, &["switch", "--to", "b"], &pointer, &alias)?;
    assert!(
        why.contains("lags the topics by 1 record(s)") && why.contains("max_lag"),
        "{why}"
    );
    let status = reindex(&shadow, &["status"], &pointer, &alias)?;
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("candidate") && l.contains("lag        1")),
        "{status}"
    );
    let mut crossed = shadow.shadow("x", &[])?;
    crossed.tantivy = shadow.tantivy_path();
    crossed.collection.clone_from(&case.collection);
    // Not this case's collection to drop when it goes.
    crossed.keep = true;
    let why = refused(&crossed, &["switch", "--to", "x"], &pointer, &alias)?;
    assert!(why.contains("belongs to index"), "{why}");
    drop(crossed);
    shadow.run_args.clear();
    shadow.produced_as(&case);
    shadow.start_pipeline()?;
    shadow.wait_indexed(WAIT)?;

    // Every query embedded anew (no cache of query vectors): a request spends that time
    // between pinning its generation and searching Milvus, where a switch can fall.
    let node = case.start_query(&[
        (
            "FRESHET_QUERY_SERVING_POINTER",
            pointer.display().to_string(),
        ),
        ("FRESHET_QUERY_QUERY_CACHE_ENTRIES", "0".to_string()),
    ])?;
    node.wait_ready(Duration::from_secs(60))?;
    node.wait_generation("a", Duration::from_secs(60))?;

    // The gate of b against a, as served; and of a bad shadow c (the long documents over its
    // text limit, so it holds a third of the corpus), which fails and is refused.
    let node_b = shadow.start_query(&[])?;
    node_b.wait_ready(Duration::from_secs(60))?;
    let verdict_b = case.dir().join("verdict-b.json");
    let (passed, out) = run_gate(&case, &node_b, Some(&node), &files, &verdict_b)?;
    assert!(passed, "{out}");
    drop(node_b);
    let verdict_b = verdict_b.display().to_string();
    let mut bad = case.shadow("c", &[("FRESHET_LIMITS_MAX_TEXT_BYTES", "120")])?;
    bad.produced_as(&case);
    bad.start_pipeline()?;
    bad.wait_indexed(WAIT)?;
    let node_c = bad.start_query(&[])?;
    node_c.wait_ready(Duration::from_secs(60))?;
    let verdict_c = case.dir().join("verdict-c.json");
    let (passed, out) = run_gate(&case, &node_c, Some(&node), &files, &verdict_c)?;
    assert!(
        !passed,
        "the gate passed a generation missing most documents: {out}"
    );
    eprintln!("gate of the bad shadow: {out}");
    let verdict_c = verdict_c.display().to_string();
    let why = refused(
        &bad,
        &["switch", "--to", "c", "--gate", &verdict_c],
        &pointer,
        &alias,
    )?;
    assert!(
        why.contains("gate failed") && why.contains("below"),
        "{why}"
    );
    let why = refused(
        &bad,
        &["switch", "--to", "c", "--gate", &verdict_b],
        &pointer,
        &alias,
    )?;
    assert!(why.contains("the gate verdict scored index"), "{why}");
    drop(node_c);
    // Retired: refused while its pipeline runs, then its collection and index are gone.
    let why = refused(&bad, &["retire"], &pointer, &alias)?;
    assert!(why.contains("stop it first"), "{why}");
    bad.stop_pipeline()?;
    let out = reindex(&bad, &["retire"], &pointer, &alias)?;
    assert!(out.contains("retired"), "{out}");
    assert!(!bad.tantivy_path().exists() && !bad.has_collection()?);
    drop(bad);

    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let load = query_load(&node.addr, 3, &stop, &seen);
    std::thread::sleep(Duration::from_secs(1));

    // Switch to b with no writes going on: no vector hit of one generation meets the other's
    // snapshot (it would be dropped as missing).
    reindex(
        &shadow,
        &["switch", "--to", "b", "--gate", &verdict_b],
        &pointer,
        &alias,
    )?;
    node.wait_generation("b", Duration::from_secs(60))?;
    assert_eq!(
        case.alias_target(&alias)?.as_deref(),
        Some(shadow.collection.as_str())
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        dropped_missing(&node)?,
        0.0,
        "vector hits of another generation"
    );

    // A document updated meanwhile shows in b.
    case.send_json("bread", &doc("bread", "Zeppelin airships float because their envelopes hold lifting gas lighter than air, and engines push them slowly across the sky."))?;
    shadow.produced_as(&case);
    shadow.wait_indexed(WAIT)?;
    case.wait_indexed(WAIT)?;
    // The node loads the commit after it is durable (a file notification, or its poll).
    let query = json!({"query": "zeppelin airships lifting gas", "k": 3});
    node.wait_for(&query, WAIT, |ids| {
        ids.first().map(String::as_str) == Some("bread")
    })?;
    let r = node.retrieve(&query)?;
    assert_eq!(r["index"]["generation"], "b", "{r}");
    assert_eq!(r["results"][0]["doc_id"], "bread", "{r}");
    // Milvus' bounded staleness: deleted vectors may still be found for a few seconds.
    std::thread::sleep(Duration::from_secs(6));
    let settled = dropped_missing(&node)?;

    // Roll back to a, then switch to b again.
    let out = reindex(&shadow, &["rollback"], &pointer, &alias)?;
    assert!(out.contains("serving generation a"), "{out}");
    node.wait_generation("a", Duration::from_secs(60))?;
    assert_eq!(
        case.alias_target(&alias)?.as_deref(),
        Some(case.collection.as_str())
    );
    std::thread::sleep(Duration::from_secs(1));
    reindex(
        &shadow,
        &["switch", "--to", "b", "--gate", &verdict_b],
        &pointer,
        &alias,
    )?;
    node.wait_generation("b", Duration::from_secs(60))?;
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.join().expect("query thread");
    }
    assert_eq!(
        dropped_missing(&node)?,
        settled,
        "vector hits of another generation"
    );

    let status = reindex(&shadow, &["status"], &pointer, &alias)?;
    assert!(
        status.contains("serving") && status.contains("previous") && status.contains(" b "),
        "{status}"
    );
    let why = refused(&case, &["retire"], &pointer, &alias)?;
    assert!(why.contains("rollback target"), "{why}");
    let history = std::fs::read_to_string(case.dir().join("serving.json.history.jsonl"))?;
    let whats: Vec<String> = history
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).map(|v| {
                format!(
                    "{}→{}",
                    v["what"].as_str().unwrap_or(""),
                    v["to"].as_str().unwrap_or("")
                )
            })
        })
        .collect::<std::result::Result<_, _>>()?;
    assert_eq!(
        whats,
        ["switch→a", "retire→", "switch→b", "rollback→a", "switch→b"],
        "{history}"
    );
    case.drop_alias(&alias)?;

    // Every chunk either generation held at some point.
    let all_a: BTreeSet<String> = ids_a.union(&chunk_ids(&case)?).cloned().collect();
    let all_b: BTreeSet<String> = ids_b.union(&chunk_ids(&shadow)?).cloned().collect();
    let seen = seen.lock().unwrap();
    let mut served = BTreeSet::new();
    for s in seen.iter() {
        assert_eq!(s.status, 200, "a request failed: {}", s.body);
        let g = s.generation.as_deref().unwrap_or("none");
        served.insert(g.to_owned());
        let own = match g {
            "a" => &all_a,
            "b" => &all_b,
            other => panic!("an answer of generation {other}: {}", s.body),
        };
        let foreign: Vec<_> = s.chunk_ids.iter().filter(|c| !own.contains(*c)).collect();
        assert!(
            foreign.is_empty(),
            "generation {g} answered with chunks of the other: {foreign:?}"
        );
        assert!(!s.chunk_ids.is_empty(), "no results: {}", s.body);
    }
    assert_eq!(served, BTreeSet::from(["a".to_string(), "b".to_string()]));
    let metrics = node.get("/metrics")?.body;
    assert!(
        metrics.contains("freshet_query_index_generation{generation=\"b\"} 1")
            && !metrics.contains("generation=\"a\""),
        "{metrics}"
    );
    assert!(
        metrics.contains("freshet_query_index_switches_total 3"),
        "{metrics}"
    );
    eprintln!(
        "{} answers under load, all from one generation each",
        seen.len()
    );
    Ok(())
}
