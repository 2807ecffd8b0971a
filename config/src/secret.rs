//! [`Secret`]: a setting that holds a secret (an API key, a token, a password). `Debug` prints
//! `"<redacted>"`, so a configuration printed with `{:?}` (a log line, an error) never shows it.
//! [`resolve_secret`] reads one given inline, in a file or in an environment variable.

use std::path::Path;

use anyhow::{bail, Context, Result};
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

/// A secret given inline, in a file (trailing newline dropped) or in an environment variable:
/// exactly one of them. `None` when none is given. `what` names the setting in errors.
pub fn resolve_secret(
    what: &str,
    inline: &Secret,
    file: &Path,
    env_var: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Secret>> {
    let given = [
        !inline.0.is_empty(),
        !file.as_os_str().is_empty(),
        !env_var.is_empty(),
    ];
    match given.iter().filter(|g| **g).count() {
        0 => return Ok(None),
        1 => {}
        _ => bail!("{what}: give the secret one way only (inline, _file or _env)"),
    }
    let value = if !inline.0.is_empty() {
        inline.0.clone()
    } else if !file.as_os_str().is_empty() {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("{what}: cannot read {}", file.display()))?;
        text.trim_end_matches(['\r', '\n']).to_owned()
    } else {
        env(env_var)
            .with_context(|| format!("{what}: environment variable {env_var} is not set"))?
    };
    if value.trim().is_empty() {
        bail!("{what}: the secret is empty");
    }
    Ok(Some(Secret(value)))
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

#[cfg(test)]
mod resolve_tests {
    use super::*;

    #[test]
    fn a_secret_comes_one_way() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("k");
        std::fs::write(&file, "from-file\n").unwrap();
        let env = |n: &str| (n == "K").then(|| "from-env".to_string());
        let none = Path::new("");
        let got = |inline: &str, f: &Path, e: &str| {
            resolve_secret("k", &Secret(inline.into()), f, e, &env).map(|s| s.map(|s| s.0))
        };
        assert_eq!(got("x", none, "").unwrap().as_deref(), Some("x"));
        assert_eq!(got("", &file, "").unwrap().as_deref(), Some("from-file"));
        assert_eq!(got("", none, "K").unwrap().as_deref(), Some("from-env"));
        assert_eq!(got("", none, "").unwrap(), None);
        assert!(got("x", &file, "").is_err());
        assert!(got("", none, "MISSING").is_err());
        assert!(got("", &dir.path().join("nope"), "").is_err());
        std::fs::write(&file, "\n").unwrap();
        assert!(got("", &file, "").is_err());
    }

    #[test]
    fn an_error_never_shows_the_secret() {
        let e = resolve_secret(
            "x.key",
            &Secret("hunter2".into()),
            Path::new("/f"),
            "",
            &|_| None,
        )
        .unwrap_err();
        assert!(!format!("{e:#}").contains("hunter2"), "{e:#}");
    }
}
