//! TREC run files: each configuration's rankings as `qid Q0 doc rank score tag` lines, the
//! format trec_eval, pytrec_eval and ranx read (`freshet-tools eval --runs DIR`).

use serde_json::Value;

/// Per query (its id): the documents of its k = 20 ranking with their scores.
pub type QueryRuns = Vec<(String, Vec<(String, f64)>)>;

/// The documents of one response's hits, best first, each with its best hit's score (the
/// ranking [`super::metrics::doc_ranking`] makes of the same hits).
pub fn doc_scores(hits: &[Value]) -> Vec<(String, f64)> {
    let mut seen = std::collections::HashSet::new();
    hits.iter()
        .map(|h| {
            let doc = h["doc_id"].as_str().unwrap_or_default();
            (doc, h["score"].as_f64().unwrap_or(0.0))
        })
        .filter(|(d, _)| seen.insert(*d))
        .map(|(d, s)| (d.to_owned(), s))
        .collect()
}

/// A TREC run file (`qid Q0 doc rank score tag`, the format trec_eval, pytrec_eval and ranx
/// read): the k = 20 ranking of each query, the documents in the node's order.
pub fn trec_run(tag: &str, run: &[(String, Vec<(String, f64)>)]) -> String {
    let mut out = String::new();
    for (qid, docs) in run {
        for (rank, (doc, score)) in docs.iter().enumerate() {
            out.push_str(&format!("{qid} Q0 {doc} {} {score} {tag}\n", rank + 1));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A document takes its best hit's rank and score; the lines are what trec_eval reads.
    #[test]
    fn run_files_rank_documents_by_their_best_hit() {
        let hits = [
            json!({"doc_id": "d2", "chunk_id": "d2#1", "score": 0.9}),
            json!({"doc_id": "d1", "chunk_id": "d1#0", "score": 0.5}),
            json!({"doc_id": "d2", "chunk_id": "d2#0", "score": 0.4}),
        ];
        let docs = doc_scores(&hits);
        assert_eq!(docs, [("d2".to_string(), 0.9), ("d1".to_string(), 0.5)]);
        let run = trec_run("bm25", &[("q7".into(), docs), ("q8".into(), vec![])]);
        assert_eq!(run, "q7 Q0 d2 1 0.9 bm25\nq7 Q0 d1 2 0.5 bm25\n");
    }
}
