//! The HTTP APIs fuzzed end to end: a real pipeline, broker, Milvus and model behind the real
//! `freshet-query` binary, and the real `freshet-ingest` binary. A hand-written corpus of
//! query-syntax text, huge numbers, deep filters, long principals and malformed bodies goes to
//! every route and retrieval mode; then schemathesis generates positive and negative requests
//! from each service's own OpenAPI document. Goal: no 5xx, every 4xx the JSON error shape,
//! answers as the document says.
//!
//! `FRESHET_API_FUZZ_EXAMPLES` is the number of generated cases per operation and phase
//! (default 40), `FRESHET_API_FUZZ_SEED` fixes schemathesis' seed (default: a fresh one, printed).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use freshet_tests::query::{request, Reply};
use freshet_tests::{env, workspace_root, Case};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(180);
const KEY: &str = "fuzz-key";
const MODES: [&str; 3] = ["hybrid", "bm25", "vector"];

/// Query text that looks like query syntax, in many scripts and sizes.
fn query_texts() -> Vec<String> {
    let mut q: Vec<String> = [
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
        "lava AND (magma OR",
        "春节吃饺子",
        "日本語のテキスト",
        "한국어 검색",
        "🚀🔥👨\u{200D}👩\u{200D}👧",
        "\u{0}\u{7}\u{1b}",
        "\u{202E}reversed",
        "",
        "   ",
        "\n\t",
        "\u{FEFF}",
        "%00",
        "' OR 1=1 --",
        "\" || true || \"",
        "doc_id in [\"x\"]",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    q.push("lava ".repeat(819)); // 4,095 characters: the longest query allowed
    q.push("a".repeat(10 * 1024)); // 10 KB: over the limit
    q.push("中".repeat(4096));
    q
}

/// Request bodies beside the query texts: limits, numbers, filters, principals, options.
fn odd_bodies() -> Vec<Value> {
    let deep = |d: usize| {
        let mut v = json!("en");
        for _ in 0..d {
            v = json!({"in": [v]});
        }
        json!({"query": "lava", "filter": {"lang": v}})
    };
    let long = "p".repeat(512);
    let mut bodies = vec![
        json!({"query": "lava", "k": u64::MAX}),
        json!({"query": "lava", "k": 1e300}),
        json!({"query": "lava", "k": -1}),
        json!({"query": "lava", "k": 0}),
        json!({"query": "lava", "k": "10"}),
        json!({"query": "lava", "k": 100, "bm25_top_k": 1000, "vector_top_k": 1000}),
        json!({"query": "lava", "bm25_top_k": u64::MAX}),
        json!({"query": "lava", "vector_top_k": 1001}),
        json!({"query": "lava", "mode": "HYBRID"}),
        json!({"query": 42}),
        json!({"query": null}),
        json!({"query": ["lava"]}),
        json!({"k": 3}),
        json!({"query": "lava", "unknown": 1}),
        json!({"query": "lava", "fusion": {"rrf_k": 1e39}}),
        json!({"query": "lava", "fusion": {"rrf_k": "NaN"}}),
        json!({"query": "lava", "fusion": {"bm25_weight": -0.0, "vector_weight": 0.0}}),
        json!({"query": "lava", "fusion": {"method": "rrf", "rrf_k": 0}}),
        json!({"query": "lava", "fusion": {"method": "borda"}}),
        json!({"query": "lava", "rerank": true}),
        json!({"query": "lava", "rerank": {"candidates": u64::MAX}}),
        json!({"query": "lava", "expand": {"window": 2, "top_m": 100, "min_vector_score": -1}}),
        json!({"query": "lava", "expand": {"min_vector_score": 2}}),
        json!({"query": "lava", "expand": true, "parents": true}),
        json!({"query": "lava", "parents": true}),
        json!({"query": "lava", "pack": {"budget_tokens": u64::MAX}}),
        json!({"query": "lava", "pack": {"budget_tokens": 100, "order": "edges_first"}}),
        json!({"query": "lava", "pack": {"budget_tokens": 1}}),
        json!({"query": "lava", "allow_partial": "yes"}),
        json!({"query": "lava", "principals": vec![long.clone(); 256]}),
        json!({"query": "lava", "principals": vec!["g"; 257]}),
        json!({"query": "lava", "principals": [format!("{long}p")]}),
        json!({"query": "lava", "principals": ["", "group:a"]}),
        json!({"query": "lava", "principals": ["a\"b", "a'b", "\\", "中文", "🚀", "x) or (1=1"]}),
        json!({"query": "lava", "principals": "group:a"}),
        json!({"query": "lava", "filter": []}),
        json!({"query": "lava", "filter": "lang == 'en'"}),
        json!({"query": "lava", "filter": {"": "x"}}),
        json!({"query": "lava", "filter": {"lang": null}}),
        json!({"query": "lava", "filter": {"lang": {"eq": "en", "in": ["en"]}}}),
        json!({"query": "lava", "filter": {"lang": {"like": "e%"}}}),
        json!({"query": "lava", "filter": {"year": {"in": (0..256).collect::<Vec<_>>()}}}),
        json!({"query": "lava", "filter": {"year": {"in": (0..257).collect::<Vec<_>>()}}}),
        json!({"query": "lava", "filter": {"year": 1e308, "n": -1e-308, "big": u64::MAX}}),
        json!({"query": "lava", "filter": {"lang": {"nested": {"deeper": 1}}}}),
        json!({"query": "lava", "filter": {"lang": ["en", "fr"]}}),
        deep(3),
        deep(127),
        deep(300),
    ];
    // filter keys and values that an index's own filter syntax might read
    for s in [
        "a\"b",
        "a'b",
        "a\\",
        "\\\"",
        "x\" or \"1\"==\"1",
        "x') or ('1'='1",
        "a.b",
        "a b",
        "a[0]",
        "$meta",
        "中文",
        "🚀",
        "\u{0}",
        "%",
        "*",
        "json_contains",
        "\n",
    ] {
        bodies.push(json!({"query": "lava", "filter": {s: "en"}}));
        bodies.push(json!({"query": "lava", "filter": {"lang": s}}));
        bodies.push(json!({"query": "lava", "filter": {"lang": {"in": [s, 1, true]}}}));
    }
    let many: serde_json::Map<String, Value> =
        (0..33).map(|i| (format!("k{i}"), json!(i))).collect();
    bodies.push(json!({"query": "lava", "filter": many}));
    bodies
}

/// Raw bodies that are not a JSON request, and the content types they go with.
fn raw_bodies() -> Vec<(Vec<u8>, &'static str)> {
    vec![
        (b"".to_vec(), "application/json"),
        (b"{".to_vec(), "application/json"),
        (b"null".to_vec(), "application/json"),
        (b"[]".to_vec(), "application/json"),
        (b"\"lava\"".to_vec(), "application/json"),
        (b"{\"query\":\"lava\"}".to_vec(), "text/plain"),
        (
            b"{\"query\":\"lava\"}".to_vec(),
            "application/x-www-form-urlencoded",
        ),
        (vec![0xff, 0xfe, 0x00, 0x7b], "application/json"),
        (b"{\"query\":\"\xff\xfe\"}".to_vec(), "application/json"),
        (
            b"{\"query\":\"lava\",\"query\":\"magma\"}".to_vec(),
            "application/json",
        ),
        (
            b"{\"query\":\"lava\",\"k\":1e99999}".to_vec(),
            "application/json",
        ),
        (
            format!("{{\"query\":\"{}\"}}", "a".repeat(70_000)).into_bytes(),
            "application/json",
        ),
    ]
}

/// Fails on a 5xx; checks the JSON error shape of a 4xx. Returns the problem, if any.
fn problem(what: &str, r: &Reply) -> Option<String> {
    let shape = |r: &Reply| -> bool {
        serde_json::from_str::<Value>(&r.body)
            .is_ok_and(|v| v["error"]["code"].is_string() && v["error"]["message"].is_string())
    };
    match r.status {
        // the documented answer of the long poll that times out
        504 if (what.starts_with("wait ") || what.contains("wait_for"))
            && r.body.contains(r#""code":"timeout""#) =>
        {
            None
        }
        500..=599 => Some(format!("{what} → {}: {}", r.status, cut(&r.body))),
        400..=499 if !shape(r) => Some(format!(
            "{what} → {} without the JSON error shape: {}",
            r.status,
            cut(&r.body)
        )),
        _ => None,
    }
}

fn cut(s: &str) -> String {
    s.chars().take(300).collect()
}

fn send(addr: &str, method: &str, path: &str, body: &[u8], ctype: &str) -> Result<Reply> {
    let mut headers = vec![("X-API-Key", KEY)];
    if !body.is_empty() && ctype != "application/json" {
        headers.push(("Content-Type", ctype));
    }
    request(addr, method, path, &headers, body)
}

/// Runs schemathesis against the OpenAPI document at `spec`, failing on any failed check.
fn schemathesis(name: &str, spec: &str, extra: &[&str], dir: &Path) -> Result<()> {
    let python = env("FRESHET_PYTHON");
    let st = Path::new(&python).with_file_name("schemathesis");
    if !st.exists() {
        bail!(
            "{} is missing: run deploy/install.sh (it installs schemathesis)",
            st.display()
        );
    }
    let examples = std::env::var("FRESHET_API_FUZZ_EXAMPLES").unwrap_or_else(|_| "40".into());
    let report = dir.join(format!("schemathesis-{name}"));
    let mut cmd = Command::new(&st);
    cmd.args(["run", spec, "--mode", "all", "--max-examples", &examples])
        .args([
            "--checks",
            "all",
            "--exclude-checks",
            "ignored_auth,use_after_free,ensure_resource_availability,positive_data_acceptance",
        ])
        .args(["--header", &format!("X-API-Key: {KEY}")])
        // One worker: hypothesis describing strategies from two threads at once trips CPython
        // 3.11's `ast` ("AST constructor recursion depth mismatch").
        .args(["--request-timeout", "30", "--workers", "1", "--no-color"])
        .args(["--report", "junit", "--report-dir"])
        .arg(&report)
        .args(extra)
        // its cache (`.schemathesis/`) goes to the case's directory, not the source tree
        .current_dir(dir)
        .env("SCHEMATHESIS_HOOKS", "freshet_error_shape")
        .env("PYTHONPATH", workspace_root().join("tests/api_fuzz"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Ok(seed) = std::env::var("FRESHET_API_FUZZ_SEED") {
        cmd.args(["--seed", &seed]);
    }
    let started = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("running {}", st.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "schemathesis against the {name} ({:.0?}):\n{text}",
        started.elapsed()
    );
    if !out.status.success() {
        bail!(
            "schemathesis found failures in the {name} (report: {})",
            report.display()
        );
    }
    Ok(())
}

#[test]
fn query_and_ingest_apis_fuzzed() -> Result<()> {
    let mut case = Case::new("api_fuzz", 1)?;
    case.start_pipeline()?;
    let docs = [
        (
            "volcano",
            "Volcanoes",
            "Volcanic eruptions eject lava, ash and gases when magma rises.",
            json!({"lang": "en", "year": 2020, "tags": ["geo"]}),
            vec![],
        ),
        (
            "bread",
            "Baking",
            "Sourdough bread rises because wild yeast ferments the dough.",
            json!({"lang": "en", "year": 2021}),
            vec!["group:a"],
        ),
        (
            "dumpling",
            "饺子",
            "饺子是一种传统的中国食物，通常在春节期间吃饺子。",
            json!({"lang": "zh"}),
            vec![],
        ),
        (
            "quotes",
            "Quotes \"and\" 'marks'",
            "Text with \\ backslashes, \"quotes\" and 'apostrophes' (+)-*.",
            json!({"lang": "a\"b", "odd": "x') or ('1'='1"}),
            vec!["a\"b"],
        ),
    ];
    for (id, title, text, meta, acl) in &docs {
        case.send_json(id, &json!({"op": "upsert", "id": id, "title": title, "text": text,
            "content_type": "text/plain", "source": format!("test://{id}"), "metadata": meta, "acl": acl}))?;
    }
    case.wait_indexed(WAIT)?;
    // The stand-in model answers /v1/answer, so that its requests reach the model too.
    let model = freshet_tests::llm::LiveStandIn::start()?;
    let mut settings = model.node_settings("standin");
    settings.push(("FRESHET_QUERY_API_KEYS", format!(r#"["{KEY}"]"#)));
    let node = case.start_query(&settings)?;
    node.wait_ready(Duration::from_secs(60))?;
    let addr = node.addr.clone();
    let found = send(
        &addr,
        "POST",
        "/v1/retrieve",
        json!({"query": "lava magma", "mode": "bm25"})
            .to_string()
            .as_bytes(),
        "application/json",
    )?;
    assert_eq!(
        found.json()?["results"][0]["doc_id"],
        "volcano",
        "{}",
        found.body
    );

    // The corpus.
    let mut problems = Vec::new();
    let mut sent = 0usize;
    let mut check = |what: String, r: Result<Reply>| {
        sent += 1;
        match r {
            Ok(r) => problems.extend(problem(&what, &r)),
            Err(e) => problems.push(format!("{what}: no answer: {e:#}")),
        }
    };
    for q in query_texts() {
        for mode in MODES {
            let body = json!({"query": q, "mode": mode, "k": 5, "filter": {"lang": "en"}, "principals": ["group:a"]});
            check(
                format!("retrieve {mode} {:?}", cut(&q)),
                send(
                    &addr,
                    "POST",
                    "/v1/retrieve",
                    body.to_string().as_bytes(),
                    "application/json",
                ),
            );
        }
        for stream in [false, true] {
            let body = json!({"query": q, "k": 3, "filter": {"lang": "en"}, "stream": stream,
                              "grounding": true, "max_tokens": 64});
            check(
                format!("answer stream={stream} {:?}", cut(&q)),
                send(
                    &addr,
                    "POST",
                    "/v1/answer",
                    body.to_string().as_bytes(),
                    "application/json",
                ),
            );
        }
        let body = json!({"query": q, "k": 3, "metadata_filter": "lang == 'en'", "filepath_globpattern": "test://*"});
        check(
            format!("pathway {:?}", cut(&q)),
            send(
                &addr,
                "POST",
                "/pathway/v1/retrieve",
                body.to_string().as_bytes(),
                "application/json",
            ),
        );
    }
    for body in odd_bodies() {
        for mode in MODES {
            let mut b = body.clone();
            if b.get("mode").is_none() {
                b["mode"] = json!(mode);
            }
            check(
                format!("retrieve {}", cut(&b.to_string())),
                send(
                    &addr,
                    "POST",
                    "/v1/retrieve",
                    b.to_string().as_bytes(),
                    "application/json",
                ),
            );
        }
    }
    let topic = case.kafka.topic.clone();
    for body in [
        json!({"query": "lava", "stream": "yes"}),
        json!({"query": "lava", "max_tokens": -1}),
        json!({"query": "lava", "max_tokens": 99999999999u64}),
        json!({"query": "lava", "temperature": 1e308}),
        json!({"query": "lava", "temperature": "hot"}),
        json!({"query": "lava", "grounding": null, "stream": null}),
        json!({"query": "lava", "wait_for": "x"}),
        json!({"query": "lava", "wait_for": [{"topic": "t", "partition": -1, "offset": 0}]}),
        json!({"query": "lava", "wait_for": [{"topic": topic, "partition": 0, "offset": 0, "timeout_ms": 50}]}),
        json!({"query": "lava", "wait_for": [{"topic": "none", "partition": 0, "offset": 9, "timeout_ms": 50}]}),
        json!({"query": "lava", "pack": {"budget_tokens": 1}}),
        json!({"query": "lava", "k": 0}),
        json!({"query": "熔岩", "stream": true, "principals": ["group:a"]}),
    ] {
        check(
            format!("answer {}", cut(&body.to_string())),
            send(
                &addr,
                "POST",
                "/v1/answer",
                body.to_string().as_bytes(),
                "application/json",
            ),
        );
    }
    for (body, ctype) in raw_bodies() {
        for path in ["/v1/retrieve", "/v1/answer", "/pathway/v1/retrieve"] {
            check(
                format!(
                    "{path} raw {ctype} {:?}",
                    cut(&String::from_utf8_lossy(&body))
                ),
                send(&addr, "POST", path, &body, ctype),
            );
        }
    }
    for filter in [
        "lang == 'en'",
        "lang == 'a\"b'",
        "contains(tags, 'geo')",
        "year == `2020`",
        "x ==",
        "'",
        "`",
        "lang == 'en' && ",
        "a == `{\"b\":1}`",
        "!lang",
        "lang != 'en'",
        "contains(",
        "a || b",
    ] {
        for glob in [
            "",
            "**",
            "*",
            "test://*",
            "[",
            "\\",
            "{a,b}",
            "**/**/**/**/**",
            "?????",
            "(",
            "$^.+",
        ] {
            let body =
                json!({"query": "lava", "metadata_filter": filter, "filepath_globpattern": glob});
            check(
                format!("pathway filter {filter:?} glob {glob:?}"),
                send(
                    &addr,
                    "POST",
                    "/pathway/v1/retrieve",
                    body.to_string().as_bytes(),
                    "application/json",
                ),
            );
        }
    }
    for query in [
        format!("topic={topic}&partition=0&offset=0&timeout_ms=100"),
        "topic=&partition=0&offset=0".into(),
        "topic=t&partition=-1&offset=0".into(),
        "topic=t&partition=0&offset=-5".into(),
        "topic=t&partition=99999999999&offset=0".into(),
        "topic=t&partition=0&offset=99999999999999999999".into(),
        "topic=t&partition=0&offset=0&timeout_ms=99999999999".into(),
        "topic=t&partition=0&offset=0&timeout_ms=-1".into(),
        "topic=t&partition=0&offset=0&extra=1".into(),
        "topic=t&partition=x&offset=y".into(),
        "partition=0&offset=0".into(),
        "topic=%FF%FE&partition=0&offset=0&timeout_ms=0".into(),
        "topic=a&topic=b&partition=0&offset=0".into(),
        String::new(),
    ] {
        check(
            format!("wait ?{query}"),
            send(&addr, "GET", &format!("/v1/index/wait?{query}"), b"", ""),
        );
    }
    for (method, path) in [
        ("GET", "/v1/retrieve"),
        ("PUT", "/v1/retrieve"),
        ("DELETE", "/v1/index"),
        ("GET", "/nope"),
        ("GET", "/v1/%FF"),
        ("POST", "/openapi.json"),
        ("GET", "/pathway/v1/statistics"),
        ("POST", "/pathway/v1/statistics"),
    ] {
        check(
            format!("{method} {path}"),
            send(&addr, method, path, b"", ""),
        );
    }
    // A document's chunks: bad parameters and ids.
    for path in [
        "/v1/documents/x/chunks?limit=0",
        "/v1/documents/x/chunks?limit=99999999999999999999",
        "/v1/documents/x/chunks?neighbours=-1",
        "/v1/documents/x/chunks?around=&neighbours=1",
        "/v1/documents/x/chunks?colour=red",
        "/v1/documents/x/chunks?around=y&around=z&from=%FF",
        "/v1/documents/%FF%FE/chunks",
        "/v1/documents/%00/chunks?around=%00",
        "/v1/documents/a%2Fb/chunks?from=4294967296",
        "/v1/documents//chunks",
    ] {
        check(format!("GET {path}"), send(&addr, "GET", path, b"", ""));
    }
    // without the key, and with a wrong one
    for headers in [
        vec![],
        vec![("X-API-Key", "wrong")],
        vec![("Authorization", "Bearer wrong")],
    ] {
        sent += 1;
        let r = request(
            &addr,
            "POST",
            "/v1/retrieve",
            &headers,
            br#"{"query":"lava"}"#,
        )?;
        assert_eq!(r.status, 401, "{}", r.body);
        problems.extend(problem("retrieve without the key", &r));
    }
    // MCP: malformed JSON-RPC gets the protocol's own errors (JSON-RPC or HTTP), never a 5xx,
    // and a tool call with bad arguments is an ordinary answer.
    for body in [
        &b"{"[..],
        b"[]",
        b"null",
        br#"{"jsonrpc":"2.0","id":1}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"nope"}"#,
        br#"{"jsonrpc":"2.0","id":99999999999999999999999,"method":"tools/list"}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"lava","k":-1}}}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch","arguments":{"doc_id":"\u0000","neighbours":1e99}}}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":"lava"}}"#,
    ] {
        sent += 1;
        let r = request(
            &addr,
            "POST",
            "/mcp",
            &[
                ("X-API-Key", KEY),
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
            ],
            body,
        )?;
        if r.status >= 500 {
            problems.push(format!(
                "/mcp {} → {}: {}",
                String::from_utf8_lossy(body),
                r.status,
                cut(&r.body)
            ));
        }
    }
    println!("corpus: {sent} requests, {} problems", problems.len());
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    // The node is still up and still answers.
    assert_eq!(node.get("/healthz")?.status, 200);

    // Generated requests from the node's own OpenAPI document. `/v1/index/wait` is a long poll
    // (up to 120 s per request by design), and so is `/v1/answer` with generated `wait_for`
    // offsets that never come: the corpus above covers both.
    schemathesis(
        "query node",
        &format!("http://{addr}/openapi.json"),
        &[
            "--exclude-path",
            "/v1/index/wait",
            "--exclude-path",
            "/v1/answer",
        ],
        &case.dir,
    )?;
    assert_eq!(node.get("/healthz")?.status, 200, "{}", node.log_tail());

    // The ingest service, from its OpenAPI document (writes go to this case's topic).
    let ingest = case.start_ingest(&[(
        "FRESHET_INGEST_KEYS",
        format!(
            r#"[{{name = "fuzz", key = "{KEY}", id_prefixes = ["*"], may_grant = ["*"], may_publish_public = true, may_delete = true}}]"#
        ),
    )])?;
    schemathesis(
        "ingest service",
        &format!("http://{}/openapi.json", ingest.addr),
        &[],
        &case.dir,
    )?;
    assert_eq!(
        ingest.call("GET", "/healthz", &[], b"")?.status,
        200,
        "{}",
        ingest.log_tail()
    );
    Ok(())
}
