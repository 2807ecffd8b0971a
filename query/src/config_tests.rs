use super::*;

use freshet_config::vars as env;

#[test]
fn defaults_need_no_file() {
    let c = Config::load_with_env(None, &[]).unwrap();
    assert_eq!(c.query.listen, "127.0.0.1:8080");
    assert_eq!(c.query.route_top_k, 50);
    assert_eq!(c.query.rrf_k, 60.0);
    assert_eq!(c.milvus.collection, MilvusConfig::default().collection);
}

#[test]
fn the_pipeline_file_is_accepted_and_env_overrides_it() {
    let file = std::env::temp_dir().join(format!("freshet-q-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        "[pipeline]\nworkers = 3\n[kafka]\ntopic = \"t\"\n[query]\nlisten = \"127.0.0.1:1\"\n\
         rerank_backend = \"remote\"\nrerank_url = \"http://x/rerank\"\n\
         [[sources]]\ntopic = \"pg.t\"\nformat = \"debezium\"\nid_fields = [\"id\"]\n",
    )
    .unwrap();
    let c = Config::load_with_env(
        Some(&file),
        &env(&[
            ("FRESHET_QUERY_LISTEN", "127.0.0.1:2"),
            ("FRESHET_QUERY_API_KEYS", r#"["k1"]"#),
            ("FRESHET_MILVUS_COLLECTION", "c2"),
            ("FRESHET_QUERY_PORT", "9"),
        ]),
    )
    .unwrap();
    assert_eq!(c.query.listen, "127.0.0.1:2");
    assert_eq!(c.query.api_keys, vec![Secret::from("k1")]);
    assert_eq!(c.query.rerank_backend, RerankBackend::Remote);
    assert_eq!(c.milvus.collection, "c2");
    // Secrets are read, and never printed.
    let c = Config::load_with_env(
        None,
        &env(&[("FRESHET_QUERY_RERANK_API_KEY", "rerank-secret-1")]),
    )
    .unwrap();
    assert_eq!(c.query.rerank_api_key.0, "rerank-secret-1");
    assert!(!format!("{c:?}").contains("rerank-secret-1"));
}

#[test]
fn the_documented_file_matches_the_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/freshet.toml");
    let c = Config::load_with_env(Some(&path), &[]).unwrap();
    assert_eq!(c.query, QueryConfig::default());
    let documented = freshet_config::read_table(Some(&path)).unwrap()["query"]
        .as_table()
        .unwrap()
        .keys()
        .cloned()
        .collect::<std::collections::BTreeSet<_>>();
    let settings = sections().settings("query").unwrap().clone();
    assert_eq!(documented, settings.iter().map(|s| s.to_string()).collect());
}

/// `[llm]` in the documented file is every setting at its default: no language model.
#[test]
fn the_documented_llm_section_is_every_setting_off() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/freshet.toml");
    let c = Config::load_with_env(Some(&path), &[]).unwrap();
    assert_eq!(c.llm, LlmConfig::default());
    assert!(c.llm_settings.is_none());
    let documented = freshet_config::read_table(Some(&path)).unwrap()["llm"]
        .as_table()
        .unwrap()
        .keys()
        .cloned()
        .collect::<std::collections::BTreeSet<_>>();
    let settings = sections().settings("llm").unwrap().clone();
    assert_eq!(documented, settings.iter().map(|s| s.to_string()).collect());
}

/// A configured model is checked at start: a bad URL or an unreadable key stops the node
/// with what to do; a good one is read with its key.
#[test]
fn the_llm_section_is_checked_at_start() {
    let e = Config::load_with_env(
        None,
        &env(&[
            ("FRESHET_LLM_BASE_URL", "127.0.0.1 port 8081"),
            ("FRESHET_LLM_MODEL", "m"),
        ]),
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("llm.base_url"), "{e:#}");
    let e = Config::load_with_env(
        None,
        &env(&[
            ("FRESHET_LLM_BASE_URL", "http://127.0.0.1:8081/v1"),
            ("FRESHET_LLM_MODEL", "m"),
            ("FRESHET_LLM_API_KEY_FILE", "/nonexistent/llm-key"),
        ]),
    )
    .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("/nonexistent/llm-key") && e.contains("api_key_file"),
        "{e}"
    );
    let e = Config::load_with_env(
        None,
        &env(&[
            ("FRESHET_LLM_BASE_URL", "http://127.0.0.1:8081/v1"),
            ("FRESHET_LLM_MODEL", "m"),
            ("FRESHET_LLM_MAX_CONCURRENT", "0"),
        ]),
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("llm.max_concurrent"), "{e:#}");
    let c = Config::load_with_env(
        None,
        &env(&[
            ("FRESHET_LLM_BASE_URL", "https://llm.example.com/v1"),
            ("FRESHET_LLM_MODEL", "m"),
            ("FRESHET_LLM_API_KEY_ENV", "MY_LLM_KEY"),
            ("MY_LLM_KEY", "sk-llm-secret"),
        ]),
    )
    .unwrap();
    let s = c.llm_settings.as_ref().unwrap();
    assert_eq!(s.api_key.as_ref().unwrap().expose(), "sk-llm-secret");
    assert!(!format!("{c:?}").contains("sk-llm-secret"));
}

#[test]
fn bad_settings_are_clear_errors() {
    let e = Config::load_with_env(None, &env(&[("FRESHET_QUERY_MAX_K", "0")])).unwrap_err();
    assert!(format!("{e:#}").contains("query.max_k"), "{e:#}");
    let e = Config::load_with_env(None, &env(&[("FRESHET_QUERY_RERANK_BACKEND", "local")]))
        .unwrap_err();
    assert!(format!("{e:#}").contains("rerank_model_dir"), "{e:#}");
    let e = Config::load_with_env(None, &env(&[("FRESHET_QUERY_FUSION", "max")])).unwrap_err();
    assert!(format!("{e:#}").contains("fusion"), "{e:#}");
    for ef in ["0", "32769"] {
        let e = Config::load_with_env(None, &env(&[("FRESHET_QUERY_VECTOR_SEARCH_EF", ef)]))
            .unwrap_err();
        assert!(format!("{e:#}").contains("vector_search_ef"), "{ef}: {e:#}");
    }
    let c = Config::load_with_env(None, &env(&[("FRESHET_QUERY_VECTOR_SEARCH_EF", "96")])).unwrap();
    assert_eq!(c.query.vector_search_ef, 96);
    for nprobe in ["0", "65537"] {
        let e = Config::load_with_env(
            None,
            &env(&[("FRESHET_QUERY_VECTOR_SEARCH_NPROBE", nprobe)]),
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("vector_search_nprobe"),
            "{nprobe}: {e:#}"
        );
    }
    let c =
        Config::load_with_env(None, &env(&[("FRESHET_QUERY_VECTOR_SEARCH_NPROBE", "64")])).unwrap();
    assert_eq!(
        c.query.search_tuning(),
        freshet_milvus::SearchTuning {
            ef: 256,
            nprobe: 64
        }
    );
    let c = Config::load_with_env(
        None,
        &env(&[
            ("FRESHET_MILVUS_INDEX_TYPE", "ivf_sq8"),
            ("FRESHET_MILVUS_IVF_NLIST", "2048"),
        ]),
    )
    .unwrap();
    assert_eq!(
        (c.milvus.index_type, c.milvus.ivf_nlist),
        (freshet_milvus::IndexType::IvfSq8, 2048)
    );
    for (var, value) in [
        ("FRESHET_MILVUS_INDEX_TYPE", "ivf_pq"),
        ("FRESHET_MILVUS_HNSW_M", "1"),
        ("FRESHET_MILVUS_IVF_NLIST", "0"),
    ] {
        let e = Config::load_with_env(None, &env(&[(var, value)])).unwrap_err();
        let name = var
            .trim_start_matches("FRESHET_MILVUS_")
            .to_ascii_lowercase();
        assert!(format!("{e:#}").contains(&name), "{var}={value}: {e:#}");
    }
    let e = Config::load_with_env(None, &env(&[("FRESHET_QUERY_TLS_CERT_FILE", "/c.pem")]))
        .unwrap_err();
    assert!(format!("{e:#}").contains("tls_key_file"), "{e:#}");
}

/// A rerank API key goes over https only (or to this machine), unless allowed.
#[test]
fn a_rerank_key_is_not_sent_over_plain_http() {
    let remote = |url: &str, extra: &[(&str, &str)]| {
        let mut vars = vec![
            ("FRESHET_QUERY_RERANK_BACKEND", "remote"),
            ("FRESHET_QUERY_RERANK_URL", url),
            ("FRESHET_QUERY_RERANK_API_KEY", "rerank-key"),
        ];
        vars.extend_from_slice(extra);
        Config::load_with_env(None, &env(&vars))
    };
    let e = remote("http://rerank.example.com/rerank", &[]).unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("rerank_allow_insecure_http") && !e.contains("rerank-key"),
        "{e}"
    );
    assert!(remote("https://rerank.example.com/rerank", &[]).is_ok());
    assert!(remote("http://127.0.0.1:8081/rerank", &[]).is_ok());
    let allowed = [("FRESHET_QUERY_RERANK_ALLOW_INSECURE_HTTP", "true")];
    assert!(remote("http://rerank.example.com/rerank", &allowed).is_ok());
    // Without a key there is no secret to protect.
    let keyless = Config::load_with_env(
        None,
        &env(&[
            ("FRESHET_QUERY_RERANK_BACKEND", "remote"),
            (
                "FRESHET_QUERY_RERANK_URL",
                "http://rerank.example.com/rerank",
            ),
        ]),
    );
    assert!(keyless.is_ok());
}

/// `[replication]` and `[replica]` in the documented file are every setting at its default
/// (the replica's `path`, whose default depends on the run directory, commented out).
#[test]
fn the_documented_replica_sections_match_the_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/freshet.toml");
    let c = Config::load_with_env(Some(&path), &[]).unwrap();
    assert_eq!(
        c.replication,
        freshet_core::changelog::config::ReplicationConfig::default()
    );
    assert_eq!(c.replica, crate::replica::ReplicaConfig::default());
    let table = freshet_config::read_table(Some(&path)).unwrap();
    for (section, commented) in [("replication", None), ("replica", Some("path"))] {
        let mut documented = table[section]
            .as_table()
            .unwrap()
            .keys()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>();
        documented.extend(commented.map(str::to_string));
        let settings = sections().settings(section).unwrap().clone();
        assert_eq!(
            documented,
            settings.iter().map(|s| s.to_string()).collect(),
            "[{section}]"
        );
    }
}

/// A replica needs the changelog topic, its own index directory, and no serving pointer.
#[test]
fn a_replica_is_checked_at_start() {
    let err = |vars: &[(&str, &str)]| {
        format!("{:#}", Config::load_with_env(None, &env(vars)).unwrap_err())
    };
    assert!(err(&[("FRESHET_REPLICA_ENABLED", "true")]).contains("changelog_topic"));
    let on = [
        ("FRESHET_REPLICA_ENABLED", "true"),
        ("FRESHET_REPLICATION_CHANGELOG_TOPIC", "chunks.changelog"),
    ];
    assert!(Config::load_with_env(None, &env(&on)).is_ok());
    let mut same = on.to_vec();
    same.push(("FRESHET_REPLICA_PATH", "/tmp/idx"));
    same.push(("FRESHET_TANTIVY_PATH", "/tmp/idx"));
    assert!(err(&same).contains("the pipeline's index"));
    let mut pointer = on.to_vec();
    pointer.push(("FRESHET_QUERY_SERVING_POINTER", "/tmp/pointer"));
    assert!(err(&pointer).contains("serving_pointer"));
}
