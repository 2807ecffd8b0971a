//! A BEIR dataset directory: `corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::metrics::Judgements;

pub struct Dataset {
    pub corpus_path: PathBuf,
    /// Documents in the corpus (non-empty lines).
    pub documents: usize,
    /// Query id → text, in file order.
    pub queries: Vec<(String, String)>,
    /// Query id → judgements.
    pub qrels: HashMap<String, Judgements>,
}

impl Dataset {
    pub fn load(dir: &Path, split: &str) -> Result<Dataset> {
        let corpus_path = dir.join("corpus.jsonl");
        let corpus = std::fs::read_to_string(&corpus_path)
            .with_context(|| format!("reading {}", corpus_path.display()))?;
        let documents = corpus.lines().filter(|l| !l.trim().is_empty()).count();
        let qpath = dir.join("queries.jsonl");
        let mut queries = Vec::new();
        for (n, line) in std::fs::read_to_string(&qpath)
            .with_context(|| format!("reading {}", qpath.display()))?
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let v: Value = serde_json::from_str(line)
                .with_context(|| format!("{}:{}", qpath.display(), n + 1))?;
            let (Some(id), Some(text)) = (v["_id"].as_str(), v["text"].as_str()) else {
                bail!("{}:{}: a query needs _id and text", qpath.display(), n + 1);
            };
            queries.push((id.to_owned(), text.to_owned()));
        }
        let rpath = dir.join("qrels").join(format!("{split}.tsv"));
        let qrels = parse_qrels(
            &std::fs::read_to_string(&rpath)
                .with_context(|| format!("reading {}", rpath.display()))?,
        )
        .with_context(|| format!("in {}", rpath.display()))?;
        if qrels.is_empty() {
            bail!("{} has no judgements", rpath.display());
        }
        Ok(Dataset {
            corpus_path,
            documents,
            queries,
            qrels,
        })
    }

    /// The queries that have judgements (the ones evaluated), in file order.
    pub fn judged_queries(&self) -> Vec<(String, String)> {
        self.queries
            .iter()
            .filter(|(id, _)| self.qrels.contains_key(id))
            .cloned()
            .collect()
    }
}

/// `query-id \t corpus-id \t score` lines, with an optional header.
pub fn parse_qrels(text: &str) -> Result<HashMap<String, Judgements>> {
    let mut out: HashMap<String, Judgements> = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let cols: Vec<&str> = line.split('\t').map(str::trim).collect();
        if line.trim().is_empty() || (n == 0 && cols.first() == Some(&"query-id")) {
            continue;
        }
        let [q, d, g] = cols[..] else {
            bail!("line {}: expected 3 tab-separated columns", n + 1);
        };
        let g: i32 = g
            .parse()
            .with_context(|| format!("line {}: score {g:?}", n + 1))?;
        out.entry(q.to_owned()).or_default().insert(d.to_owned(), g);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qrels() {
        let q =
            parse_qrels("query-id\tcorpus-id\tscore\n1\td1\t1\n1\td2\t2\n\n2\td3\t0\n").unwrap();
        assert_eq!(q["1"]["d2"], 2);
        assert_eq!(q["2"]["d3"], 0);
        assert!(parse_qrels("1\td1\n").is_err());
        assert!(parse_qrels("1\td1\tx\n").is_err());
    }
}
