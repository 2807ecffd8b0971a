//! The Japanese and Korean analyzers and which fields a chunk's text goes to. Needs the Japanese
//! dictionary that `deploy/install.sh` builds (`$FRESHET_HOME/dict/ipadic`): without it these
//! tests fail and say so.

use std::collections::BTreeMap;

use freshet_core::chunk::Chunk;
use freshet_tantivy::{
    analyze_ja, analyze_ko, analyze_zh, configure_japanese, japanese_analysis, ChunkIndexWriter,
    ChunkSchema, CommitPayload, Error, JapaneseAnalysis,
};

fn require_dictionary() {
    assert_eq!(
        japanese_analysis(),
        JapaneseAnalysis::Ipadic,
        "the Japanese dictionary is missing from {}: run deploy/build-ja-dict.sh (deploy/install.sh does)",
        freshet_tantivy::default_ja_dictionary().display()
    );
}

#[test]
fn japanese_morphemes_in_base_form_without_particles() {
    require_dictionary();
    let terms = analyze_ja("東京都に住んでいます");
    assert_eq!(terms, ["東京", "都", "住む"]);
    // Another inflection and other particles give the same content words.
    assert_eq!(analyze_ja("東京都で住んだ"), ["東京", "都", "住む"]);
    assert_eq!(analyze_ja("高かった"), analyze_ja("高い"));
    // Katakana long-vowel variants are one term; Latin words are lowercased.
    assert_eq!(analyze_ja("コンピューター"), analyze_ja("コンピュータ"));
    assert!(analyze_ja("BERTのモデル").contains(&"bert".to_owned()));
    assert!(analyze_ja("。、「」").is_empty() && analyze_ja("").is_empty());
}

#[test]
fn korean_bigrams() {
    assert_eq!(analyze_ko("학교에서"), ["학교", "교에", "에서"]);
    assert!(analyze_ko("학교에서").contains(&analyze_ko("학교")[0]));
    assert_eq!(analyze_ko("학교에 학교"), ["학교", "교에"]);
    assert!(analyze_ko("English 。").is_empty());
}

#[test]
fn chunks_go_to_the_fields_of_their_script() {
    let s = ChunkSchema::new();
    let has = |c: &Chunk| {
        let d = s.to_document(c);
        [
            s.text_zh, s.title_zh, s.text_ja, s.title_ja, s.text_ko, s.title_ko,
        ]
        .map(|f| d.get_first(f).is_some())
    };
    let mut c = freshet_core::testing::chunk("d", "東京都に住んでいます");
    c.title = "東京".into();
    // Kana makes the chunk Japanese, title included (a kanji-only title).
    assert_eq!(has(&c), [false, false, true, true, false, false]);
    c.text = "我们在北京大学学习".into();
    c.title = "北京".into();
    assert_eq!(has(&c), [true, true, false, false, false, false]);
    // A Chinese title with the katakana middle dot as separator stays Chinese.
    c.title = "《水调歌头・明月几时有》苏轼".into();
    c.text = "明月几时有？把酒问青天。".into();
    assert_eq!(has(&c), [true, true, false, false, false, false]);
    c.text = "학교에서 공부합니다".into();
    c.title = "English title".into();
    assert_eq!(has(&c), [false, false, false, false, true, false]);
    c.text = "English only".into();
    assert_eq!(has(&c), [false; 6]);
    // The Chinese analyzer is the same as before for Chinese text.
    assert_eq!(analyze_zh("BERT模型，训练。"), ["bert", "模型", "训练"]);
}

#[test]
fn a_missing_dictionary_is_a_clear_error() {
    let missing = std::path::Path::new("/nonexistent/freshet/ipadic");
    match configure_japanese(missing) {
        Err(e @ Error::JaDictionary { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("deploy/install.sh") && msg.contains("ja_dictionary"),
                "{msg}"
            );
        }
        other => panic!("expected a dictionary error, got {other:?}"),
    }
    let empty_source = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let err = freshet_tantivy::build_ja_dictionary(empty_source.path(), &out.path().join("d"))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("not a MeCab IPADIC source directory"),
        "{err}"
    );
    assert!(!out.path().join("d").exists());
}

#[test]
fn an_index_written_with_another_japanese_analysis_is_refused() {
    require_dictionary();
    let dir = tempfile::tempdir().unwrap();
    {
        let mut w = ChunkIndexWriter::open_or_create(dir.path(), 50_000_000).unwrap();
        let offsets = BTreeMap::from([("docs".to_owned(), BTreeMap::from([(0, 1)]))]);
        w.commit(&CommitPayload::new(offsets, 1)).unwrap();
    }
    let version = dir.path().join("freshet_schema.json");
    let raw = std::fs::read_to_string(&version).unwrap();
    assert!(raw.contains("freshet_ja=ipadic"), "{raw}");
    std::fs::write(
        &version,
        raw.replace("freshet_ja=ipadic", "freshet_ja=bigram"),
    )
    .unwrap();
    match ChunkIndexWriter::open_or_create(dir.path(), 50_000_000) {
        Err(Error::JapaneseAnalysisMismatch { index, process, .. }) => {
            assert_eq!((index.as_str(), process.as_str()), ("bigram", "ipadic"));
        }
        Err(e) => panic!("expected a Japanese analysis mismatch, got {e}"),
        Ok(_) => panic!("expected a Japanese analysis mismatch, the index opened"),
    }
    assert!(freshet_tantivy::ChunkIndexReader::open(dir.path()).is_err());
}
