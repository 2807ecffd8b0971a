use super::*;
use serde_json::json;

fn plan(v: Value) -> Result<Plan, BadRequest> {
    parse(v.to_string().as_bytes())?.plan(&QueryConfig::default(), false)
}

fn err(v: Value) -> String {
    plan(v).unwrap_err().0
}

#[test]
fn defaults() {
    let p = plan(json!({"query": "q"})).unwrap();
    assert_eq!(p.k, 10);
    assert_eq!(p.mode, Mode::Hybrid);
    assert_eq!(p.bm25_top_k, 50);
    assert_eq!(p.fusion.method, FusionMethod::Weighted);
    assert_eq!(p.fusion.rrf_k, 60.0);
    // No principals: public chunks only.
    assert_eq!(p.filter.principals, Some(vec![]));
    assert_eq!(p.filter.kinds, Some(vec![ChunkKind::Leaf]));
    assert!(p.rerank.is_none() && p.expand.is_none() && p.pack.is_none());
    assert!(p.allow_partial);
    // the request overrides the server's setting, both ways
    assert!(
        !plan(json!({"query": "q", "allow_partial": false}))
            .unwrap()
            .allow_partial
    );
    let strict = QueryConfig {
        allow_partial: false,
        ..Default::default()
    };
    let p = parse(br#"{"query":"q"}"#).unwrap().plan(&strict, false);
    assert!(!p.unwrap().allow_partial);
    let p = parse(br#"{"query":"q","allow_partial":true}"#).unwrap();
    assert!(p.plan(&strict, false).unwrap().allow_partial);
}

#[test]
fn a_stated_language_is_an_iso_code() {
    let p = plan(json!({"query": "q", "language": "ZHO", "language_routing": "all"})).unwrap();
    assert_eq!(p.language.as_deref(), Some("zh"));
    assert_eq!(p.language_routing, LanguageRouting::All);
    let p = plan(json!({"query": "q"})).unwrap();
    assert_eq!(
        (p.language, p.language_routing),
        (None, LanguageRouting::Auto)
    );
    let e = plan(json!({"query": "q", "language": "chinese"})).unwrap_err();
    assert!(e.0.contains("ISO 639"), "{e:?}");
    assert!(plan(json!({"query": "q", "language_routing": "never"})).is_err());
}

#[test]
fn bad_requests_say_what_is_wrong() {
    assert!(err(json!({"query": "  "})).contains("empty"));
    assert!(err(json!({"query": "q", "k": 0})).contains("k must be"));
    assert!(err(json!({"query": "q", "k": 101})).contains("k must be"));
    assert!(err(json!({"query": "q", "mode": "fuzzy"})).contains("unknown mode"));
    assert!(err(json!({"query": "q", "filter": [1]})).contains("filter must be an object"));
    assert!(err(json!({"query": "q", "filter": {"a": null}})).contains("null"));
    assert!(err(json!({"query": "q", "filter": {"a": {"gt": 1}}})).contains("unknown operator"));
    assert!(err(json!({"query": "q", "filter": {"a": {"in": 1}}})).contains("array"));
    assert!(err(json!({"query": "q", "filter": {"a": [1, 2]}})).contains("\"in\""));
    assert!(err(json!({"query": "q", "rerank": true})).contains("no reranker"));
    assert!(err(json!({"query": "q", "expand": {"window": 9}})).contains("expand.window"));
    assert!(err(json!({"query": "q", "pack": {"budget_tokens": 0}})).contains("budget"));
    assert!(err(json!({"query": "q", "principals": [""]})).contains("principals"));
    assert!(err(json!({"query": "q", "bm25_top_k": 5000})).contains("bm25_top_k"));
    assert!(err(json!({"query": "q", "fusion": {"rrf_k": -1}})).contains("rrf_k"));
    assert!(err(json!({"query": "q", "parents": true, "expand": true})).contains("parents"));
    assert!(err(json!({"query": "q", "unknown": 1})).contains("unknown field"));
    assert!(err(json!({"k": 3})).contains("query"));
    assert!(parse(b"{not json")
        .unwrap_err()
        .0
        .contains("invalid request body"));
    assert!(err(json!({"query": "x".repeat(5000)})).contains("characters"));
}

#[test]
fn filters_and_options() {
    let p = plan(json!({
        "query": "q", "k": 3, "mode": "bm25",
        "filter": {"lang": "en", "year": {"in": [2020, 2021]}, "draft": {"eq": false}},
        "principals": ["group:a"],
        "fusion": {"method": "weighted", "bm25_weight": 0.2},
        "expand": {"top_m": 2},
        "pack": {"budget_tokens": 500, "order": "edges_first"}
    }))
    .unwrap();
    assert_eq!(p.mode, Mode::Bm25);
    let mut eq = p.filter.metadata_eq.clone();
    eq.sort();
    assert_eq!(
        eq,
        vec![
            ("draft".to_string(), "false".to_string()),
            ("lang".to_string(), "\"en\"".to_string()),
        ]
    );
    assert_eq!(
        p.filter.metadata_in,
        vec![(
            "year".to_string(),
            vec!["2020".to_string(), "2021".to_string()]
        )]
    );
    // Checked, but applied only after authentication (http::principals).
    assert_eq!(p.filter.principals, Some(vec![]));
    assert_eq!(p.fusion.method, FusionMethod::Weighted);
    assert_eq!(p.fusion.bm25_weight, 0.2);
    assert_eq!(p.fusion.vector_weight, 0.5);
    assert_eq!(
        p.expand,
        Some(ExpandPlan {
            top_m: 2,
            window: 1,
            min_vector_score: None
        })
    );
    assert_eq!(p.pack, Some((500, PackOrder::EdgesFirst)));
    // A request asking for more results than the route default widens the routes.
    let p = plan(json!({"query": "q", "k": 80})).unwrap();
    assert_eq!(p.bm25_top_k, 80);
    let cfg = QueryConfig {
        rerank_by_default: true,
        ..Default::default()
    };
    let p = parse(br#"{"query":"q"}"#)
        .unwrap()
        .plan(&cfg, true)
        .unwrap();
    assert_eq!(p.rerank, Some(30));
    let p = parse(br#"{"query":"q","rerank":false}"#)
        .unwrap()
        .plan(&cfg, true)
        .unwrap();
    assert_eq!(p.rerank, None);
    let p = parse(br#"{"query":"q","rerank":{"candidates":20}}"#)
        .unwrap()
        .plan(&cfg, true)
        .unwrap();
    assert_eq!(p.rerank, Some(20));
}

#[test]
fn highlight_is_asked_for_and_off_by_default() {
    assert!(!plan(json!({"query": "q"})).unwrap().highlight);
    assert!(
        plan(json!({"query": "q", "highlight": true}))
            .unwrap()
            .highlight
    );
    assert!(err(json!({"query": "q", "highlight": "yes"})).contains("invalid request body"));
}

#[test]
fn highlights_are_the_query_terms_in_a_results_text_by_character() {
    use crate::retrieve::hit::highlights;
    // English by stem; Chinese by word, in characters (each Han character is three bytes).
    assert_eq!(
        highlights("melting glaciers", "Glacier melt: glaciers melted."),
        [[0, 7], [8, 12], [14, 22], [23, 29]]
    );
    assert_eq!(highlights("冰川", "全球冰川正在融化"), [[2, 4]]);
    assert!(highlights("the", "the end").is_empty());
}
