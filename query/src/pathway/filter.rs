//! Pathway's `metadata_filter` (JMESPath) and `filepath_globpattern`, read into freshet's
//! filter: the subset Pathway clients use, each condition pushed into the searches.
//!
//! Conditions, joined by `&&`:
//! - `key == 'text'`, ``key == `json` ``: the metadata key equals the value (or holds it as an
//!   array element), as the native filter's equality;
//! - `contains(key, 'text')`: the metadata key is an array holding the value, or equals it;
//! - on `path` (the document `source`, as hits carry it in `metadata.path`): `path == 'x'`,
//!   `contains(path, 'x')` (a substring, as JMESPath's `contains` on a string) and Pathway's
//!   `globmatch('pattern', path)` (the pattern language of `filepath_globpattern`).
//!
//! Anything else is a 400 that says what is supported.

use globset::{GlobBuilder, GlobMatcher};
use serde_json::{Map, Value};

use crate::request::BadRequest;

/// The metadata key that names a hit's document source.
pub const PATH_KEY: &str = "path";

/// A condition on a document's source.
#[derive(Debug, Clone)]
pub enum PathCondition {
    Equals(String),
    Contains(String),
    Glob(GlobMatcher),
}

impl PathCondition {
    pub fn holds(&self, source: &str) -> bool {
        match self {
            PathCondition::Equals(s) => source == s,
            PathCondition::Contains(s) => source.contains(s.as_str()),
            PathCondition::Glob(g) => g.is_match(source),
        }
    }
}

/// A Pathway filter in freshet's terms: native metadata conditions (the retrieve API's
/// `filter` object) and conditions on the source, all of which must hold.
#[derive(Debug, Clone, Default)]
pub struct PathwayFilter {
    pub metadata: Map<String, Value>,
    pub path: Vec<PathCondition>,
}

impl PathwayFilter {
    /// The filter of a request's `metadata_filter` and `filepath_globpattern` (either may be
    /// absent or empty).
    pub fn of(
        metadata_filter: Option<&str>,
        filepath_globpattern: Option<&str>,
    ) -> Result<PathwayFilter, BadRequest> {
        let mut f = match metadata_filter.map(str::trim) {
            None | Some("") => PathwayFilter::default(),
            Some(expr) => jmespath_subset(expr)?,
        };
        if let Some(g) = filepath_globpattern.filter(|g| !g.is_empty()) {
            f.path.push(PathCondition::Glob(glob_matcher(
                g,
                "filepath_globpattern",
            )?));
        }
        Ok(f)
    }

    /// Whether a document source passes every path condition.
    pub fn path_holds(&self, source: &str) -> bool {
        self.path.iter().all(|c| c.holds(source))
    }
}

/// A glob over sources as Pathway's `globmatch` reads it: `/` separates segments, `*` and `?`
/// match within a segment, `**` as a whole segment matches any number of segments, `[abc]`
/// and `[!abc]` a character of (not of) the set; `{a,b}` is either alternative.
pub fn glob_matcher(glob: &str, what: &str) -> Result<GlobMatcher, BadRequest> {
    if glob.len() > 1024 {
        return Err(BadRequest(format!("{what} is too long")));
    }
    GlobBuilder::new(glob)
        .literal_separator(true)
        .backslash_escape(false)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| BadRequest(format!("{what}: {e}")))
}

fn unsupported(what: &str) -> BadRequest {
    BadRequest(format!(
        "metadata_filter: {what}; supported: `key == 'text'`, ``key == `json` ``, \
         `contains(key, 'text')`, `globmatch('pattern', path)`, joined by `&&`"
    ))
}

/// The supported JMESPath subset (see the module doc).
pub fn jmespath_subset(expr: &str) -> Result<PathwayFilter, BadRequest> {
    let mut out = PathwayFilter::default();
    for clause in split_and(expr) {
        let clause = clause.trim();
        if let Some(inner) = clause
            .strip_prefix("globmatch(")
            .and_then(|r| r.strip_suffix(')'))
        {
            let (pattern, key) = split_args(inner, clause)?;
            if key != PATH_KEY {
                return Err(unsupported(&format!(
                    "globmatch() applies to `path` only, not {key:?}"
                )));
            }
            let pattern = match literal(pattern, clause)? {
                Value::String(s) => s,
                _ => return Err(unsupported("globmatch() takes a 'pattern' string")),
            };
            let g = glob_matcher(&pattern, "metadata_filter globmatch()")?;
            out.path.push(PathCondition::Glob(g));
            continue;
        }
        let (contains, key, value) = if let Some(inner) = clause
            .strip_prefix("contains(")
            .and_then(|r| r.strip_suffix(')'))
        {
            let (k, v) = split_args(inner, clause)?;
            (true, k, literal(v, clause)?)
        } else if let Some((k, v)) = clause.split_once("==") {
            (false, k.trim(), literal(v.trim(), clause)?)
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
        if key == PATH_KEY {
            let Value::String(s) = value else {
                return Err(unsupported("`path` is compared with a 'string'"));
            };
            out.path.push(if contains {
                PathCondition::Contains(s)
            } else {
                PathCondition::Equals(s)
            });
            continue;
        }
        if out.metadata.insert(key.to_owned(), value).is_some() {
            return Err(unsupported(&format!("key {key:?} appears twice")));
        }
    }
    Ok(out)
}

/// The two arguments of a function call, split at the first comma outside quotes.
fn split_args<'a>(inner: &'a str, clause: &str) -> Result<(&'a str, &'a str), BadRequest> {
    let mut quote = None::<char>;
    for (i, c) in inner.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '`' => quote = Some(c),
            None if c == ',' => return Ok((inner[..i].trim(), inner[i + 1..].trim())),
            None => {}
        }
    }
    Err(unsupported(&format!(
        "{clause:?}: a function takes two arguments"
    )))
}

/// A `'raw string'` or a `` `json` `` literal.
fn literal(literal: &str, clause: &str) -> Result<Value, BadRequest> {
    if let Some(s) = literal
        .strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
    {
        if s.replace("\\'", "").contains('\'') {
            return Err(unsupported(&format!("cannot read {clause:?}")));
        }
        Ok(Value::String(s.replace("\\'", "'")))
    } else if let Some(j) = literal.strip_prefix('`').and_then(|r| r.strip_suffix('`')) {
        serde_json::from_str(j).map_err(|e| unsupported(&format!("bad JSON literal {j:?}: {e}")))
    } else {
        Err(unsupported(&format!(
            "value {literal:?} is not a 'string' or `json` literal"
        )))
    }
}

/// Splits on `&&` outside quotes and backticks.
fn split_and(expr: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut quote, mut start) = (None::<char>, 0usize);
    let chars: Vec<(usize, char)> = expr.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (pos, c) = chars[i];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '`' => quote = Some(c),
            None if c == '&' && chars.get(i + 1).map(|b| b.1) == Some('&') => {
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
