//! The request parsers fuzzed with proptest: `/v1/retrieve` bodies (arbitrary bytes, arbitrary
//! JSON, and near-valid requests with query-syntax text, huge numbers, deep filters, long
//! principals) and the Pathway endpoint's parts (body, JMESPath subset, glob). Never a panic,
//! every case within a deadline; a body is a [`BadRequest`] or a [`Plan`] whose limits hold.
//! `PROPTEST_CASES=n` runs n cases per property.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use freshet_core::chunk::ChunkKind;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Map, Value};

use crate::config::QueryConfig;
use crate::pathway;
use crate::request::{parse, Plan};

fn config(default_cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig {
        failure_persistence: None,
        max_shrink_iters: 512,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = default_cases;
    }
    c
}

/// Runs `f` on its own thread; more than 10 s is a hang.
fn within_deadline<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let out = f();
        let _ = tx.send(());
        out
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(()) | Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(RecvTimeoutError::Timeout) => panic!("no answer within 10 s: a hang"),
    }
}

/// Query text that looks like query syntax, in many scripts, empty, or 10 KB.
pub(crate) const QUERY_TEXTS: &[&str] = &[
    "(+)-",
    "title:x AND",
    "\"unbalanced",
    "'single",
    "*",
    "\\",
    "a\\",
    "foo~2",
    "x^3 OR",
    "[1 TO",
    "{* TO *}",
    "NOT",
    "- + ! && || ( ) { } [ ] ^ \" ~ * ? : /",
    "/regex.*/",
    "field:\"phrase",
    "春节吃饺子",
    "日本語のテキスト",
    "🚀🔥👨\u{200D}👩\u{200D}👧",
    "\u{0}\u{7}\u{1b}",
    "\u{202E}reversed",
    "",
    "   ",
    "\n\t",
];

fn query_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(QUERY_TEXTS).prop_map(str::to_owned),
        2 => "\\PC{0,40}",
        1 => (1usize..12_000).prop_map(|n| "a".repeat(n)),
        1 => (1usize..3_000).prop_map(|n| "中".repeat(n)),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0u64..200).prop_map(Value::from),
        Just(json!(0)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(-1)),
        Just(json!(1e300)),
        Just(json!(1.5)),
        Just(json!(-0.0)),
        Just(json!("10")),
        Just(json!("NaN")),
        Just(json!("Infinity")),
        Just(Value::Null),
        any::<f64>().prop_map(Value::from),
    ]
}

/// Arbitrary JSON, nested up to `depth` levels.
fn json_value(depth: u32) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        query_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(depth, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn filter() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        number(),
        query_text().prop_map(Value::from),
        any::<bool>().prop_map(Value::from)
    ];
    let cond = prop_oneof![
        3 => scalar.clone(),
        1 => scalar.clone().prop_map(|v| json!({"eq": v})),
        1 => proptest::collection::vec(scalar, 0..300).prop_map(|v| json!({"in": v})),
        1 => json_value(3),
        // past serde_json's nesting limit (128)
        1 => (1usize..300).prop_map(|d| {
            let mut v = json!("x");
            for _ in 0..d {
                v = json!({"in": [v]});
            }
            v
        }),
    ];
    prop_oneof![
        4 => proptest::collection::btree_map("[a-z_]{0,8}", cond, 0..40)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => json_value(3),
    ]
}

fn principals() -> impl Strategy<Value = Value> {
    let p = prop_oneof![
        select(vec!["group:a", "", " ", "user:x"]).prop_map(Value::from),
        (1usize..2_000).prop_map(|n| Value::from("p".repeat(n))),
        json_value(1),
    ];
    proptest::collection::vec(p, 0..300).prop_map(Value::Array)
}

fn field(name: &'static str) -> BoxedStrategy<Value> {
    let right = match name {
        "query" => query_text().prop_map(Value::from).boxed(),
        "mode" => select(vec!["hybrid", "bm25", "vector", "HYBRID", ""])
            .prop_map(Value::from)
            .boxed(),
        "filter" => filter().boxed(),
        "principals" => principals().boxed(),
        "fusion" => proptest::collection::btree_map(
            select(vec![
                "method",
                "rrf_k",
                "bm25_weight",
                "vector_weight",
                "other",
            ]),
            prop_oneof![
                number(),
                select(vec!["rrf", "weighted", "x"]).prop_map(Value::from)
            ],
            0..5,
        )
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
        .boxed(),
        "rerank" | "expand" => prop_oneof![
            any::<bool>().prop_map(Value::from),
            proptest::collection::btree_map(
                select(vec![
                    "candidates",
                    "top_m",
                    "window",
                    "min_vector_score",
                    "x"
                ]),
                number(),
                0..4,
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
        .boxed(),
        "pack" => (
            number(),
            proptest::option::of(select(vec!["relevance_first", "document_order", "x"])),
        )
            .prop_map(|(b, o)| {
                let mut m = Map::new();
                m.insert("budget_tokens".into(), b);
                if let Some(o) = o {
                    m.insert("order".into(), o.into());
                }
                Value::Object(m)
            })
            .boxed(),
        "parents" | "allow_partial" => any::<bool>().prop_map(Value::from).boxed(),
        _ => number().boxed(),
    };
    prop_oneof![4 => right, 1 => json_value(2)].boxed()
}

const FIELDS: &[&str] = &[
    "query",
    "k",
    "mode",
    "filter",
    "principals",
    "bm25_top_k",
    "vector_top_k",
    "fusion",
    "rerank",
    "expand",
    "parents",
    "pack",
    "allow_partial",
    "unknown",
];

fn near_valid_request() -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec(select(FIELDS), 0..8),
        any::<bool>(),
    )
        .prop_flat_map(|(fields, with_query)| {
            let mut all: Vec<&'static str> = fields;
            if with_query {
                all.push("query");
            }
            all.into_iter()
                .map(|f| field(f).prop_map(move |v| (f.to_owned(), v)))
                .collect::<Vec<_>>()
        })
        .prop_map(|pairs| Value::Object(pairs.into_iter().collect()))
}

/// What a plan must hold against the node's limits.
fn check_plan(p: &Plan, cfg: &QueryConfig) {
    assert!(!p.query.trim().is_empty());
    assert!(p.query.chars().count() <= cfg.max_query_chars);
    assert!((1..=cfg.max_k).contains(&p.k));
    assert!((1..=cfg.max_route_top_k).contains(&p.bm25_top_k));
    assert!((1..=cfg.max_route_top_k).contains(&p.vector_top_k));
    let principals = p
        .filter
        .principals
        .as_ref()
        .expect("principals are always set");
    assert!(principals.len() <= 256);
    assert!(principals
        .iter()
        .all(|x| !x.is_empty() && x.chars().count() <= 512));
    assert_eq!(p.filter.kinds, Some(vec![ChunkKind::Leaf]));
    assert!(p.fusion.rrf_k.is_finite() && p.fusion.bm25_weight.is_finite());
    assert!(p.fusion.vector_weight.is_finite());
    assert!(p
        .rerank
        .is_none_or(|c| (1..=cfg.max_rerank_candidates).contains(&c)));
    if let Some(e) = &p.expand {
        assert!((1..=cfg.max_expand_window).contains(&e.window));
        assert!((1..=cfg.max_k).contains(&e.top_m));
        assert!(e.min_vector_score.is_none_or(|s| (-1.0..=1.0).contains(&s)));
    }
    assert!(!(p.parents && p.expand.is_some()));
    assert!(p
        .pack
        .is_none_or(|(b, _)| (1..=cfg.max_pack_tokens).contains(&b)));
}

fn run(body: Vec<u8>, reranker: bool) {
    within_deadline(move || {
        let cfg = QueryConfig::default();
        let Ok(req) = parse(&body) else { return };
        match req.plan(&cfg, reranker) {
            Ok(p) => check_plan(&p, &cfg),
            Err(e) => assert!(!e.0.is_empty(), "an empty error message"),
        }
    })
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn retrieve_arbitrary_bytes(body in proptest::collection::vec(any::<u8>(), 0..256), reranker in any::<bool>()) {
        run(body, reranker);
    }

    #[test]
    fn retrieve_arbitrary_json(v in json_value(4), reranker in any::<bool>()) {
        run(v.to_string().into_bytes(), reranker);
    }

    #[test]
    fn retrieve_near_valid_requests(v in near_valid_request(), reranker in any::<bool>()) {
        run(v.to_string().into_bytes(), reranker);
    }

    #[test]
    fn pathway_bodies_filters_and_globs(
        body in prop_oneof![json_value(3), (query_text(), number(), query_text(), query_text()).prop_map(
            |(q, k, f, g)| json!({"query": q, "k": k, "metadata_filter": f, "filepath_globpattern": g}))],
        expr in prop_oneof![
            "\\PC{0,60}",
            proptest::collection::vec(select(vec![
                "lang == 'en'", "year == `2020`", "contains(tags, 'x')", "&&", "||", "'", "`",
                "==", "(", ")", "contains(", "a.b == 'c'", "!x", " ", "globmatch('*', path)",
                "contains(path, 'a')", "path == 'x'", ",",
            ]), 0..12).prop_map(|v| v.concat()),
        ],
        glob in prop_oneof!["\\PC{0,60}", proptest::collection::vec(select(vec![
            "*", "**", "?", "/", "[", "]", "{", "}", "\\", ".", "a", "中", "(", "|", "$",
        ]), 0..200).prop_map(|v| v.concat())],
    ) {
        within_deadline(move || {
            let _ = pathway::parse(body.to_string().as_bytes());
            let _ = pathway::parse_inputs(body.to_string().as_bytes());
            if let Ok(f) = pathway::jmespath_subset(&expr) {
                let _ = f.path_holds("docs/a/b.md");
            }
            if let Ok(g) = pathway::glob_matcher(&glob, "glob") {
                let _ = g.is_match("docs/a/b.md");
            }
        });
    }
}

/// Found by fuzzing the query node: an integer filter value above i64::MAX reached Milvus, which
/// could not parse the expression (a 503); it is a 400 now, on every route.
#[test]
fn filter_integers_beyond_int64_are_a_bad_request() {
    let plan = |v: &str| {
        let body = format!(r#"{{"query":"q","filter":{{"n":{v}}}}}"#);
        parse(body.as_bytes()).and_then(|r| r.plan(&QueryConfig::default(), false))
    };
    assert!(plan("9223372036854775807").is_ok());
    assert!(plan("-9223372036854775808").is_ok());
    assert!(plan("1e308").is_ok());
    let e = plan("18446744073709551615").unwrap_err();
    assert!(e.0.contains("out of range"), "{}", e.0);
    assert!(plan("9223372036854775808").is_err());
    assert!(plan(r#"{"in":[1,9223372036854775808]}"#).is_err());
}
