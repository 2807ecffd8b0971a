//! A Pathway-compatible endpoint (`POST /pathway/v1/retrieve`, so a Pathway `VectorStoreClient`
//! pointed at `http://host:8080/pathway` works): `{"query", "k", "metadata_filter",
//! "filepath_globpattern"}` → `[{"text", "metadata", "dist"}]`, hybrid retrieval, public
//! documents only.
//!
//! `metadata_filter` is JMESPath in Pathway; freshet reads the subset clients use: conditions
//! `key == 'text'`, ``key == `json` ``, `contains(key, 'text')` joined by `&&`. Anything else is
//! a 400 that says so. `filepath_globpattern` matches the document `source` (`*`, `?`, `**`).
//! `dist` is the negated final score (lower is closer, as in Pathway).

use regex::Regex;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::request::{BadRequest, RetrieveRequest};
use crate::retrieve::{Engine, Response};

/// Most sources a glob may select.
const MAX_GLOB_SOURCES: usize = 1024;

#[derive(Debug, Deserialize)]
pub struct PathwayRequest {
    pub query: String,
    pub k: Option<usize>,
    pub metadata_filter: Option<String>,
    pub filepath_globpattern: Option<String>,
}

pub fn parse(body: &[u8]) -> Result<PathwayRequest, BadRequest> {
    serde_json::from_slice(body).map_err(|e| BadRequest(format!("invalid request body: {e}")))
}

/// The native plan of a Pathway request.
pub async fn plan(
    req: PathwayRequest,
    engine: &Engine,
) -> Result<crate::request::Plan, BadRequest> {
    let filter = match req.metadata_filter.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(f) => Some(jmespath_subset(f)?),
    };
    let native = RetrieveRequest {
        query: req.query,
        k: req.k,
        mode: None,
        filter,
        principals: None,
        bm25_top_k: None,
        vector_top_k: None,
        fusion: None,
        rerank: None,
        expand: None,
        parents: None,
        pack: None,
        // The server's setting: Pathway's answer (a bare list) has no room to say "degraded".
        allow_partial: None,
        language: None,
        language_routing: None,
        // Pathway's answer has no room for a transformation's report: none, whatever
        // `[transform]` says.
        transform: None,
        history: None,
    };
    let mut plan = native.plan(&engine.config.query, engine.reranker.is_some())?;
    if let Some(glob) = req
        .filepath_globpattern
        .as_deref()
        .filter(|g| !g.is_empty())
    {
        let re = glob_regex(glob)?;
        let all = match engine.indexes.tantivy() {
            Some(r) => tokio::task::spawn_blocking(move || r.sources())
                .await
                .map_err(|e| BadRequest(format!("listing sources: {e}")))?
                .map_err(|e| BadRequest(format!("listing sources: {e}")))?,
            None => Vec::new(),
        };
        let matching: Vec<String> = all.into_iter().filter(|s| re.is_match(s)).collect();
        // The sources are listed regardless of ACLs: the error says no count, so that it does
        // not tell how many sources the caller cannot see.
        if matching.len() > MAX_GLOB_SOURCES {
            return Err(BadRequest(format!(
                "filepath_globpattern matches more than {MAX_GLOB_SOURCES} sources; narrow it"
            )));
        }
        plan.filter.sources = Some(matching);
    }
    Ok(plan)
}

/// The Pathway answer shape.
pub fn answer(r: Response) -> Value {
    Value::Array(
        r.results
            .into_iter()
            .map(|h| {
                let mut metadata = match h.metadata {
                    Value::Object(m) => m,
                    _ => Default::default(),
                };
                metadata.insert("path".into(), Value::String(h.source.clone()));
                metadata.insert("doc_id".into(), Value::String(h.doc_id));
                metadata.insert("chunk_id".into(), Value::String(h.chunk_id));
                metadata.insert("title".into(), Value::String(h.title));
                json!({"text": h.text, "metadata": metadata, "dist": -h.score})
            })
            .collect(),
    )
}

/// A glob over sources: `**` any characters, `*` any except `/`, `?` one character except `/`.
pub fn glob_regex(glob: &str) -> Result<Regex, BadRequest> {
    if glob.len() > 1024 {
        return Err(BadRequest("filepath_globpattern is too long".into()));
    }
    let mut re = String::from("^");
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                re.push_str(".*");
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    Regex::new(&re).map_err(|e| BadRequest(format!("filepath_globpattern: {e}")))
}

/// The supported JMESPath subset as a native filter object.
pub fn jmespath_subset(expr: &str) -> Result<Value, BadRequest> {
    let unsupported = |what: &str| {
        BadRequest(format!(
            "metadata_filter: {what}; supported: `key == 'text'`, ``key == `json` ``, \
             `contains(key, 'text')`, joined by `&&`"
        ))
    };
    let mut out = serde_json::Map::new();
    for clause in split_and(expr) {
        let clause = clause.trim();
        let (key, literal) = if let Some(inner) = clause
            .strip_prefix("contains(")
            .and_then(|r| r.strip_suffix(')'))
        {
            let (k, v) = inner
                .split_once(',')
                .ok_or_else(|| unsupported("contains() takes a key and a value"))?;
            (k.trim(), v.trim())
        } else if let Some((k, v)) = clause.split_once("==") {
            (k.trim(), v.trim())
        } else {
            return Err(unsupported(&format!("cannot read {clause:?}")));
        };
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        {
            return Err(unsupported(&format!(
                "key {key:?} is not a plain identifier"
            )));
        }
        let value = if let Some(s) = literal
            .strip_prefix('\'')
            .and_then(|r| r.strip_suffix('\''))
        {
            if s.replace("\\'", "").contains('\'') {
                return Err(unsupported(&format!("cannot read {clause:?}")));
            }
            Value::String(s.replace("\\'", "'"))
        } else if let Some(j) = literal.strip_prefix('`').and_then(|r| r.strip_suffix('`')) {
            serde_json::from_str(j)
                .map_err(|e| unsupported(&format!("bad JSON literal {j:?}: {e}")))?
        } else {
            return Err(unsupported(&format!(
                "value {literal:?} is not a 'string' or `json` literal"
            )));
        };
        if out.insert(key.to_owned(), value).is_some() {
            return Err(unsupported(&format!("key {key:?} appears twice")));
        }
    }
    Ok(Value::Object(out))
}

/// Splits on `&&` outside quotes and backticks.
fn split_and(expr: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut quote, mut start) = (None::<char>, 0usize);
    let bytes: Vec<(usize, char)> = expr.char_indices().collect();
    let mut i = 0;
    while i < bytes.len() {
        let (pos, c) = bytes[i];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '`' => quote = Some(c),
            None if c == '&' && bytes.get(i + 1).map(|b| b.1) == Some('&') => {
                parts.push(&expr[start..pos]);
                start = pos + 2;
                i += 1;
            }
            None => {}
        }
        i += 1;
    }
    parts.push(&expr[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let re = glob_regex("docs/*.md").unwrap();
        assert!(re.is_match("docs/a.md"));
        assert!(!re.is_match("docs/sub/a.md"));
        assert!(!re.is_match("xdocs/a.md"));
        let re = glob_regex("**/*.pdf").unwrap();
        assert!(re.is_match("a/b/c.pdf"));
        let re = glob_regex("file?.txt").unwrap();
        assert!(re.is_match("file1.txt") && !re.is_match("file12.txt"));
        // Regex metacharacters are literal.
        let re = glob_regex("a+(b).md").unwrap();
        assert!(re.is_match("a+(b).md") && !re.is_match("aa(b).md"));
    }

    #[test]
    fn jmespath_subset_reads_the_common_forms() {
        assert_eq!(
            jmespath_subset("lang == 'en' && year == `2020` && contains(tags, 'x&&y')").unwrap(),
            json!({"lang": "en", "year": 2020, "tags": "x&&y"})
        );
        for bad in [
            "lang != 'en'",
            "a.b == 'x'",
            "lang == en",
            "lang == 'en' || x == 'y'",
            "lang == 'a' && lang == 'b'",
            "year == `{`",
        ] {
            assert!(jmespath_subset(bad).is_err(), "{bad}");
        }
    }
}
