//! [`Secret`]: a setting that holds a secret (an API key, a token, a password). `Debug` prints
//! `"<redacted>"`, so a configuration printed with `{:?}` (a log line, an error) never shows it.

use serde::{Deserialize, Serialize};

/// A secret string: `Debug` prints `"<redacted>"`; read it with `.0` or [`Secret::expose`].
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl Secret {
    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Secret(s.to_owned())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Secret(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_secret() {
        let s = Secret::from("hunter2");
        assert_eq!(format!("{s:?}"), "\"<redacted>\"");
        assert_eq!(format!("{:?}", Some(&s)), "Some(\"<redacted>\")");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn it_reads_and_writes_as_a_plain_string() {
        #[derive(Deserialize)]
        struct T {
            k: Secret,
        }
        let t: T = toml::from_str("k = \"abc\"").unwrap();
        assert_eq!(t.k, Secret::from("abc"));
        assert_eq!(toml::Value::try_from(&t.k).unwrap().as_str(), Some("abc"));
    }
}
