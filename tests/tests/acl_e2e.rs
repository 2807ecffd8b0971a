//! ACLs fail closed, end to end with the real broker, pipeline, Milvus, model and query node:
//! a misspelt ACL key and (under `[limits] require_acl`) a document that states no ACL go to
//! the dead-letter topic with their class and are searchable by nobody, while `"acl": "public"`
//! and stated principals index as before; `freshet publish` and `freshet watch` attach the ACL
//! of `--acl` / `--public` and the `[[files.acl]]` rules, a watcher restarted with another ACL
//! re-sends its unchanged files with it, and a symlink out of the watched directory is not
//! followed. A query without the principals never sees a restricted document.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use freshet_operators::limits::RecordLimits;
use freshet_tests::query::QueryNode;
use freshet_tests::{expected_chunks_with, freshet_bin, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
const QUERY: &str = "heron estuary tide report";

fn text(id: &str) -> String {
    format!("The {id} heron report: herons wait at the estuary when the tide turns.")
}

/// Document ids a query finds with `principals` (`None`: none given), in BM25 and vector mode
/// (they must agree).
fn visible(node: &QueryNode, principals: Option<&[&str]>) -> Result<BTreeSet<String>> {
    let mut seen = Vec::new();
    for mode in ["bm25", "vector"] {
        let mut body = json!({"query": QUERY, "mode": mode, "k": 20});
        if let Some(p) = principals {
            body["principals"] = json!(p);
        }
        seen.push(node.doc_ids(&body)?.into_iter().collect::<BTreeSet<_>>());
    }
    ensure!(
        seen[0] == seen[1],
        "bm25 {:?} and vector {:?} differ",
        seen[0],
        seen[1]
    );
    Ok(seen.remove(0))
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn strict_case(name: &str) -> Result<Case> {
    let mut case = Case::new(name, 1)?;
    case.extra_env
        .push(("FRESHET_LIMITS_REQUIRE_ACL".into(), "true".into()));
    Ok(case)
}

/// The requests name their principals: a node behind an authenticating proxy.
fn start_node(case: &Case) -> Result<QueryNode> {
    let node = case.start_query(&[("FRESHET_QUERY_TRUST_REQUEST_PRINCIPALS", "true".into())])?;
    node.wait_ready(Duration::from_secs(60))?;
    Ok(node)
}

#[test]
fn acl_mistakes_go_to_the_dead_letters_and_stay_unsearchable() -> Result<()> {
    let mut case = strict_case("acl_contract")?;
    let records: Vec<(&str, Value)> = vec![
        (
            "stated-public",
            json!({"text": text("public"), "acl": "public"}),
        ),
        (
            "restricted",
            json!({"text": text("hr"), "acl": ["group:hr"]}),
        ),
        // indexed, then sent again with its ACL misspelt: the refusal takes it out
        (
            "was-restricted",
            json!({"text": text("old"), "acl": ["group:hr"]}),
        ),
        (
            "was-restricted",
            json!({"text": text("old"), "ACL": ["group:hr"]}),
        ),
        (
            "misspelt",
            json!({"text": text("misspelt"), "acls": ["group:hr"]}),
        ),
        (
            "in-metadata",
            json!({"text": text("meta"), "metadata": {"acl": ["group:hr"]}}),
        ),
        ("unstated", json!({"text": text("unstated")})),
        ("empty", json!({"text": text("empty"), "acl": []})),
        (
            "reserved",
            json!({"text": text("reserved"), "acl": ["everyone"]}),
        ),
    ];
    let mut log = Vec::new();
    for (id, v) in &records {
        let bytes = serde_json::to_vec(v)?;
        case.send(id, Some(&bytes))?;
        log.push((id.to_string(), Some(bytes)));
    }
    case.start_pipeline()?;
    case.wait_indexed(WAIT)?;
    let strict = RecordLimits {
        require_acl: true,
        ..RecordLimits::default()
    };
    case.assert_holds_exactly(&expected_chunks_with(&log, &strict)?)?;

    let dead = case.dlq_records(6, Duration::from_secs(60))?;
    let classes: BTreeMap<String, (String, String)> = dead
        .iter()
        .map(|r| {
            let h = |n: &str| {
                r.header(n)
                    .flatten()
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default()
            };
            let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
            (key, (h("freshet.error.class"), h("freshet.error.stage")))
        })
        .collect();
    let want = |class: &str| (class.to_string(), "decode".to_string());
    assert_eq!(
        classes,
        BTreeMap::from([
            ("was-restricted".to_string(), want("invalid_field")),
            ("misspelt".to_string(), want("invalid_field")),
            ("in-metadata".to_string(), want("invalid_field")),
            ("unstated".to_string(), want("missing_acl")),
            ("empty".to_string(), want("missing_acl")),
            ("reserved".to_string(), want("invalid_field")),
        ]),
        "{dead:?}"
    );
    assert_eq!(
        case.metric("freshet_pipeline_dlq_records_total{class=\"missing_acl\",stage=\"decode\"}")?,
        2.0
    );

    let node = start_node(&case)?;
    let everyone = set(&["stated-public"]);
    node.wait_for(
        &json!({"query": QUERY, "mode": "vector", "k": 20, "principals": ["group:hr"]}),
        WAIT,
        |ids| ids.len() == 2,
    )?;
    assert_eq!(visible(&node, None)?, everyone);
    assert_eq!(visible(&node, Some(&["group:eng"]))?, everyone);
    assert_eq!(
        visible(&node, Some(&["group:hr"]))?,
        set(&["restricted", "stated-public"])
    );
    // "public" is never a principal a caller can use to see more
    assert_eq!(
        visible(&node, Some(&["public", "everyone", "*"]))?,
        everyone
    );
    case.stop_pipeline()?;
    Ok(())
}

/// `freshet publish` against this case's topic, with `--config config` and `args`.
fn publish(case: &Case, config: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new(freshet_bin())
        .arg("publish")
        .arg("--config")
        .arg(config)
        .args(args)
        .env("FRESHET_KAFKA_BROKERS", &case.kafka.brokers)
        .env("FRESHET_KAFKA_TOPIC", &case.kafka.topic)
        .env("FRESHET_LIMITS_REQUIRE_ACL", "true")
        .output()
        .context("running freshet publish")?;
    ensure!(
        out.status.success(),
        "freshet publish failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn publish_and_watch_attach_acls_and_follow_acl_changes() -> Result<()> {
    let mut case = strict_case("acl_files")?;
    let config = case.dir.join("freshet.toml");
    fs::write(
        &config,
        "[[files.acl]]\nglob = \"hr/**\"\nprincipals = [\"group:hr\"]\n\
         [[files.acl]]\nglob = \"handbook/**\"\npublic = true\n",
    )?;
    // publish --dir: the rules, then --acl for the rest
    let docs = case.dir.join("docs");
    fs::create_dir_all(docs.join("hr"))?;
    fs::create_dir_all(docs.join("handbook"))?;
    fs::write(docs.join("hr/pay.md"), format!("# Pay\n\n{}", text("pay")))?;
    fs::write(
        docs.join("handbook/intro.md"),
        format!("# Intro\n\n{}", text("intro")),
    )?;
    fs::write(docs.join("eng.md"), format!("# Eng\n\n{}", text("eng")))?;
    publish(
        &case,
        &config,
        &["--dir", &docs.display().to_string(), "--acl", "group:eng"],
    )?;

    // watch: --acl for its files; a link out of the directory is not followed
    let watched = case.dir.join("watched");
    let outside = case.dir.join("outside");
    fs::create_dir_all(&watched)?;
    fs::create_dir_all(&outside)?;
    fs::write(watched.join("w.md"), format!("# W\n\n{}", text("watched")))?;
    fs::write(
        outside.join("secret.md"),
        format!("# Secret\n\n{}", text("secret")),
    )?;
    std::os::unix::fs::symlink(outside.join("secret.md"), watched.join("secret.md"))?;
    let state = case.dir.join("watch.redb");
    let config_arg = config.display().to_string();
    let mut watcher = case.start_watch(
        &watched,
        &state,
        &["--config", &config_arg, "--acl", "group:ops"],
    )?;

    case.start_pipeline()?;
    let node = start_node(&case)?;
    let all = ["group:hr", "group:eng", "group:ops", "group:new"];
    node.wait_for(
        &json!({"query": QUERY, "mode": "vector", "k": 20, "principals": all}),
        WAIT,
        |ids| ids.len() == 4,
    )?;
    watcher.check_alive()?;
    let public = set(&["handbook/intro.md"]);
    assert_eq!(visible(&node, None)?, public);
    assert_eq!(
        visible(&node, Some(&["group:hr"]))?,
        set(&["handbook/intro.md", "hr/pay.md"])
    );
    assert_eq!(
        visible(&node, Some(&["group:eng"]))?,
        set(&["eng.md", "handbook/intro.md"])
    );
    assert_eq!(
        visible(&node, Some(&["group:ops"]))?,
        set(&["handbook/intro.md", "w.md"])
    );

    // The watcher restarted with another ACL re-sends its unchanged file with it.
    watcher.kill()?;
    let mut watcher = case.start_watch(
        &watched,
        &state,
        &["--config", &config_arg, "--acl", "group:new"],
    )?;
    node.wait_for(
        &json!({"query": QUERY, "mode": "bm25", "k": 20, "principals": ["group:new"]}),
        WAIT,
        |ids| ids.contains(&"w.md".to_string()),
    )?;
    watcher.check_alive()?;
    assert_eq!(visible(&node, Some(&["group:ops"]))?, public);
    assert_eq!(
        visible(&node, Some(&["group:new"]))?,
        set(&["handbook/intro.md", "w.md"])
    );
    let secret = visible(&node, Some(&all))?;
    assert!(!secret.contains("secret.md"), "{secret:?}");
    case.topic_records()?;
    case.wait_indexed(WAIT)?;
    ensure!(
        case.dlq_records(1, Duration::from_secs(2))?.is_empty(),
        "nothing was refused"
    );
    watcher.kill()?;
    case.stop_pipeline()?;
    Ok(())
}
