//! The arguments of the MCP tools: their JSON schemas (what `tools/list` shows an agent) and
//! their validation into the query node's own requests (a `/v1/retrieve` or `/v1/answer` body,
//! a [`ChunksQuery`]). Every mistake is a message for a tool error, never a protocol error.

use rmcp::schemars::{self, JsonSchema};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::documents::{ChunksQuery, DEFAULT_LIMIT, MAX_LIMIT, MAX_NEIGHBOURS};

/// Which retrieval routes run.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ModeArg {
    /// BM25 and vectors, fused (the default).
    Hybrid,
    /// Keyword search alone.
    Bm25,
    /// Vector (semantic) search alone.
    Vector,
}

impl ModeArg {
    fn as_str(self) -> &'static str {
        match self {
            ModeArg::Hybrid => "hybrid",
            ModeArg::Bm25 => "bm25",
            ModeArg::Vector => "vector",
        }
    }
}

/// `search`: hybrid retrieval over the documents the caller may see.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// What to look for, in natural language (any language the documents are in).
    pub query: String,
    /// How many results (1 to the node's `max_k`, default 10).
    #[schemars(range(min = 1))]
    pub k: Option<u32>,
    /// Metadata conditions, all of which a result meets (the query node's `filter`): a key
    /// equal to a value, `{"lang": "en"}`, or to one of several, `{"year": {"in": [2023, 2024]}}`.
    pub filter: Option<Map<String, Value>>,
    /// Which routes run: `hybrid` (default), `bm25` (keywords), `vector` (semantic).
    pub mode: Option<ModeArg>,
    /// The query's language (ISO 639 code, e.g. `en`, `zh`), when detection could guess wrong.
    pub language: Option<String>,
}

/// `fetch`: a document's chunks in order, or one chunk with its neighbours.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchArgs {
    /// The document's id (`doc_id` of a search result or citation).
    pub doc_id: String,
    /// A chunk of that document (`chunk_id` of a search result): answer it with its
    /// neighbours instead of the whole document.
    pub chunk_id: Option<String>,
    /// With `chunk_id`: chunks on each side of it (0 to 50, default 1).
    #[schemars(range(max = 50))]
    pub neighbours: Option<u32>,
    /// Whole document: the position of the first chunk (0-based, default 0; a previous
    /// answer's `next_from` reads on).
    pub from: Option<u32>,
    /// Whole document: the most chunks (1 to 1000, default 100).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
}

/// `answer`: a cited answer from the language model over the documents the caller may see.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerArgs {
    /// The question to answer.
    pub question: String,
    /// Passages retrieved for the answer (default: the node's `[answer] k`).
    #[schemars(range(min = 1))]
    pub k: Option<u32>,
    /// Metadata conditions on the passages, as `search`'s `filter`.
    pub filter: Option<Map<String, Value>>,
    /// Which routes retrieve the passages (as `search`'s `mode`).
    pub mode: Option<ModeArg>,
    /// The question's language (ISO 639 code).
    pub language: Option<String>,
}

/// A tool's arguments as its struct, or why not, naming the argument (for a tool error).
pub fn parse<T: for<'de> Deserialize<'de>>(
    tool: &str,
    arguments: Option<Map<String, Value>>,
) -> Result<T, String> {
    let v = Value::Object(arguments.unwrap_or_default());
    serde_path_to_error::deserialize(v).map_err(|e| {
        let at = e.path().to_string();
        let e = e.into_inner();
        if at == "." {
            format!("invalid arguments for {tool}: {e}")
        } else {
            format!("invalid arguments for {tool}: {at}: {e}")
        }
    })
}

fn text_arg(name: &str, v: &str) -> Result<(), String> {
    if v.trim().is_empty() {
        return Err(format!("{name} is empty"));
    }
    Ok(())
}

/// The `/v1/retrieve`-shaped body of a search or an answer.
fn retrieval_body(
    query: &str,
    k: Option<u32>,
    filter: &Option<Map<String, Value>>,
    mode: Option<ModeArg>,
    language: &Option<String>,
) -> Value {
    let mut body = json!({ "query": query });
    if let Some(k) = k {
        body["k"] = json!(k);
    }
    if let Some(f) = filter {
        body["filter"] = Value::Object(f.clone());
    }
    if let Some(m) = mode {
        body["mode"] = json!(m.as_str());
    }
    if let Some(l) = language {
        body["language"] = json!(l);
    }
    body
}

impl SearchArgs {
    /// The `/v1/retrieve` body (the node checks the rest: `k` within `max_k`, the filter).
    pub fn body(&self) -> Result<Value, String> {
        text_arg("query", &self.query)?;
        if self.k == Some(0) {
            return Err("k must be at least 1".into());
        }
        Ok(retrieval_body(
            &self.query,
            self.k,
            &self.filter,
            self.mode,
            &self.language,
        ))
    }
}

impl AnswerArgs {
    /// The `/v1/answer` body (never streamed).
    pub fn body(&self) -> Result<Value, String> {
        text_arg("question", &self.question)?;
        if self.k == Some(0) {
            return Err("k must be at least 1".into());
        }
        Ok(retrieval_body(
            &self.question,
            self.k,
            &self.filter,
            self.mode,
            &self.language,
        ))
    }
}

impl FetchArgs {
    /// The document read it asks for.
    pub fn query(&self) -> Result<ChunksQuery, String> {
        text_arg("doc_id", &self.doc_id)?;
        if let Some(c) = &self.chunk_id {
            text_arg("chunk_id", c)?;
        }
        let neighbours = self.neighbours.unwrap_or(1);
        if neighbours > MAX_NEIGHBOURS {
            return Err(format!(
                "neighbours is at most {MAX_NEIGHBOURS} (got {neighbours})"
            ));
        }
        let limit = self.limit.map_or(DEFAULT_LIMIT, |l| l as usize);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(format!("limit must be 1 to {MAX_LIMIT} (got {limit})"));
        }
        Ok(ChunksQuery {
            doc_id: self.doc_id.clone(),
            around: self.chunk_id.clone(),
            neighbours,
            from: self.from.unwrap_or(0),
            limit,
        })
    }
}

/// The query string of the document route for `q` (the stdio transport's request).
pub fn query_string(q: &ChunksQuery) -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("neighbours", q.neighbours.to_string()),
        ("from", q.from.to_string()),
        ("limit", q.limit.to_string()),
    ];
    if let Some(c) = &q.around {
        out.push(("around", c.clone()));
    }
    out
}
