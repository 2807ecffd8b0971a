//! The assistants (`[[answer.assistants]]` read and checked at start, the default, the
//! documented example) and the routes' OpenAPI entries.

use serde_json::{json, Value};

use super::assistants::{self, Assistant, DEFAULT_ASSISTANT};
use crate::config::Config;

fn assistant(name: &str, options: Value) -> Assistant {
    Assistant {
        name: name.into(),
        description: format!("{name} assistant"),
        options: options.as_object().cloned().unwrap_or_default(),
    }
}

#[test]
fn the_default_assistant_exists_unless_one_takes_its_name() {
    let names = |l: &[Assistant]| {
        assistants::all(l)
            .into_iter()
            .map(|a| a.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&[]), [DEFAULT_ASSISTANT]);
    let docs = assistant("freshet-docs", json!({"mode": "bm25"}));
    assert_eq!(
        names(std::slice::from_ref(&docs)),
        ["freshet-docs", DEFAULT_ASSISTANT]
    );
    let mine = assistant(DEFAULT_ASSISTANT, json!({"k": 4}));
    assert_eq!(
        names(&[mine.clone(), docs.clone()]),
        [DEFAULT_ASSISTANT, "freshet-docs"]
    );
    assert_eq!(
        assistants::find(&[mine, docs], DEFAULT_ASSISTANT)
            .unwrap()
            .options["k"],
        4
    );
    assert!(assistants::find(&[], "gpt-4o").is_none());
}

fn load(toml: &str) -> anyhow::Result<Config> {
    let dir = std::env::temp_dir().join(format!("freshet-assistants-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("freshet.toml");
    std::fs::write(&path, toml)?;
    let c = Config::load_with_env(Some(&path), &[]);
    let _ = std::fs::remove_dir_all(&dir);
    c
}

#[test]
fn assistants_are_read_from_the_file_and_checked_at_start() {
    let c = load(
        r#"
[[answer.assistants]]
name = "freshet-docs"
description = "The product manuals"
options = { mode = "bm25", k = 6, filter = { source = "docs" }, grounding = true }
"#,
    )
    .unwrap();
    let a = &c.answer.assistants[0];
    assert_eq!(
        (a.name.as_str(), a.description.as_str()),
        ("freshet-docs", "The product manuals")
    );
    assert_eq!(
        Value::Object(a.options.clone()),
        json!({"mode": "bm25", "k": 6,
        "filter": {"source": "docs"}, "grounding": true})
    );
    for (toml, needle) in [
        ("[[answer.assistants]]\nname = \"a b\"", "name must be"),
        ("[[answer.assistants]]\nname = \"\"", "name must be"),
        (
            "[[answer.assistants]]\nname = \"a\"\n[[answer.assistants]]\nname = \"a\"",
            "another assistant",
        ),
        (
            "[[answer.assistants]]\nname = \"a\"\noptions = { query = \"x\" }",
            "\"query\"",
        ),
        (
            "[[answer.assistants]]\nname = \"a\"\noptions = { stream = true }",
            "\"stream\"",
        ),
        (
            "[[answer.assistants]]\nname = \"a\"\noptions = { mode = \"psychic\" }",
            "options",
        ),
        (
            "[[answer.assistants]]\nname = \"a\"\noptions = { k = 100000 }",
            "options",
        ),
        (
            "[[answer.assistants]]\nname = \"a\"\noptions = { colour = 1 }",
            "colour",
        ),
        // A transformation needs [llm].
        (
            "[[answer.assistants]]\nname = \"a\"\noptions = { transform = { multi_query = 2 } }",
            "options",
        ),
        (
            "[[answer.assistants]]\nname = \"a\"\nmodel = \"x\"",
            "model",
        ),
    ] {
        let e = format!("{:#}", load(toml).unwrap_err());
        assert!(e.contains(needle), "{toml}: {e}");
    }
}
/// The example of `deploy/freshet.toml`, uncommented, is an assistant the node accepts.
#[test]
fn the_documented_assistant_loads() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/freshet.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let example: String = text
        .lines()
        .skip_while(|l| *l != "# [[answer.assistants]]")
        .take_while(|l| l.starts_with("# "))
        .map(|l| format!("{}\n", &l[2..]))
        .collect();
    assert!(example.contains("name = "), "{example}");
    let c = load(&example).unwrap();
    assert_eq!(c.answer.assistants.len(), 1);
    assert_eq!(c.answer.assistants[0].name, "freshet-docs");
    assert!(assistants::find(&c.answer.assistants, DEFAULT_ASSISTANT).is_some());
}

/// The routes are in `/openapi.json`, with OpenAI's error shape and schemas that resolve.
#[test]
fn the_routes_are_documented() {
    let doc = crate::openapi::document();
    for (path, method) in [
        ("/v1/models", "get"),
        ("/v1/models/{model}", "get"),
        ("/v1/chat/completions", "post"),
    ] {
        let op = &doc["paths"][path][method];
        assert!(op["security"].is_array(), "{path}: {op}");
        assert_eq!(
            op["responses"]["401"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/OpenAIError",
            "{path}"
        );
    }
    let text = doc.to_string();
    for r in text.split("\"#/components/schemas/").skip(1) {
        let name = &r[..r.find('"').unwrap()];
        assert!(
            doc["components"]["schemas"].get(name).is_some(),
            "unresolved $ref {name}"
        );
    }
    let fields = doc["components"]["schemas"]["ChatCompletionRequest"]["properties"]
        .as_object()
        .unwrap();
    for f in [
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "n",
        "freshet",
    ] {
        assert!(fields.contains_key(f), "{f} undocumented");
    }
}
