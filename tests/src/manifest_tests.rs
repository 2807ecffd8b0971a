//! No test that needs a service runs by accident: every file in `tests/tests/` is a `[[test]]`
//! of `tests/Cargo.toml` requiring the features of the services it uses (`autotests = false`
//! there), and in the other crates every test file named as live (`*live*`, `*_e2e`) requires a
//! feature. A plain `cargo test --workspace` then runs no test that panics for want of its
//! services; `deploy/test.sh` starts them and enables `freshet-tests/live`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use toml::Value;

use crate::workspace_root;

/// The features of `tests/Cargo.toml` that stand for a service; `live` is all of them.
const SERVICES: [&str; 4] = ["broker-milvus", "postgres", "root", "llama"];

fn manifest(dir: &Path) -> Value {
    let path = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.parse()
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// The `.rs` files directly in `dir/tests`, by stem.
fn test_files(dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(dir.join("tests")) else {
        return BTreeSet::new();
    };
    entries
        .map(|e| e.expect("reading a tests/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| {
            p.file_stem()
                .expect("a file name")
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// The `[[test]]` targets of a manifest: stem of the file (its `path`, or its name) → the
/// features it requires.
fn declared(m: &Value) -> BTreeMap<String, Vec<String>> {
    let Some(tests) = m.get("test").and_then(Value::as_array) else {
        return BTreeMap::new();
    };
    tests
        .iter()
        .map(|t| {
            let name = t["name"].as_str().expect("a [[test]] has a name");
            let stem = t
                .get("path")
                .and_then(Value::as_str)
                .map(|p| {
                    let p = Path::new(p);
                    assert_eq!(
                        p.parent(),
                        Some(Path::new("tests")),
                        "[[test]] {name}: keep the file directly in tests/"
                    );
                    p.file_stem()
                        .expect("a file")
                        .to_string_lossy()
                        .into_owned()
                })
                .unwrap_or_else(|| name.to_owned());
            let features = t
                .get("required-features")
                .and_then(Value::as_array)
                .map(|fs| fs.iter().map(|f| f.as_str().expect("a name").to_owned()))
                .into_iter()
                .flatten()
                .collect();
            (stem, features)
        })
        .collect()
}

#[test]
fn every_integration_test_requires_its_services() {
    let dir = workspace_root().join("tests");
    let m = manifest(&dir);
    assert_eq!(
        m["package"].get("autotests").and_then(Value::as_bool),
        Some(false),
        "tests/Cargo.toml: `autotests = false`, so that a file in tests/tests/ runs only as a \
         [[test]] declared with the features of its services"
    );
    let features = m["features"].as_table().expect("[features]");
    let live: BTreeSet<&str> = features["live"]
        .as_array()
        .expect("live = [...]")
        .iter()
        .map(|f| f.as_str().expect("a name"))
        .collect();
    assert_eq!(
        live,
        BTreeSet::from(SERVICES),
        "`live` is every service feature (deploy/test.sh enables it and starts them all)"
    );
    for s in SERVICES {
        assert!(features.contains_key(s), "feature {s} is missing");
    }
    let declared = declared(&m);
    let files = test_files(&dir);
    let undeclared: Vec<_> = files
        .iter()
        .filter(|f| !declared.contains_key(*f))
        .collect();
    assert!(
        undeclared.is_empty(),
        "tests/tests/{{{}}}.rs: declare each as a [[test]] in tests/Cargo.toml with \
         `required-features` naming the services it needs ({})",
        undeclared
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(","),
        SERVICES.join(", ")
    );
    for (test, required) in &declared {
        assert!(files.contains(test), "[[test]] {test}: no tests/{test}.rs");
        assert!(
            !required.is_empty(),
            "[[test]] {test}: `required-features` must name the services it needs ({})",
            SERVICES.join(", ")
        );
        for f in required {
            assert!(
                SERVICES.contains(&f.as_str()),
                "[[test]] {test}: requires `{f}`; name the services it needs instead ({}); \
                 `live` is all of them",
                SERVICES.join(", ")
            );
        }
    }
}

#[test]
fn every_live_test_of_the_other_crates_requires_a_feature() {
    let root = workspace_root();
    let m = manifest(&root);
    let members = m["workspace"]["members"].as_array().expect("members");
    let mut checked = 0;
    for member in members {
        let member = member.as_str().expect("a path");
        if member == "tests" {
            continue;
        }
        let dir = root.join(member);
        let declared = declared(&manifest(&dir));
        for file in test_files(&dir) {
            if !(file.contains("live") || file.ends_with("_e2e")) {
                continue;
            }
            checked += 1;
            assert!(
                declared.get(&file).is_some_and(|f| !f.is_empty()),
                "{member}/tests/{file}.rs needs a service: declare it as a [[test]] in \
                 {member}/Cargo.toml with `required-features = [\"live\"]`"
            );
        }
    }
    // kafka_live, milvus_live, filter_twin_live and the embedding crate's live tests
    assert!(checked >= 6, "found only {checked} live test files");
}
