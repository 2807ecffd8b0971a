//! Whether the embedding model understands a query, and so whether a hybrid retrieval runs
//! its vector route. An English model embeds a Chinese query as noise; fused with BM25, that
//! noise displaces BM25's right answers (on Chinese questions, hybrid fell below BM25 alone).
//! The model declares its languages (`freshet_embedding::language`); the query's language is
//! what the request states, else what its script (or, for alphabetic text, whatlang) says.
//! With `[query] language_routing = "auto"`, a hybrid retrieval of a query the model does not
//! understand runs BM25 alone and says so in the response. Pure.

use freshet_embedding::language::{detect, is_cjk_script, Detected, Languages};
use serde::{Deserialize, Serialize};

/// `[query] language_routing`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LanguageRouting {
    /// A hybrid retrieval leaves the vector route out of a query the model does not
    /// understand.
    #[default]
    Auto,
    /// Every route the mode names runs for every query.
    All,
}

/// What a response tells of its query's language.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QueryLanguage {
    /// ISO 639-1 code (639-3 where there is none), when known.
    pub language: Option<String>,
    /// `request` (stated by the caller), `script` (Han, Kana, Hangul), `statistics`
    /// (whatlang's reliable guess); absent when unknown.
    pub detected_by: Option<&'static str>,
    /// Whether the embedding model understands the query; absent when the model declares no
    /// languages or the query has no letters.
    pub model_covers: Option<bool>,
}

/// The language of `query` (`stated` by the caller, already normalised, wins over detection)
/// and whether `model` understands it.
pub fn assess(query: &str, stated: Option<&str>, model: Option<&Languages>) -> QueryLanguage {
    let detected = detect(query);
    let (language, detected_by) = match (stated, detected) {
        (Some(s), _) => (Some(s.to_owned()), Some("request")),
        (
            None,
            Some(Detected {
                language: Some(l),
                script,
            }),
        ) => (
            Some(l.to_owned()),
            Some(if is_cjk_script(script) {
                "script"
            } else {
                "statistics"
            }),
        ),
        (None, _) => (None, None),
    };
    let model_covers = match (model, stated, detected) {
        (None, _, _) => None,
        // The caller's word decides for scripts that name their language; for alphabetic
        // text, the script does (as for a detected language).
        (Some(m), Some(s), Some(d)) => Some(m.understands_as(Some(s), d.script)),
        (Some(m), Some(s), None) => Some(m.covers(s)),
        (Some(m), None, Some(d)) => Some(m.understands(&d)),
        (Some(_), None, None) => None,
    };
    QueryLanguage {
        language,
        detected_by,
        model_covers,
    }
}

/// Whether a hybrid retrieval under `routing` runs its vector route for a query assessed as
/// `lang`.
pub fn runs_vector(routing: LanguageRouting, lang: &QueryLanguage) -> bool {
    routing == LanguageRouting::All || lang.model_covers != Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn en() -> Languages {
        Languages::new(&["en"]).unwrap()
    }

    #[test]
    fn an_english_model_does_not_understand_chinese_queries() {
        let l = assess("哪首诗写诗人在异乡思念家乡？", None, Some(&en()));
        assert_eq!(l.language.as_deref(), Some("zh"));
        assert_eq!(l.detected_by, Some("script"));
        assert_eq!(l.model_covers, Some(false));
        assert!(!runs_vector(LanguageRouting::Auto, &l));
        assert!(runs_vector(LanguageRouting::All, &l));
    }

    #[test]
    fn english_queries_keep_both_routes() {
        for q in [
            "Statins decrease blood cholesterol.",
            "Commelina yellow mottle virus' (ComYMV) genome consists of 7489 baise pairs.",
            "ADAR1 binds to Dicer to cleave pre-miRNA.",
            "tf-idf",
        ] {
            let l = assess(q, None, Some(&en()));
            assert_eq!(l.model_covers, Some(true), "{q}");
            assert!(runs_vector(LanguageRouting::Auto, &l), "{q}");
        }
    }

    #[test]
    fn a_multilingual_model_understands_both() {
        let m = Languages::new(&["en", "zh"]).unwrap();
        assert_eq!(assess("静夜思", None, Some(&m)).model_covers, Some(true));
        assert_eq!(assess("moonlight", None, Some(&m)).model_covers, Some(true));
    }

    #[test]
    fn undeclared_models_and_letterless_queries_keep_every_route() {
        let l = assess("哪首诗写思乡", None, None);
        assert_eq!((l.language.as_deref(), l.model_covers), (Some("zh"), None));
        assert!(runs_vector(LanguageRouting::Auto, &l));
        let l = assess("2024 / 42", None, Some(&en()));
        assert_eq!(
            l,
            QueryLanguage {
                language: None,
                detected_by: None,
                model_covers: None
            }
        );
        assert!(runs_vector(LanguageRouting::Auto, &l));
    }

    #[test]
    fn the_caller_may_state_the_language() {
        // Han text stated as Japanese: the model must cover Japanese.
        let m = Languages::new(&["en", "zh"]).unwrap();
        let l = assess("東京都知事", Some("ja"), Some(&m));
        assert_eq!(
            (l.language.as_deref(), l.detected_by, l.model_covers),
            (Some("ja"), Some("request"), Some(false))
        );
        // An alphabetic query stated as French: the script decides, as for detection.
        let l = assess("le chat", Some("fr"), Some(&en()));
        assert_eq!(l.model_covers, Some(true));
    }
}
