use super::*;

#[test]
fn version_from_file_name() {
    assert_eq!(
        ort_version_from_file_name("libonnxruntime.so.1.31.1"),
        Some((1, 31))
    );
    assert_eq!(
        ort_version_from_file_name("libonnxruntime.1.16.0.dylib"),
        Some((1, 16))
    );
    assert_eq!(ort_version_from_file_name("libonnxruntime.so"), None);
    assert_eq!(ort_version_from_file_name("libfoo.so.1.2"), None);
}

#[test]
fn ort_path_is_checked_without_loading_it() {
    let e = check_ort_library(Err("no library: looked in X".into()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("looked in X"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let e = check_ort_library(Ok(dir.path().join("libonnxruntime.so.1.31.1")))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot access"), "{e}");
    let e = check_ort_library(Ok(dir.path().to_path_buf()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a regular file"), "{e}");
    let old = dir.path().join("libonnxruntime.so.1.16.3");
    std::fs::write(&old, b"\x7fELF....").unwrap();
    let e = check_ort_library(Ok(old)).unwrap_err().to_string();
    assert!(e.contains("1.16 is not supported"), "{e}");
    let text = dir.path().join("libonnxruntime.so.1.31.1");
    std::fs::write(&text, b"not a library").unwrap();
    let e = check_ort_library(Ok(text)).unwrap_err().to_string();
    assert!(e.contains("not a shared library"), "{e}");
}

#[test]
fn load_reports_bad_ort_path_and_missing_model_dir() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EmbeddingConfig {
        model_dir: dir.path().join("no-model"),
        ort_dylib_path: Some(dir.path().join("missing/libonnxruntime.so.1.31.1")),
        ..Default::default()
    };
    let e = FastEmbedder::load(&cfg).unwrap_err();
    assert!(matches!(e, Error::OrtLibrary(_)), "{e}");
    // A file that passes the file-system checks, so the model directory is checked next
    // (before ONNX Runtime is touched).
    let fake = dir.path().join("libonnxruntime.so.1.31.1");
    std::fs::write(&fake, b"\x7fELF fake").unwrap();
    let cfg = EmbeddingConfig {
        ort_dylib_path: Some(fake),
        ..cfg
    };
    let e = FastEmbedder::load(&cfg).unwrap_err();
    assert!(matches!(e, Error::Model { .. }), "{e}");
    assert!(e.to_string().contains("export-model.sh"), "{e}");
    std::fs::create_dir(dir.path().join("no-model")).unwrap();
    std::fs::write(dir.path().join("no-model/model.onnx"), b"").unwrap();
    let e = FastEmbedder::load(&cfg).unwrap_err().to_string();
    assert!(e.contains("missing tokenizer.json"), "{e}");
}

#[test]
fn prefixes_default_to_the_models_and_configuration_wins() {
    let e5 = Some("passage: ".to_string());
    assert_eq!(resolve_prefix("p", &None, &e5, "m"), "passage: ");
    assert_eq!(resolve_prefix("p", &None, &None, "m"), "");
    // explicitly empty or different: the configuration applies
    assert_eq!(resolve_prefix("p", &Some(String::new()), &e5, "m"), "");
    assert_eq!(resolve_prefix("p", &Some("q: ".into()), &e5, "m"), "q: ");
    assert_eq!(resolve_prefix("p", &Some("q: ".into()), &None, "m"), "q: ");
}

#[test]
fn derived_id_names_the_settings() {
    let meta = ModelMeta {
        model_id: "m/x".into(),
        dim: 4,
        pooling: "mean".into(),
        normalize: true,
        sha256: Some("0123456789abcdef".into()),
        source_sha256: None,
        source: None,
        passage_prefix: None,
        query_prefix: None,
        quantization: None,
        languages: Some(vec!["en".into()]),
    };
    assert_eq!(
        derived_model_id(&meta, 256, ""),
        "m/x|onnx:0123456789ab|max_length:256"
    );
    assert_eq!(derived_cache_id("m/x|w", &meta), "m/x|w");
    assert_eq!(
        derived_model_id(&meta, 128, "passage: "),
        "m/x|onnx:0123456789ab|max_length:128|passage_prefix:\"passage: \""
    );
    let meta = ModelMeta {
        source_sha256: Some("fedcba9876543210".into()),
        ..meta
    };
    assert_eq!(
        derived_model_id(&meta, 256, ""),
        "m/x|weights:fedcba987654|max_length:256"
    );
    // A quantized export of the same weights: the same space, other cache keys.
    let int8 = ModelMeta {
        quantization: Some("int8".into()),
        sha256: Some("aaaaaaaaaaaaaaaa".into()),
        ..meta.clone()
    };
    assert_eq!(
        derived_model_id(&int8, 256, ""),
        derived_model_id(&meta, 256, "")
    );
    assert_eq!(
        derived_cache_id(&derived_model_id(&int8, 256, ""), &int8),
        "m/x|weights:fedcba987654|max_length:256|quantization:int8"
    );
}

#[test]
fn fast_embedder_is_send() {
    fn send<T: Send>() {}
    send::<FastEmbedder>();
}
