//! The client packages people already use, unchanged, against a live node (real broker, Milvus,
//! model): LangChain's `PathwayVectorClient` and LlamaIndex's `PathwayRetriever` on `/pathway`
//! (tests/fixtures/pathway_clients.py: k, a metadata filter, statistics, inputs), Pathway's own
//! `DocumentStoreClient` and `VectorStoreClient` (tests/fixtures/pathway_document_store.py, in
//! FRESHET_PATHWAY_PYTHON's venv: a glob too), and the
//! pytest suite of freshet's own Python client (clients/python/tests: retrieve, answer whole and
//! streamed, index wait, writes through the ingest service, its LangChain and LlamaIndex
//! retrievers). The packages are the pinned ones deploy/install.sh puts in FRESHET_PYTHON's venv.

use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use freshet_tests::llm::LiveStandIn;
use freshet_tests::{env, workspace_root, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);

fn doc(id: &str, source: &str, text: &str, lang: &str, acl: Value) -> Value {
    json!({"op": "upsert", "id": id, "title": format!("Title of {id}"), "text": text,
           "content_type": "text/plain", "source": source, "metadata": {"lang": lang}, "acl": acl})
}

/// A long text: several chunks of one document.
fn long_guide() -> String {
    (0..40)
        .map(|i| {
            format!(
                "Paragraph {i}. Herons wait at the estuary when the tide turns, standing still in \
                 the shallow water while small fish gather near the reeds and the mud flats.\n\n"
            )
        })
        .collect()
}

fn ids(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default()
}

fn input_ids(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(|d| d["doc_id"].as_str()).collect())
        .unwrap_or_default()
}

#[test]
fn pathway_clients_and_the_python_client_against_a_live_node() -> Result<()> {
    let mut case = Case::new("clients", 1)?;
    case.start_pipeline()?;
    let docs = [
        doc(
            "guide",
            "docs/en/guide.md",
            &long_guide(),
            "en",
            json!("public"),
        ),
        doc(
            "notes",
            "notes/todo.md",
            "Salmon swim upstream past the estuary to spawn in autumn.",
            "fr",
            json!("public"),
        ),
        doc(
            "secret",
            "docs/secret.md",
            "The estuary dredging budget for herons is confidential.",
            "en",
            json!(["group:x"]),
        ),
    ];
    for d in &docs {
        case.send_json(d["id"].as_str().unwrap_or_default(), d)?;
    }
    case.wait_indexed(WAIT)?;
    let chunks = case.tantivy_chunks()?;
    let guide_chunks = chunks.iter().filter(|c| c.doc_id == "guide").count();
    ensure!(guide_chunks > 1, "the guide is one chunk: {guide_chunks}");

    let model = LiveStandIn::start()?;
    let node = case.start_query(&model.node_settings("standin"))?;
    node.wait_ready(Duration::from_secs(60))?;
    let python = env("FRESHET_PYTHON");

    // LangChain's and LlamaIndex's Pathway clients, no credential: public documents only.
    let out = Command::new(&python)
        .arg(workspace_root().join("tests/fixtures/pathway_clients.py"))
        .arg(format!("http://{}/pathway", node.addr))
        .arg("herons waiting at the estuary")
        .arg("contains(path, 'notes') && lang == 'fr'")
        .arg("docs/**")
        .output()
        .with_context(|| format!("running {python}"))?;
    ensure!(
        out.status.success(),
        "pathway_clients.py failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        node.log_tail()
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| String::from_utf8_lossy(&out.stdout).into_owned())?;
    let lc = &v["langchain"];
    assert_eq!(ids(&lc["k1"]), ["guide"], "{lc}");
    let k3 = ids(&lc["k3"]);
    assert!(k3.len() == 3 && k3[0] == "guide", "{lc}");
    assert!(!k3.contains(&"secret"), "{lc}");
    assert_eq!(ids(&lc["filtered"]), ["notes"], "{lc}");
    let dists: Vec<f64> = lc["scored"]
        .as_array()
        .context("scored")?
        .iter()
        .filter_map(|p| p[1].as_f64())
        .collect();
    assert!(
        dists.len() == 3 && dists.windows(2).all(|w| w[0] <= w[1]),
        "{lc}"
    );
    assert_eq!(lc["retriever"].as_array().map(Vec::len), Some(2), "{lc}");
    // Statistics count documents, not the guide's chunks.
    assert_eq!(lc["statistics"]["file_count"], 2, "{lc}");
    assert!(
        lc["statistics"]["last_indexed"].as_u64().unwrap_or(0) > 0,
        "{lc}"
    );
    assert_eq!(input_ids(&lc["inputs"]), ["guide", "notes"], "{lc}");
    assert_eq!(lc["inputs"][0]["path"], "docs/en/guide.md", "{lc}");
    assert_eq!(lc["inputs"][0]["lang"], "en", "{lc}");
    assert_eq!(input_ids(&lc["inputs_filtered"]), ["notes"], "{lc}");
    assert_eq!(input_ids(&lc["inputs_glob"]), ["guide"], "{lc}");

    let li = &v["llamaindex"];
    let retrieved = li["retrieve"].as_array().context("retrieve")?;
    assert_eq!(retrieved.len(), 2, "{li}");
    assert_eq!(retrieved[0][0], "guide", "{li}");
    assert!(retrieved[0][1].as_f64() >= retrieved[1][1].as_f64(), "{li}");
    assert!(
        li["texts"][0]
            .as_str()
            .is_some_and(|t| t.contains("Herons wait")),
        "{li}"
    );
    assert_eq!(ids(&li["filtered"]), ["notes"], "{li}");
    assert_eq!(li["statistics"]["file_count"], 2, "{li}");
    assert_eq!(input_ids(&li["inputs"]), ["guide", "notes"], "{li}");
    assert_eq!(input_ids(&li["inputs_glob"]), ["guide"], "{li}");

    // Pathway's own clients (the pathway package, in its own venv: install.sh --pathway).
    {
        let pathway_python = env("FRESHET_PATHWAY_PYTHON");
        let out = Command::new(&pathway_python)
            .arg(workspace_root().join("tests/fixtures/pathway_document_store.py"))
            .arg(format!("http://{}/pathway", node.addr))
            .arg("herons waiting at the estuary")
            .arg("contains(path, 'notes')")
            .arg("docs/**")
            .output()
            .with_context(|| format!("running {pathway_python}"))?;
        ensure!(
            out.status.success(),
            "pathway_document_store.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pw: Value = serde_json::from_slice(&out.stdout)
            .with_context(|| String::from_utf8_lossy(&out.stdout).into_owned())?;
        assert_eq!(ids(&pw["k1"]), ["guide"], "{pw}");
        assert_eq!(ids(&pw["filtered"]), ["notes"], "{pw}");
        let glob = ids(&pw["glob"]);
        assert!(
            !glob.is_empty() && glob.iter().all(|d| *d == "guide"),
            "{pw}"
        );
        assert_eq!(pw["statistics"]["file_count"], 2, "{pw}");
        assert_eq!(input_ids(&pw["inputs"]), ["guide", "notes"], "{pw}");
        assert_eq!(input_ids(&pw["inputs_status"]), ["guide"], "{pw}");
        assert_eq!(
            pw["inputs_status"][0]["_indexing_status"], "INDEXED",
            "{pw}"
        );
        assert_eq!(input_ids(&pw["legacy_inputs"]), ["notes"], "{pw}");
    }

    // freshet's own client: its pytest suite against this node and an ingest service.
    let ingest = case.start_ingest(&[(
        "FRESHET_INGEST_KEYS",
        r#"[{name = "py", key = "py-key", id_prefixes = ["pyclient/"], may_grant = ["*"], may_publish_public = true, may_delete = true}]"#.into(),
    )])?;
    let client_dir = workspace_root().join("clients/python");
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(client_dir.join("tests"))
        .env("PYTHONPATH", &client_dir)
        .env("FRESHET_QUERY_URL", format!("http://{}", node.addr))
        .env("FRESHET_INGEST_URL", format!("http://{}", ingest.addr))
        .env("FRESHET_INGEST_KEY", "py-key")
        .output()
        .with_context(|| format!("running {python} -m pytest"))?;
    let report = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "the Python client's tests failed:\n{report}\n{}\nnode:\n{}\ningest:\n{}",
        String::from_utf8_lossy(&out.stderr),
        node.log_tail(),
        ingest.log_tail()
    );
    // Every test ran: none skipped, none deselected.
    ensure!(
        report.contains("5 passed") && !report.contains("skipped"),
        "{report}"
    );
    case.stop_pipeline()?;
    Ok(())
}
