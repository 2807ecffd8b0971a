//! The `[transform]` section: what a `/v1/retrieve` request gets when it names no
//! transformation of its own (multi-query variants, HyDE), the limits on what it may ask for
//! (variants, conversation turns), and the time, tokens and cache the language model's rewrites
//! may use. Checked at start: a default that needs a language model without `[llm]` stops the
//! node with what to do.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// When HyDE (a hypothetical answer passage embedded for the vector route) runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HydeMode {
    Off,
    On,
    /// For analytical questions only ([`super::classify`]).
    Auto,
}

impl HydeMode {
    pub fn as_str(self) -> &'static str {
        match self {
            HydeMode::Off => "off",
            HydeMode::On => "on",
            HydeMode::Auto => "auto",
        }
    }
}

/// The `[transform]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransformConfig {
    /// Rewrites of the question the language model writes for a request that does not say
    /// (0: none); each is searched beside the question and all lists are fused with RRF.
    pub multi_query: usize,
    /// The most rewrites a request may ask for.
    pub max_multi_query: usize,
    /// HyDE for a request that does not say: `off`, `on` or `auto`.
    pub hyde: HydeMode,
    /// The time all of a request's language model calls may take together (milliseconds);
    /// past it the request searches its own words (marked degraded). Less than
    /// `query.request_timeout_ms`.
    pub timeout_ms: u64,
    /// `max_tokens` of a rewrite or a hypothetical passage.
    pub max_tokens: u32,
    /// Rewrites and passages kept, by model, prompt and input (0: no cache).
    pub cache_entries: usize,
    /// The most previous turns a request's `history` may hold, and their characters together.
    pub max_history_turns: usize,
    pub max_history_chars: usize,
}

impl Default for TransformConfig {
    fn default() -> Self {
        TransformConfig {
            multi_query: 0,
            max_multi_query: 5,
            hyde: HydeMode::Off,
            timeout_ms: 4000,
            max_tokens: 300,
            cache_entries: 1024,
            max_history_turns: 20,
            max_history_chars: 16_000,
        }
    }
}

impl TransformConfig {
    /// Whether a request that names no transformation gets one.
    pub fn transforms_by_default(&self) -> bool {
        self.multi_query > 0 || self.hyde != HydeMode::Off
    }

    /// Checks the section against the node: `llm` whether `[llm]` is set, and the request
    /// timeout the transformation must fit in.
    pub fn validate(&self, llm: bool, request_timeout_ms: u64) -> Result<()> {
        if self.multi_query > self.max_multi_query {
            bail!(
                "transform.multi_query = {} is above transform.max_multi_query = {}: lower it \
                 or raise the limit",
                self.multi_query,
                self.max_multi_query
            );
        }
        if self.max_multi_query > 10 {
            bail!("transform.max_multi_query must be at most 10 (each rewrite is a full search)");
        }
        // Without a model no transformation runs, so its time share cannot clash with the
        // request timeout (a node with a short request timeout and no [llm] starts).
        if self.timeout_ms == 0 || (llm && self.timeout_ms >= request_timeout_ms) {
            bail!(
                "transform.timeout_ms must be between 1 and query.request_timeout_ms - 1 ({}), \
                 got {}: the search needs time after the rewrites",
                request_timeout_ms.saturating_sub(1),
                self.timeout_ms
            );
        }
        if self.max_tokens == 0 || self.max_history_turns == 0 || self.max_history_chars == 0 {
            bail!(
                "transform.max_tokens, transform.max_history_turns and \
                 transform.max_history_chars must be at least 1"
            );
        }
        if !llm && self.transforms_by_default() {
            bail!(
                "[transform] asks for multi_query = {} and hyde = \"{}\" by default, which need a \
                 language model, and [llm] is not set: set llm.base_url and llm.model, or set \
                 transform.multi_query = 0 and transform.hyde = \"off\"",
                self.multi_query,
                self.hyde.as_str()
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{sections, Config};
    use std::path::Path;

    fn documented() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/freshet.toml")
    }

    /// `[transform]` in the documented file: every setting, at its default.
    #[test]
    fn the_documented_section_matches_the_defaults() {
        let c = Config::load_with_env(Some(&documented()), &[]).unwrap();
        assert_eq!(c.transform, TransformConfig::default());
        let keys = freshet_config::read_table(Some(&documented())).unwrap()["transform"]
            .as_table()
            .unwrap()
            .keys()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>();
        let settings = sections().settings("transform").unwrap().clone();
        assert_eq!(keys, settings.iter().map(|s| s.to_string()).collect());
    }

    /// The node does not start with a default transformation and no `[llm]`.
    #[test]
    fn the_node_checks_the_section_at_start() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let e = Config::load_with_env(
            Some(&documented()),
            &env(&[("FRESHET_TRANSFORM_MULTI_QUERY", "3")]),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("llm.base_url"), "{e:#}");
        let c = Config::load_with_env(
            Some(&documented()),
            &env(&[
                ("FRESHET_TRANSFORM_MULTI_QUERY", "3"),
                ("FRESHET_TRANSFORM_HYDE", "auto"),
                ("FRESHET_LLM_BASE_URL", "http://127.0.0.1:8081/v1"),
                ("FRESHET_LLM_MODEL", "qwen2.5"),
            ]),
        )
        .unwrap();
        assert_eq!(
            (c.transform.multi_query, c.transform.hyde),
            (3, HydeMode::Auto)
        );
        assert!(Config::load_with_env(
            Some(&documented()),
            &env(&[("FRESHET_TRANSFORM_HYDE", "sometimes")]),
        )
        .is_err());
    }

    #[test]
    fn a_default_transformation_needs_a_language_model() {
        assert!(TransformConfig::default().validate(false, 10_000).is_ok());
        let hyde = TransformConfig {
            hyde: HydeMode::Auto,
            ..Default::default()
        };
        let e = hyde.validate(false, 10_000).unwrap_err().to_string();
        assert!(e.contains("llm.base_url") && e.contains("hyde"), "{e}");
        assert!(hyde.validate(true, 10_000).is_ok());
        let many = TransformConfig {
            multi_query: 6,
            ..Default::default()
        };
        assert!(many.validate(true, 10_000).is_err());
        let slow = TransformConfig {
            timeout_ms: 10_000,
            ..Default::default()
        };
        let e = slow.validate(true, 10_000).unwrap_err().to_string();
        assert!(e.contains("request_timeout_ms"), "{e}");
        // Without a model nothing transforms: a short request timeout is no clash.
        assert!(TransformConfig::default().validate(false, 800).is_ok());
        assert!(TransformConfig::default().validate(true, 800).is_err());
    }
}
