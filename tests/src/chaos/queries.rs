//! Queries during a crash trial: a thread asks the query node continuously while the pipeline,
//! the broker, Milvus and the node itself are killed, and checks every answer against what no
//! answer may contain, whatever the moment:
//!
//! - a **deleted** sentinel document (its delete was indexed before the first query);
//! - a document that no version ever let the request's principals see (**ACL**): the
//!   sentinels of `group:b`, which no query names, and the history's documents whose every
//!   version has an ACL without any of the request's principals;
//! - a chunk whose `lang` differs from the request's **filter** (the history is all `en`, a
//!   set of public sentinels is `fr`).
//!
//! A refused connection (the node is down) or a 5xx is counted, not wrong; any other status
//! than 200 and 5xx is a test error.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, Result};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::history::Op;
use crate::query::request;
use crate::RIVER_WORDS;

/// Sentinels per kind.
const SENTINELS: usize = 6;
/// The principal sets the queries use; none holds `group:b`.
const PRINCIPALS: &[&[&str]] = &[
    &["group:a"],
    &["group:eng"],
    &["group:ops", "user:ana"],
    &["group:legal"],
    &["group:eng", "group:legal"],
];

/// The sentinel records, in the order to send them: upserts of every kind, then the deletes.
pub fn sentinels(seed: u64) -> Vec<(String, Option<Vec<u8>>)> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5e47_1e1a);
    let mut out = Vec::new();
    let mut doc = |rng: &mut StdRng, id: &str, acl: &[&str], lang: &str| {
        let words: Vec<&str> = (0..rng.gen_range(30..80))
            .map(|_| *RIVER_WORDS.choose(rng).unwrap_or(&"river"))
            .collect();
        let v = json!({
            "op": "upsert", "id": id, "title": format!("Sentinel {id}"),
            "text": format!("{}.", words.join(" ")), "content_type": "text/markdown",
            "metadata": {"lang": lang}, "acl": acl,
        });
        out.push((id.to_string(), Some(v.to_string().into_bytes())));
    };
    for i in 0..SENTINELS {
        doc(&mut rng, &format!("s-b-{i}"), &["group:b"], "en");
        doc(&mut rng, &format!("s-fr-{i}"), &[], "fr");
        doc(&mut rng, &format!("s-del-{i}"), &[], "en");
    }
    for i in 0..SENTINELS {
        let id = format!("s-del-{i}");
        let value =
            (i % 2 == 1).then(|| json!({"op": "delete", "id": id}).to_string().into_bytes());
        out.push((id, value));
    }
    out
}

/// What the query thread saw.
#[derive(Clone, Debug, Default)]
pub struct QueryStats {
    /// Answers with status 200, every hit of them checked.
    pub answers: u64,
    pub hits: u64,
    /// Answers from BM25 alone while Milvus was away (`degraded`).
    pub degraded: u64,
    /// Requests that got no answer (node down or killed mid-request).
    pub unanswered: u64,
    /// 5xx answers by status.
    pub server_errors: BTreeMap<u16, u64>,
    /// Wrong answers (descriptions, the first ones) and their number.
    pub wrong: Vec<String>,
    pub wrong_count: u64,
    /// Answers with any other status (a test error).
    pub unexpected: Vec<String>,
}

impl QueryStats {
    pub fn five_xx(&self) -> u64 {
        self.server_errors.values().sum()
    }

    pub fn add(&mut self, o: &QueryStats) {
        self.answers += o.answers;
        self.hits += o.hits;
        self.degraded += o.degraded;
        self.unanswered += o.unanswered;
        for (s, n) in &o.server_errors {
            *self.server_errors.entry(*s).or_default() += n;
        }
        self.wrong_count += o.wrong_count;
        self.wrong.extend(o.wrong.iter().take(5).cloned());
        self.unexpected.extend(o.unexpected.iter().take(5).cloned());
    }
}

/// Which documents a request may never see.
struct Never {
    /// History documents: the union of the principals of all their versions (none if any
    /// version was public).
    principals_ever: BTreeMap<String, Option<BTreeSet<String>>>,
}

impl Never {
    fn from_history(ops: &[Op]) -> Never {
        let mut principals_ever: BTreeMap<String, Option<BTreeSet<String>>> = BTreeMap::new();
        for op in ops {
            let Some(v) = op.value.as_deref() else {
                continue;
            };
            let Ok(v) = serde_json::from_slice::<Value>(v) else {
                continue;
            };
            if v.get("op").and_then(Value::as_str) == Some("delete") {
                continue;
            }
            let acl: Vec<String> = v
                .get("acl")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            let entry = principals_ever
                .entry(op.key.clone())
                .or_insert_with(|| Some(BTreeSet::new()));
            match (acl.is_empty(), entry.as_mut()) {
                (true, _) => *entry = None,
                (false, Some(set)) => set.extend(acl),
                (false, None) => {}
            }
        }
        Never { principals_ever }
    }

    /// Why `hit` must not answer a request for `principals` filtered to `lang`, if it must not.
    fn violation(&self, hit: &Value, principals: &[&str], lang: &str) -> Option<String> {
        let doc = hit["doc_id"].as_str().unwrap_or_default();
        let got_lang = hit["metadata"]["lang"].as_str().unwrap_or_default();
        if got_lang != lang {
            return Some(format!("{doc}: lang {got_lang:?} under filter lang={lang}"));
        }
        if doc.starts_with("s-fr-") && lang != "fr" {
            return Some(format!("{doc}: a fr sentinel under filter lang={lang}"));
        }
        if doc.starts_with("s-del-") {
            return Some(format!("{doc}: deleted before the first query"));
        }
        if doc.starts_with("s-b-") {
            return Some(format!("{doc}: ACL group:b, principals {principals:?}"));
        }
        if let Some(Some(ever)) = self.principals_ever.get(doc) {
            if !principals.iter().any(|p| ever.contains(*p)) {
                return Some(format!(
                    "{doc}: no version visible to {principals:?} (ACLs only ever {ever:?})"
                ));
            }
        }
        None
    }
}

/// The query thread; [`Querier::stop`] ends it and returns what it saw.
pub struct Querier {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<QueryStats>>,
}

impl Querier {
    /// Starts asking the node whose address `addr` holds (replaced when the node restarts).
    pub fn start(seed: u64, history: &[Op], addr: Arc<Mutex<String>>) -> Querier {
        let never = Never::from_history(history);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed ^ 0x9e37_79b9);
            let mut stats = QueryStats::default();
            while !flag.load(Ordering::Relaxed) {
                let at = addr.lock().map(|a| a.clone()).unwrap_or_default();
                ask(&mut rng, &at, &never, &mut stats);
                std::thread::sleep(Duration::from_millis(rng.gen_range(20..120)));
            }
            stats
        });
        Querier {
            stop,
            handle: Some(handle),
        }
    }

    pub fn stop(mut self) -> Result<QueryStats> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .ok_or_else(|| anyhow!("the query thread was stopped already"))?
            .join()
            .map_err(|_| anyhow!("the query thread panicked"))
    }
}

impl Drop for Querier {
    /// A trial that fails ends its query thread too.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn ask(rng: &mut StdRng, addr: &str, never: &Never, stats: &mut QueryStats) {
    let words: Vec<&str> = (0..rng.gen_range(1..=4))
        .map(|_| *RIVER_WORDS.choose(rng).unwrap_or(&"river"))
        .collect();
    let principals = *PRINCIPALS.choose(rng).unwrap_or(&PRINCIPALS[0]);
    let lang = if rng.gen_bool(0.25) { "fr" } else { "en" };
    let mode = *["hybrid", "bm25", "vector"]
        .choose(rng)
        .unwrap_or(&"hybrid");
    let body = json!({
        "query": words.join(" "), "k": rng.gen_range(5..=20), "mode": mode,
        "filter": {"lang": lang}, "principals": principals,
    });
    let reply = match request(
        addr,
        "POST",
        "/v1/retrieve",
        &[],
        body.to_string().as_bytes(),
    ) {
        Ok(r) => r,
        Err(_) => {
            stats.unanswered += 1;
            return;
        }
    };
    match reply.status {
        200 => {}
        s if s >= 500 => {
            *stats.server_errors.entry(s).or_default() += 1;
            return;
        }
        s => {
            if stats.unexpected.len() < 5 {
                stats
                    .unexpected
                    .push(format!("{body} → {s}: {}", reply.body));
            }
            return;
        }
    }
    let answer: Value = match serde_json::from_str(&reply.body) {
        Ok(v) => v,
        Err(e) => {
            stats
                .unexpected
                .push(format!("{body} → 200 but not JSON ({e}): {}", reply.body));
            return;
        }
    };
    stats.answers += 1;
    if answer["degraded"].as_array().is_some_and(|d| !d.is_empty()) {
        stats.degraded += 1;
    }
    for hit in answer["results"].as_array().into_iter().flatten() {
        stats.hits += 1;
        if let Some(why) = never.violation(hit, principals, lang) {
            stats.wrong_count += 1;
            if stats.wrong.len() < 10 {
                stats.wrong.push(format!("{body}: {why}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(key: &str, value: Option<Value>) -> Op {
        Op {
            kind: "new_version",
            key: key.into(),
            value: value.map(|v| v.to_string().into_bytes()),
        }
    }

    fn hit(doc: &str, lang: &str) -> Value {
        json!({"doc_id": doc, "metadata": {"lang": lang}})
    }

    #[test]
    fn a_hit_is_wrong_exactly_when_no_state_of_the_history_allows_it() {
        let history = [
            op(
                "d-1",
                Some(json!({"id": "d-1", "text": "x", "acl": ["group:eng"]})),
            ),
            op(
                "d-1",
                Some(json!({"id": "d-1", "text": "y", "acl": ["group:ops"]})),
            ),
            op(
                "d-2",
                Some(json!({"id": "d-2", "text": "x", "acl": ["group:eng"]})),
            ),
            op("d-2", Some(json!({"id": "d-2", "text": "y"}))),
            op(
                "d-3",
                Some(json!({"id": "d-3", "text": "x", "acl": ["group:legal"]})),
            ),
            op("d-3", Some(json!({"op": "delete", "id": "d-3"}))),
            op("d-3", None),
        ];
        let never = Never::from_history(&history);
        let wrong = |doc: &str, principals: &[&str], lang: &str| {
            never.violation(&hit(doc, lang), principals, lang).is_some()
        };
        // d-1 was visible to eng, then to ops; never to legal
        assert!(!wrong("d-1", &["group:eng"], "en"));
        assert!(!wrong("d-1", &["group:ops"], "en"));
        assert!(wrong("d-1", &["group:legal"], "en"));
        // d-2 was public once: anyone may see it (a stale answer is not checked here)
        assert!(!wrong("d-2", &["group:legal"], "en"));
        // deletes and tombstones do not make a document public
        assert!(wrong("d-3", &["group:eng"], "en"));
        assert!(!wrong("d-3", &["group:legal", "group:eng"], "en"));
        // sentinels
        assert!(wrong("s-b-0", &["group:a"], "en"));
        assert!(wrong("s-del-3", &["group:a"], "en"));
        assert!(wrong("s-fr-1", &["group:a"], "en"));
        assert!(!wrong("s-fr-1", &["group:a"], "fr"));
        // the filter, on the hit's own metadata
        assert!(never
            .violation(&hit("d-1", "fr"), &["group:eng"], "en")
            .is_some());
        // unknown documents (the sentinels' live ones, say) pass
        assert!(!wrong("s-x", &["group:a"], "en"));
    }

    #[test]
    fn the_sentinels_delete_what_they_create_and_keep_the_rest() {
        let s = sentinels(3);
        assert_eq!(s, sentinels(3));
        let mut live = BTreeMap::new();
        for (key, value) in &s {
            let v: Option<Value> = value.as_deref().map(|v| serde_json::from_slice(v).unwrap());
            match v {
                Some(v) if v["op"] == "upsert" => {
                    live.insert(key.clone(), v);
                }
                _ => {
                    assert!(
                        live.remove(key).is_some(),
                        "{key} deleted before it was made"
                    );
                }
            }
        }
        assert!(live.keys().all(|d| !d.starts_with("s-del-")), "{live:?}");
        assert_eq!(live.len(), 2 * SENTINELS);
        for (id, v) in &live {
            let b = id.starts_with("s-b-");
            assert_eq!(v["acl"] == json!(["group:b"]), b, "{v}");
            assert_eq!(
                v["metadata"]["lang"] == "fr",
                id.starts_with("s-fr-"),
                "{v}"
            );
        }
    }
}
