//! BM25 over Japanese and Korean chunks in a real index: inflected forms, particles and
//! kanji-only questions find the passage, and Chinese search is unchanged beside them. Needs
//! the Japanese dictionary that `deploy/install.sh` builds (`$FRESHET_HOME/dict/ipadic`); the
//! analyzers' own tests check that it is there.

use std::collections::BTreeMap;

use freshet_core::chunk::Chunk;
use freshet_tantivy::{ChunkFilter, ChunkIndexReader, ChunkIndexWriter, CommitPayload};

const HEAP: usize = 50_000_000;

fn chunk(id: &str, text: &str) -> Chunk {
    Chunk {
        chunk_id: id.to_owned(),
        char_end: text.chars().count() as u32,
        source: "test://cjk".to_owned(),
        ..freshet_core::testing::chunk(&format!("d-{id}"), text)
    }
}

fn top(r: &ChunkIndexReader, query: &str) -> Vec<String> {
    r.search_bm25(query, 10, &ChunkFilter::none())
        .unwrap()
        .into_iter()
        .map(|(_, c)| c.chunk_id)
        .collect()
}

fn index(chunks: &[Chunk]) -> (tempfile::TempDir, ChunkIndexReader) {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkIndexWriter::open_or_create(dir.path(), HEAP).unwrap();
    w.apply(chunks, &[]).unwrap();
    let offsets = BTreeMap::from([("docs".to_owned(), BTreeMap::from([(0, 1)]))]);
    w.commit(&CommitPayload::new(offsets, 1)).unwrap();
    let r = ChunkIndexReader::open(dir.path()).unwrap();
    (dir, r)
}

#[test]
fn japanese_inflections_particles_and_kanji_only_questions_match() {
    let (_dir, r) = index(&[
        chunk("tokyo", "私は去年から東京都に住んでいます。"),
        chunk("fuji", "富士山は日本で一番高い山として知られている。"),
        chunk("kyoto", "京都には古いお寺がたくさんあります。"),
        chunk("zh", "我住在北京，北京是中国的首都。"),
    ]);
    // Another inflection of 住む, other particles.
    assert_eq!(
        top(&r, "東京に住む人").first().map(String::as_str),
        Some("tokyo")
    );
    // 高かった is 高い in the past tense.
    assert_eq!(
        top(&r, "一番高かった山").first().map(String::as_str),
        Some("fuji")
    );
    // A question without kana is searched as Japanese too.
    assert_eq!(top(&r, "富士山").first().map(String::as_str), Some("fuji"));
    // Morphemes, not characters: 東京 does not match 京都 (jieba's single characters did).
    assert!(!top(&r, "東京に住みたい").contains(&"kyoto".to_owned()));
    // Chinese is unchanged beside Japanese.
    assert_eq!(top(&r, "北京").first().map(String::as_str), Some("zh"));
}

#[test]
fn korean_stems_match_inflected_words() {
    let (_dir, r) = index(&[
        chunk("school", "저는 매일 학교에서 한국어를 공부합니다."),
        chunk("student", "그 학생은 도서관에 갔습니다."),
        chunk("en", "A school in Seoul"),
    ]);
    // 학교 is glued to its particle in the text (학교에서).
    assert_eq!(top(&r, "학교"), ["school"]);
    assert_eq!(
        top(&r, "도서관").first().map(String::as_str),
        Some("student")
    );
    // Another ending on the same stem: 공부하다 / 공부합니다.
    assert_eq!(
        top(&r, "한국어 공부하기").first().map(String::as_str),
        Some("school")
    );
}
