//! The `[llm]` section ([`LlmConfig`]) and its validated form ([`LlmSettings`]): which
//! OpenAI-compatible `/v1/chat/completions` server answers, with which model and key, and how
//! long, how often and how many calls at once the client may spend on it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use freshet_config::Secret;
use serde::{Deserialize, Serialize};

/// The `[llm]` section. An empty `base_url` (the default) means no language model: nothing is
/// called, and every other setting must stay at its default or is refused as a mistake.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// The server's OpenAI-compatible base, the part before `/chat/completions`
    /// (`http://127.0.0.1:8081/v1` for llama.cpp's server, `http://127.0.0.1:11434/v1` for
    /// Ollama, `https://api.openai.com/v1`). Empty: no LLM.
    pub base_url: String,
    /// The `model` of every request (the server's name for it).
    pub model: String,
    /// The API key, sent as `Authorization: Bearer`: read from this file (trailing newline
    /// dropped) or this environment variable, one of them or neither (local servers need none).
    pub api_key_file: PathBuf,
    pub api_key_env: String,
    /// With a key, `base_url` must be `https://` (or on this machine) unless this is set.
    pub allow_insecure_http: bool,
    /// One attempt's limit: connecting, then the whole answer (a whole completion) or the
    /// response's headers (a stream) (milliseconds).
    pub timeout_ms: u64,
    /// A stream that sends nothing for this long is cut off with a timeout (milliseconds).
    pub stream_idle_timeout_ms: u64,
    /// Connecting to the server (milliseconds; within `timeout_ms`).
    pub connect_timeout_ms: u64,
    /// The longest a call may take, its retries and waits for a slot included (milliseconds).
    pub deadline_ms: u64,
    /// `max_tokens` of every request: the most tokens an answer may have.
    pub max_tokens: u32,
    /// Sampling temperature (0: the most likely tokens, as deterministic as the server is).
    pub temperature: f32,
    /// Calls in flight at once from this process; more wait for a slot (within `deadline_ms`).
    pub max_concurrent: usize,
    /// Retries of a call refused with 429 or 5xx or that could not connect, after the first
    /// attempt. A stream is never retried once it has sent anything.
    pub retries: u32,
    /// Back-off before retry n: `backoff_initial_ms · 2^(n-1)`, at most `backoff_max_ms`, with
    /// random jitter (half to all of it). A `Retry-After` from the server (seconds or an HTTP
    /// date) replaces it.
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            base_url: String::new(),
            model: String::new(),
            api_key_file: PathBuf::new(),
            api_key_env: String::new(),
            allow_insecure_http: false,
            timeout_ms: 60_000,
            stream_idle_timeout_ms: 30_000,
            connect_timeout_ms: 5_000,
            deadline_ms: 120_000,
            max_tokens: 1024,
            temperature: 0.0,
            max_concurrent: 4,
            retries: 3,
            backoff_initial_ms: 500,
            backoff_max_ms: 10_000,
        }
    }
}

/// [`LlmConfig`] checked, with its key read: what [`LlmClient`](crate::LlmClient) is built from.
/// `Debug` never shows the key.
#[derive(Clone, Debug)]
pub struct LlmSettings {
    /// `base_url` with a trailing `/`, so that `chat/completions` joins under it.
    pub base_url: reqwest::Url,
    pub model: String,
    pub api_key: Option<Secret>,
    pub timeout: Duration,
    pub stream_idle_timeout: Duration,
    pub connect_timeout: Duration,
    pub deadline: Duration,
    pub max_tokens: u32,
    pub temperature: f32,
    pub max_concurrent: usize,
    pub retries: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

impl LlmConfig {
    /// Whether a language model is configured (`base_url` set).
    pub fn enabled(&self) -> bool {
        !self.base_url.trim().is_empty()
    }

    /// The settings checked and the key read (`env` looks up environment variables), `None`
    /// without a `base_url`. Every error names the setting and says what to do.
    pub fn settings(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<LlmSettings>> {
        if !self.enabled() {
            let default = LlmConfig::default();
            let base_url = &self.base_url;
            let unused = LlmConfig {
                base_url: base_url.clone(),
                ..default.clone()
            };
            if *self != unused {
                bail!(
                    "llm: settings are given but llm.base_url is empty; set llm.base_url to the \
                     server's OpenAI-compatible base (e.g. http://127.0.0.1:8081/v1), or remove \
                     the [llm] settings to run without a language model"
                );
            }
            return Ok(None);
        }
        let mut url = reqwest::Url::parse(self.base_url.trim()).with_context(|| {
            format!(
                "llm.base_url {:?}: not a URL; give the server's base, e.g. \
                 http://127.0.0.1:8081/v1",
                self.base_url
            )
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            bail!(
                "llm.base_url {:?}: not an http(s) URL with a host; give the server's base, e.g. \
                 http://127.0.0.1:8081/v1",
                self.base_url
            );
        }
        if url.query().is_some() || url.fragment().is_some() {
            bail!(
                "llm.base_url {:?}: has a query or fragment; give the base only (the part \
                 before /chat/completions)",
                self.base_url
            );
        }
        if url
            .path()
            .trim_end_matches('/')
            .ends_with("/chat/completions")
        {
            bail!(
                "llm.base_url {:?}: give the base without /chat/completions (the client adds it)",
                self.base_url
            );
        }
        if !url.path().ends_with('/') {
            let path = format!("{}/", url.path());
            url.set_path(&path);
        }
        if self.model.trim().is_empty() {
            bail!("llm.model is empty: name the model the server should run (its own name for it)");
        }
        let api_key = freshet_config::resolve_secret(
            "llm.api_key",
            &Secret::default(),
            &self.api_key_file,
            &self.api_key_env,
            env,
        )
        .map_err(|e| {
            anyhow::anyhow!(
                "{e:#}; set llm.api_key_file to a readable file holding the key, or \
                 llm.api_key_env to a variable that holds it (one of the two), or neither for a \
                 server without keys"
            )
        })?;
        if api_key.is_some() {
            freshet_config::url::check_url(
                "llm.base_url (it is sent the API key)",
                url.as_str(),
                self.allow_insecure_http,
                "llm.allow_insecure_http",
            )?;
        }
        for (name, v) in [
            ("timeout_ms", self.timeout_ms),
            ("stream_idle_timeout_ms", self.stream_idle_timeout_ms),
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("deadline_ms", self.deadline_ms),
            ("backoff_initial_ms", self.backoff_initial_ms),
            ("backoff_max_ms", self.backoff_max_ms),
            ("max_tokens", u64::from(self.max_tokens)),
        ] {
            if v == 0 {
                bail!("llm.{name} must be at least 1");
            }
        }
        if self.max_concurrent == 0 {
            bail!(
                "llm.max_concurrent must be at least 1 (the calls in flight at once; more wait \
                 for a slot)"
            );
        }
        if self.backoff_initial_ms > self.backoff_max_ms {
            bail!("llm.backoff_initial_ms exceeds llm.backoff_max_ms");
        }
        if !(self.temperature.is_finite() && (0.0..=2.0).contains(&self.temperature)) {
            bail!("llm.temperature must be between 0 and 2");
        }
        Ok(Some(LlmSettings {
            base_url: url,
            model: self.model.trim().to_owned(),
            api_key,
            timeout: Duration::from_millis(self.timeout_ms),
            stream_idle_timeout: Duration::from_millis(self.stream_idle_timeout_ms),
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            deadline: Duration::from_millis(self.deadline_ms),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            max_concurrent: self.max_concurrent,
            retries: self.retries,
            backoff_initial: Duration::from_millis(self.backoff_initial_ms),
            backoff_max: Duration::from_millis(self.backoff_max_ms),
        }))
    }
}

impl LlmSettings {
    /// Settings for `model` at `base_url` with the defaults of [`LlmConfig`] (tests, tools).
    pub fn for_base(base_url: &str, model: &str) -> Result<LlmSettings> {
        let config = LlmConfig {
            base_url: base_url.to_owned(),
            model: model.to_owned(),
            ..LlmConfig::default()
        };
        config.settings(&|_| None)?.context("llm.base_url is empty")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(c: &LlmConfig) -> Result<Option<LlmSettings>> {
        c.settings(&|name| (name == "LLM_KEY").then(|| "sk-from-env".to_string()))
    }

    fn with(base_url: &str) -> LlmConfig {
        LlmConfig {
            base_url: base_url.into(),
            model: "m".into(),
            ..LlmConfig::default()
        }
    }

    #[test]
    fn no_base_url_is_no_llm_and_stray_settings_are_refused() {
        assert!(settings(&LlmConfig::default()).unwrap().is_none());
        let stray = LlmConfig {
            model: "m".into(),
            ..LlmConfig::default()
        };
        let e = format!("{:#}", settings(&stray).unwrap_err());
        assert!(e.contains("llm.base_url is empty"), "{e}");
    }

    #[test]
    fn the_base_url_is_checked_and_joined_under() {
        let s = settings(&with("http://127.0.0.1:8081/v1"))
            .unwrap()
            .unwrap();
        assert_eq!(
            s.base_url.join("chat/completions").unwrap().as_str(),
            "http://127.0.0.1:8081/v1/chat/completions"
        );
        for bad in [
            "not a url",
            "ftp://h/v1",
            "http://h/v1?x=1",
            "http://h/v1/chat/completions",
        ] {
            let e = format!("{:#}", settings(&with(bad)).unwrap_err());
            assert!(e.contains("llm.base_url"), "{bad}: {e}");
        }
        let e = format!(
            "{:#}",
            settings(&LlmConfig {
                model: " ".into(),
                ..with("http://h/v1")
            })
            .unwrap_err()
        );
        assert!(e.contains("llm.model"), "{e}");
    }

    #[test]
    fn the_key_comes_from_a_file_or_a_variable_and_is_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "sk-from-file\n").unwrap();
        let c = LlmConfig {
            api_key_file: file.clone(),
            ..with("https://api.example.com/v1")
        };
        let s = settings(&c).unwrap().unwrap();
        assert_eq!(s.api_key.as_ref().unwrap().expose(), "sk-from-file");
        assert!(!format!("{s:?}").contains("sk-from-file"));
        let c = LlmConfig {
            api_key_env: "LLM_KEY".into(),
            ..with("https://api.example.com/v1")
        };
        let s = settings(&c).unwrap().unwrap();
        assert_eq!(s.api_key.unwrap().expose(), "sk-from-env");
        // An unreadable file, a missing variable, both at once: errors that say what to do.
        for c in [
            LlmConfig {
                api_key_file: dir.path().join("missing"),
                ..with("https://h/v1")
            },
            LlmConfig {
                api_key_env: "NOT_SET".into(),
                ..with("https://h/v1")
            },
            LlmConfig {
                api_key_file: file,
                api_key_env: "LLM_KEY".into(),
                ..with("https://h/v1")
            },
        ] {
            let e = format!("{:#}", settings(&c).unwrap_err());
            assert!(e.contains("llm.api_key") && !e.contains("sk-from"), "{e}");
        }
    }

    #[test]
    fn a_key_is_not_sent_over_plain_http_beyond_this_machine() {
        let keyed = |url: &str, allow: bool| LlmConfig {
            api_key_env: "LLM_KEY".into(),
            allow_insecure_http: allow,
            ..with(url)
        };
        let e = format!(
            "{:#}",
            settings(&keyed("http://llm.example.com/v1", false)).unwrap_err()
        );
        assert!(e.contains("llm.allow_insecure_http"), "{e}");
        assert!(settings(&keyed("http://llm.example.com/v1", true)).is_ok());
        assert!(settings(&keyed("http://127.0.0.1:8081/v1", false)).is_ok());
        assert!(
            settings(&with("http://llm.example.com/v1")).is_ok(),
            "no key"
        );
    }

    #[test]
    fn limits_are_checked() {
        let e = format!(
            "{:#}",
            settings(&LlmConfig {
                max_concurrent: 0,
                ..with("http://h/v1")
            })
            .unwrap_err()
        );
        assert!(e.contains("llm.max_concurrent must be at least 1"), "{e}");
        for c in [
            LlmConfig {
                timeout_ms: 0,
                ..with("http://h/v1")
            },
            LlmConfig {
                temperature: f32::NAN,
                ..with("http://h/v1")
            },
            LlmConfig {
                temperature: 3.0,
                ..with("http://h/v1")
            },
            LlmConfig {
                backoff_initial_ms: 20_000,
                ..with("http://h/v1")
            },
        ] {
            assert!(settings(&c).is_err(), "{c:?}");
        }
    }
}
