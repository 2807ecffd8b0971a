//! Tests of the MCP tools: their schemas, argument validation (every mistake a tool error,
//! the backend never called) and result shaping.

use std::sync::Mutex;

use serde_json::json;

use super::*;

fn args(v: Value) -> Option<serde_json::Map<String, Value>> {
    match v {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

#[test]
fn three_tools_with_their_schemas() {
    let tools = tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["search", "fetch", "answer"]);
    let schema = |name: &str| {
        let t = tools.iter().find(|t| t.name == name).unwrap();
        Value::Object(t.input_schema.as_ref().clone())
    };
    let search = schema("search");
    assert_eq!(search["type"], "object");
    assert_eq!(search["required"], json!(["query"]));
    assert_eq!(search["properties"]["query"]["type"], "string");
    assert!(search["properties"]["k"]["type"]
        .to_string()
        .contains("integer"));
    assert!(search["properties"]["filter"].is_object());
    assert_eq!(search["additionalProperties"], json!(false));
    assert_eq!(schema("fetch")["required"], json!(["doc_id"]));
    assert_eq!(schema("answer")["required"], json!(["question"]));
    for t in &tools {
        assert!(t.description.as_ref().is_some_and(|d| d.len() > 40));
    }
}

#[test]
fn good_arguments_are_the_nodes_requests() {
    let c = plan_call(
        "search",
        args(json!({"query": "snow melt", "k": 3, "filter": {"lang": "en"}, "mode": "bm25"})),
    )
    .unwrap();
    assert_eq!(
        c,
        Call::Retrieve(
            json!({"query": "snow melt", "k": 3, "filter": {"lang": "en"}, "mode": "bm25"})
        )
    );
    let c = plan_call("answer", args(json!({"question": "why?"}))).unwrap();
    assert_eq!(c, Call::Answer(json!({"query": "why?"})));
    let c = plan_call(
        "fetch",
        args(json!({"doc_id": "a/b.md", "chunk_id": "c1", "neighbours": 2})),
    )
    .unwrap();
    let Call::Chunks(q) = c else { panic!("{c:?}") };
    assert_eq!(
        (q.doc_id.as_str(), q.around.as_deref(), q.neighbours),
        ("a/b.md", Some("c1"), 2)
    );
    let qs = args::query_string(&q);
    assert!(qs.contains(&("around", "c1".into())));
}

#[test]
fn bad_arguments_say_what_is_wrong() {
    for (tool, a, needle) in [
        (
            "search",
            json!({"query": "x", "k": "many"}),
            "search: k: invalid type",
        ),
        ("search", json!({"k": 3}), "missing field `query`"),
        ("search", json!({"query": "   "}), "query is empty"),
        ("search", json!({"query": "x", "k": 0}), "at least 1"),
        (
            "search",
            json!({"query": "x", "colour": 1}),
            "unknown field",
        ),
        (
            "search",
            json!({"query": "x", "mode": "fast"}),
            "unknown variant",
        ),
        (
            "search",
            json!({"query": "x", "filter": "lang=en"}),
            "invalid type",
        ),
        ("answer", json!({"query": "x"}), "unknown field"),
        ("fetch", json!({}), "missing field `doc_id`"),
        (
            "fetch",
            json!({"doc_id": "d", "neighbours": 51}),
            "at most 50",
        ),
        (
            "fetch",
            json!({"doc_id": "d", "limit": 0}),
            "limit must be 1 to 1000",
        ),
        (
            "fetch",
            json!({"doc_id": "d", "chunk_id": ""}),
            "chunk_id is empty",
        ),
        ("delete", json!({}), "unknown tool"),
    ] {
        let e = plan_call(tool, args(a.clone())).unwrap_err();
        assert!(e.contains(needle), "{tool} {a}: {e}");
    }
    assert!(plan_call("search", None)
        .unwrap_err()
        .contains("missing field"));
}

fn retrieve_answer() -> Value {
    json!({
        "results": [{
            "rank": 1, "chunk_id": "c1", "doc_id": "d1", "kind": "leaf", "parent_id": null,
            "title": "Rivers", "source": "docs/rivers.pdf", "section": ["Snow"],
            "chunk_index": 0, "char_start": 0, "char_end": 10, "text": "Snow melts.",
            "metadata": {}, "page_start": 3, "page_end": 4, "score": 0.8125,
            "scores": {}, "passage_chunk_ids": [], "matched_children": []
        }],
        "mode": "hybrid", "timings_ms": {}, "index": {"epoch": 7, "committed_at_ms": 1, "age_ms": 2},
        "language": {}
    })
}

#[test]
fn search_results_carry_ids_titles_pages_scores_and_text() {
    let call = Call::Retrieve(json!({"query": "x"}));
    let r = shape_result(&call, Ok(retrieve_answer()));
    assert_ne!(r.is_error, Some(true));
    let s = r.structured_content.unwrap();
    assert_eq!(
        s["results"][0],
        json!({"rank": 1, "doc_id": "d1", "chunk_id": "c1", "title": "Rivers",
               "source": "docs/rivers.pdf", "section": ["Snow"], "page_start": 3,
               "page_end": 4, "score": 0.8125, "text": "Snow melts."})
    );
    assert_eq!(s["index"]["epoch"], 7);
    let text = r.content[0].as_text().unwrap().text.clone();
    assert!(
        text.contains("1. Rivers (docs/rivers.pdf, pp. 3–4) score 0.812"),
        "{text}"
    );
    assert!(text.contains("doc_id: d1  chunk_id: c1") && text.contains("Snow melts."));
}

#[test]
fn an_answer_lists_the_passages_it_cites() {
    let passage = |n: usize, cited: bool| {
        json!({"number": n, "doc_id": format!("d{n}"), "chunk_id": format!("c{n}"),
               "title": format!("T{n}"), "source": "s", "section": [], "char_start": 0,
               "char_end": 1, "rank": n, "score": 1.0, "metadata": {}, "text": "t",
               "cited": cited})
    };
    let node = json!({
        "answer": "Snow melts in spring [2].", "refused": false, "question": "q",
        "passages": [passage(1, false), passage(2, true)],
        "citations": [{"number": 2, "start": 20, "end": 23, "sentence": 0}],
        "invalid_citations": [], "sentences": [], "uncited_sentences": [],
        "model": "m", "mode": "hybrid", "timings_ms": {}, "index": {}, "language": {}
    });
    let r = shape_result(&Call::Answer(json!({})), Ok(node));
    let s = r.structured_content.unwrap();
    assert_eq!(s["answer"], "Snow melts in spring [2].");
    assert_eq!(s["citations"].as_array().unwrap().len(), 1);
    assert_eq!(s["citations"][0]["number"], 2);
    assert_eq!(s["citations"][0]["doc_id"], "d2");
    assert!(s["citations"][0].get("cited").is_none());
    let text = r.content[0].as_text().unwrap().text.clone();
    assert!(
        text.ends_with("[2] T2 (s) doc_id: d2 chunk_id: c2"),
        "{text}"
    );
}

#[test]
fn failures_are_tool_errors_with_the_nodes_code() {
    let f = ToolFailure::new("not_found", "no document \"d\"");
    let r = shape_result(&Call::Retrieve(json!({})), Err(f));
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        r.content[0].as_text().unwrap().text,
        "not_found: no document \"d\""
    );
    assert_eq!(r.structured_content.unwrap()["error"]["code"], "not_found");
    // An answer the tool cannot read is an error too, not a crash.
    let r = shape_result(&Call::Retrieve(json!({})), Ok(json!({"results": 3})));
    assert_eq!(r.is_error, Some(true));
}

/// A backend that records its calls and answers a fixed retrieval.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<Call>>,
    refused: Mutex<Vec<String>>,
}

impl Backend for Recorder {
    fn run<'a>(
        &'a self,
        _caller: &'a rmcp::model::Extensions,
        call: Call,
    ) -> futures::future::BoxFuture<'a, Result<Value, ToolFailure>> {
        self.calls.lock().unwrap().push(call);
        Box::pin(async { Ok(retrieve_answer()) })
    }
    fn refused(&self, tool: &str) {
        self.refused.lock().unwrap().push(tool.into());
    }
}

#[tokio::test]
async fn a_bad_call_never_reaches_the_backend_and_the_next_call_does() {
    let backend = Arc::new(Recorder::default());
    let server = McpServer::new(backend.clone());
    let ext = rmcp::model::Extensions::default();
    let bad = server
        .call(&ext, "search", args(json!({"query": "x", "k": "many"})))
        .await;
    assert_eq!(bad.is_error, Some(true));
    assert!(backend.calls.lock().unwrap().is_empty());
    assert_eq!(*backend.refused.lock().unwrap(), ["search"]);
    let good = server
        .call(&ext, "search", args(json!({"query": "x"})))
        .await;
    assert_ne!(good.is_error, Some(true));
    assert_eq!(backend.calls.lock().unwrap().len(), 1);
}
