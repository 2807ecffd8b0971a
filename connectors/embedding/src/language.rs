//! Which language a text is in, and whether the embedding model understands it.
//!
//! A model's vectors mean something only for the languages it was trained on: an English model
//! embeds Chinese text as noise, and that noise, fused with BM25, displaces BM25's right answer.
//! The model declares the languages it covers ([`Languages`], from `freshet-model.json`'s
//! `languages` or `[embedding] languages`); [`detect`] names a text's language, script first
//! (Han, Kana and Hangul decide Chinese, Japanese and Korean without statistics, whatever the
//! length), then [whatlang](https://crates.io/crates/whatlang) for the script and, when it calls
//! its guess reliable, the language of the rest. The query node leaves a route out of a
//! query it cannot understand; the pipeline counts chunks by language and warns when much of the
//! corpus is outside the model's languages.
//!
//! Languages are ISO 639-1 codes (`en`, `zh`), or ISO 639-3 where a language has no two-letter
//! code; a configuration may use either, they are normalised on reading.

use std::collections::BTreeSet;

use freshet_core::script::{
    is_hangul, is_ideographic, is_kana, is_kana_letter, kana_makes_japanese,
};

pub use whatlang::Script;

/// What [`detect`] tells of a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detected {
    /// Its language (ISO 639-1 where there is one, else 639-3), when it can be told: by script
    /// for Chinese, Japanese and Korean, else when whatlang calls its guess reliable.
    pub language: Option<&'static str>,
    /// Its dominant script (`Mandarin` is whatlang's name for Han).
    pub script: whatlang::Script,
}

/// Characters of each script that decides a language by itself.
#[derive(Default)]
struct ScriptCounts {
    han: usize,
    kana: usize,
    hangul: usize,
    /// Words (runs of letters) in any other script.
    other_words: usize,
}

fn count_scripts(text: &str) -> ScriptCounts {
    let mut n = ScriptCounts::default();
    let mut in_word = false;
    for c in text.chars() {
        if is_ideographic(c) {
            n.han += 1;
            in_word = false;
        } else if is_kana_letter(c) {
            n.kana += 1;
            in_word = false;
        } else if is_kana(c) {
            // The marks of the kana blocks (・ ー ゝ), which Chinese text uses too: no letter.
            in_word = false;
        } else if is_hangul(c) {
            n.hangul += 1;
            in_word = false;
        } else if c.is_alphabetic() {
            if !in_word {
                n.other_words += 1;
            }
            in_word = true;
        } else {
            in_word = false;
        }
    }
    n
}

/// The language and script of `text`; `None` when it has no letters.
///
/// CJK characters decide when they are at least as many as the words of other scripts (one
/// character carries about what a word does): kana letters make it Japanese by the tantivy
/// analyzers' rule ([`kana_makes_japanese`]: one in twenty of the Han and kana letters; a
/// middle dot ・ in a Chinese text is no kana), Hangul in the majority Korean, else Chinese,
/// simplified and traditional alike.
/// Otherwise the script is whatlang's, and the language its guess when reliable: short
/// alphabetic texts (most queries) often have no reliable guess, and even a "reliable" one can
/// be wrong on a short technical sentence, which is why [`Languages::understands`] decides
/// alphabetic text by script.
pub fn detect(text: &str) -> Option<Detected> {
    let n = count_scripts(text);
    let cjk = n.han + n.kana + n.hangul;
    if cjk > 0 && cjk >= n.other_words {
        let (language, script) = if kana_makes_japanese(n.han, n.kana) {
            ("ja", whatlang::Script::Hiragana)
        } else if n.hangul * 2 >= cjk {
            ("ko", whatlang::Script::Hangul)
        } else {
            ("zh", whatlang::Script::Mandarin)
        };
        return Some(Detected {
            language: Some(language),
            script,
        });
    }
    let info = whatlang::detect(text)?;
    Some(Detected {
        language: info.is_reliable().then(|| code_of(info.lang())),
        script: info.script(),
    })
}

/// Whether `s` is a script that names its language ([`detect`] decides those by script).
pub fn is_cjk_script(s: Script) -> bool {
    use whatlang::Script::*;
    matches!(s, Mandarin | Hiragana | Katakana | Hangul)
}

/// whatlang's language as ISO 639-1 where there is one.
fn code_of(lang: whatlang::Lang) -> &'static str {
    match lang {
        // Mandarin: 639-1 has only the macrolanguage, which is what users write.
        whatlang::Lang::Cmn => "zh",
        l => isolang::Language::from_639_3(l.code())
            .and_then(|i| i.to_639_1())
            .unwrap_or(l.code()),
    }
}

/// `code` (ISO 639-1 or 639-3, any case) as [`detect`] names it; `None` if it is no ISO 639
/// code.
pub fn normalise(code: &str) -> Option<String> {
    let c = code.trim().to_ascii_lowercase();
    let lang = match c.len() {
        2 => isolang::Language::from_639_1(&c),
        3 => isolang::Language::from_639_3(&c),
        _ => None,
    }?;
    Some(match lang.to_639_3() {
        // The Chinese macrolanguage and Mandarin are both "zh".
        "zho" | "cmn" => "zh".to_string(),
        _ => lang.to_639_1().unwrap_or(lang.to_639_3()).to_string(),
    })
}

/// The languages a model covers, as declared: codes, or `["all"]` for a model declared to
/// cover every language (a multilingual remote model).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Languages {
    codes: BTreeSet<String>,
    all: bool,
}

impl Languages {
    /// From declared codes (`["all"]`: every language); `Err` names the first that is not an
    /// ISO 639 code.
    pub fn new<S: AsRef<str>>(codes: &[S]) -> Result<Languages, String> {
        if codes
            .iter()
            .any(|c| c.as_ref().trim().eq_ignore_ascii_case("all"))
        {
            if codes.len() > 1 {
                return Err("\"all\" stands alone: list codes, or [\"all\"]".into());
            }
            return Ok(Languages {
                codes: BTreeSet::new(),
                all: true,
            });
        }
        let mut out = BTreeSet::new();
        for c in codes {
            let c = c.as_ref();
            out.insert(normalise(c).ok_or_else(|| {
                format!("{c:?} is not an ISO 639-1 or 639-3 language code (e.g. \"en\", \"zh\")")
            })?);
        }
        if out.is_empty() {
            return Err("no languages: list at least one (e.g. [\"en\"])".into());
        }
        Ok(Languages {
            codes: out,
            all: false,
        })
    }

    /// Whether the model is declared to cover every language.
    pub fn all(&self) -> bool {
        self.all
    }

    /// Whether the model covers `code` (as [`detect`] or [`normalise`] name it).
    pub fn covers(&self, code: &str) -> bool {
        self.all || self.codes.contains(code)
    }

    /// Whether the model understands a text detected as `d`: for Chinese, Japanese and Korean,
    /// whether it covers that language; for any other script, whether it covers a language
    /// written in it (an English model reads a French query poorly, but not as noise).
    pub fn understands(&self, d: &Detected) -> bool {
        self.understands_as(d.language, d.script)
    }

    /// [`Languages::understands`] for a text in `script` whose language is `language` (as a
    /// caller may state it).
    pub fn understands_as(&self, language: Option<&str>, script: Script) -> bool {
        if self.all {
            return true;
        }
        if is_cjk_script(script) {
            return language.is_some_and(|l| self.covers(l));
        }
        script.langs().iter().any(|l| self.covers(code_of(*l)))
    }

    /// The codes, sorted.
    pub fn codes(&self) -> impl Iterator<Item = &str> {
        self.codes.iter().map(String::as_str)
    }

    /// A short description for messages: up to five codes, then how many more.
    pub fn describe(&self) -> String {
        if self.all {
            return "all languages".into();
        }
        let shown: Vec<&str> = self.codes().take(5).collect();
        match self.codes.len() {
            n if n > 5 => format!("{} and {} more", shown.join(", "), n - 5),
            _ => shown.join(", "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn language(text: &str) -> Option<&'static str> {
        detect(text).and_then(|d| d.language)
    }

    #[test]
    fn all_covers_every_language_and_stands_alone() {
        let all = Languages::new(&["all"]).unwrap();
        assert!(all.all() && all.covers("zh") && all.covers("sw"));
        for text in [
            "静夜思的作者是谁",
            "東京の天気はどうですか",
            "The river rises",
        ] {
            assert!(all.understands(&detect(text).unwrap()), "{text}");
        }
        assert_eq!(all.describe(), "all languages");
        assert!(Languages::new(&["ALL"]).unwrap().all());
        assert!(Languages::new(&["all", "en"]).is_err());
        let en = Languages::new(&["en"]).unwrap();
        assert!(!en.all() && !en.covers("zh"));
    }

    #[test]
    fn cjk_scripts_decide_without_statistics() {
        for (text, want) in [
            ("静夜思的作者是谁", "zh"),
            ("唐朝的詩人如何看待離別", "zh"),
            ("RAG 系统为什么要分块", "zh"),
            ("東京の天気はどうですか", "ja"),
            ("東京都知事の選挙", "ja"),
            ("서울의 날씨는 어때요", "ko"),
            ("李白", "zh"),
            // The kana block's middle dot and prolonged sound mark are no kana letters.
            ("床前明月光・疑是地上霜", "zh"),
            ("唐・李白《静夜思》", "zh"),
            ("コーヒー", "ja"),
        ] {
            assert_eq!(language(text), Some(want), "{text}");
        }
    }

    #[test]
    fn a_stray_cjk_name_does_not_make_english_chinese() {
        let d = detect("What did the poet 李白 write about the moon at night?").unwrap();
        assert_eq!(d.script, whatlang::Script::Latin);
    }

    #[test]
    fn statistics_name_longer_alphabetic_text() {
        assert_eq!(
            language(
                "The cat sat on the mat and looked out of the window at the birds in the garden."
            ),
            Some("en")
        );
        assert_eq!(
            language("Die Katze sitzt auf der Matte und schaut aus dem Fenster in den Garten."),
            Some("de")
        );
        assert_eq!(
            language("Москва является столицей Российской Федерации и крупнейшим городом страны."),
            Some("ru")
        );
    }

    #[test]
    fn nothing_to_tell_is_none() {
        assert_eq!(detect(""), None);
        assert_eq!(detect("42 / 7"), None);
    }

    #[test]
    fn an_english_model_understands_alphabetic_text_not_cjk() {
        let en = Languages::new(&["en"]).unwrap();
        let understands = |t: &str| en.understands(&detect(t).unwrap());
        assert!(understands("Statins decrease blood cholesterol."));
        // whatlang calls this one French, reliably: alphabetic text is decided by script.
        assert!(understands(
            "Commelina yellow mottle virus' (ComYMV) genome consists of 7489 baise pairs."
        ));
        assert!(understands("Le chat est assis sur le tapis."));
        assert!(!understands("哪首诗写思念家乡"));
        assert!(!understands("東京の天気はどうですか"));
        assert!(!understands("Кошка сидит на коврике и смотрит в окно."));
        let multi = Languages::new(&["en", "zh", "ja", "ru"]).unwrap();
        for t in ["哪首诗写思念家乡", "東京の天気", "Кошка сидит на коврике."]
        {
            assert!(multi.understands(&detect(t).unwrap()), "{t}");
        }
        assert!(!multi.understands(&detect("서울의 날씨는 어때요").unwrap()));
    }

    #[test]
    fn codes_normalise_to_one_form() {
        assert_eq!(normalise("EN").as_deref(), Some("en"));
        assert_eq!(normalise("eng").as_deref(), Some("en"));
        assert_eq!(normalise("zho").as_deref(), Some("zh"));
        assert_eq!(normalise("cmn").as_deref(), Some("zh"));
        assert_eq!(normalise("english"), None);
        assert_eq!(normalise("xx"), None);
    }

    #[test]
    fn languages_are_checked_and_covered() {
        let l = Languages::new(&["en", "ZH", "deu"]).unwrap();
        assert!(l.covers("en") && l.covers("zh") && l.covers("de"));
        assert!(!l.covers("ja"));
        assert_eq!(l.describe(), "de, en, zh");
        let e = Languages::new(&["en", "engl"]).unwrap_err();
        assert!(e.contains("engl"), "{e}");
        assert!(Languages::new::<&str>(&[]).is_err());
    }
}
