//! The examples of `examples/` run as a newcomer runs them: `contract` on its own, and
//! `publish_and_retrieve` against the real broker, pipeline, Milvus and query node (this case's
//! own topic, collection and index, handed over as `FRESHET_KAFKA_*` settings and `--query`).
//! `deploy/test.sh` builds the examples (`cargo build --workspace --bins --examples`).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use freshet_tests::{workspace_root, Case};

/// An example's binary, as `deploy/test.sh` builds it.
fn example(name: &str) -> Result<PathBuf> {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("target"));
    let path = target.join("debug/examples").join(name);
    if !path.is_file() {
        bail!(
            "{} is not built: deploy/test.sh builds it (cargo build -p freshet-examples --examples)",
            path.display()
        );
    }
    Ok(path)
}

fn run(output: Output, what: &str) -> Result<String> {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        bail!(
            "{what} failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(stdout)
}

#[test]
fn the_contract_example_decodes_and_refuses_as_it_says() -> Result<()> {
    let out = run(Command::new(example("contract")?).output()?, "contract")?;
    assert!(
        out.contains("upsert \"rivers/snowmelt\" (text/markdown)"),
        "{out}"
    );
    assert!(out.contains("encode → decode: the same change"), "{out}");
    for class in [
        "invalid_field",
        "id_mismatch",
        "unknown_op",
        "missing_id",
        "malformed_json",
    ] {
        assert!(
            out.contains(&format!("refused, class {class}")),
            "{class}:\n{out}"
        );
    }
    Ok(())
}

#[test]
fn publish_and_retrieve_finds_the_document_then_not_after_its_delete() -> Result<()> {
    let mut case = Case::new("examples", 1)?;
    case.start_pipeline()?;
    let node = case.start_query(&[])?;
    node.wait_ready(Duration::from_secs(120))?;
    let mut cmd = Command::new(example("publish_and_retrieve")?);
    cmd.args(["--query", &format!("http://{}", node.addr)])
        .env("FRESHET_KAFKA_BROKERS", &case.kafka.brokers)
        .env("FRESHET_KAFKA_TOPIC", &case.kafka.topic);
    let output = cmd.output().context("running publish_and_retrieve")?;
    let out = run(output, "publish_and_retrieve")
        .with_context(|| format!("pipeline log:\n{}", case.log_tail()))?;
    assert!(out.contains("searchable after"), "{out}");
    assert!(out.contains(": no longer found"), "{out}");
    Ok(())
}
