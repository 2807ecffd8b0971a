//! freshet's settings, layered the same way for every binary: one TOML file (every setting
//! optional), then `FRESHET_<SECTION>_<KEY>` environment variables on top
//! (`FRESHET_KAFKA_BROKERS=host:9092`, `FRESHET_PIPELINE_WORKERS=4`). A variable's value is read
//! as a TOML value (`4`, `true`, `["a","b"]`) and falls back to a plain string.
//!
//! This crate knows every section of the file ([`SECTIONS`]): a section it does not know stops
//! every binary, naming it. Each binary lists only the sections it reads, with the struct that
//! reads each one ([`Sections::with`]); the others' sections are dropped before it parses the
//! file. A variable is applied only when it names a field of such a struct, so the deploy
//! scripts' own variables (`FRESHET_KAFKA_PORT`) are left alone.
//!
//! ```
//! use serde::Deserialize;
//!
//! #[derive(Debug, Default, Deserialize)]
//! #[serde(default, deny_unknown_fields)]
//! struct Kafka { brokers: String, threads: Option<usize> }
//!
//! #[derive(Debug, Default, Deserialize)]
//! #[serde(default, deny_unknown_fields)]
//! struct Config { kafka: Kafka }
//!
//! let env = [("FRESHET_KAFKA_THREADS".to_string(), "3".to_string())];
//! let sections = freshet_config::Sections::new().with::<Kafka>("kafka");
//! let c: Config = freshet_config::load(None, &env, &sections).unwrap();
//! assert_eq!(c.kafka.threads, Some(3));
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

mod secret;
pub mod serving;
pub mod url;
pub use secret::{resolve_secret, Secret};

/// What can go wrong reading settings.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML: {source}")]
    Toml {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("config section [{0}] is not a table")]
    NotATable(String),
    #[error("unknown config section [{name}] (freshet's sections: {})", SECTIONS.join(", "))]
    UnknownSection { name: String },
    #[error("invalid configuration (file or FRESHET_* environment): {0}")]
    Invalid(toml::de::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

/// `$FRESHET_HOME`, or `$HOME/.freshet` when unset (`./.freshet` without a home either): where
/// `deploy/install.sh` puts the tools, models, venvs and, by default, the indexes and caches.
pub fn freshet_home() -> PathBuf {
    freshet_home_from(
        std::env::var_os("FRESHET_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
}

/// [`freshet_home`] from the values of `FRESHET_HOME` and `HOME`.
pub fn freshet_home_from(freshet_home: Option<&OsStr>, home: Option<&OsStr>) -> PathBuf {
    match freshet_home {
        Some(h) if !h.is_empty() => PathBuf::from(h),
        _ => home
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."))
            .join(".freshet"),
    }
}

/// Where the local stack keeps its state: `$FRESHET_RUN_DIR`, or `run` under [`freshet_home`].
/// The deploy scripts (`deploy/lib.sh`) decide the same way, so that every binary started by
/// hand in a new shell finds what `deploy/run-local.sh` started: the tantivy index
/// (`index/tantivy`), the folder-sync state (`watch/`), the broker's and Milvus' data.
pub fn run_dir() -> PathBuf {
    run_dir_from(
        std::env::var_os("FRESHET_RUN_DIR").as_deref(),
        &freshet_home(),
    )
}

/// [`run_dir`] from the variable's value and the home.
pub fn run_dir_from(run_dir: Option<&OsStr>, home: &Path) -> PathBuf {
    match run_dir {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => home.join("run"),
    }
}

/// Every section of freshet's configuration file (`deploy/freshet.toml`), whichever binary
/// reads it: `freshet` (pipeline, limits, kafka, chunking, embedding, milvus, tantivy, metrics,
/// sources, files, reindex), `freshet-query` (query, tantivy, milvus, embedding, llm, answer,
/// transform), `freshet-ingest` (ingest, kafka, limits) and `freshet-tools`.
pub const SECTIONS: &[&str] = &[
    "answer",
    "chunking",
    "embedding",
    "files",
    "ingest",
    "kafka",
    "limits",
    "llm",
    "metrics",
    "milvus",
    "pipeline",
    "query",
    "reindex",
    "replica",
    "replication",
    "sources",
    "tantivy",
    "transform",
];

/// The sections a binary reads, each with the names of its settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sections {
    settings: BTreeMap<&'static str, BTreeSet<&'static str>>,
    /// Sections read whole, without variables (`[[sources]]`, an array of tables).
    whole: BTreeSet<&'static str>,
}

impl Sections {
    pub fn new() -> Self {
        Sections::default()
    }

    /// Adds section `name` (one of [`SECTIONS`]), read by `T`: its settings are `T`'s field
    /// names, optional ones included.
    pub fn with<T: DeserializeOwned>(mut self, name: &'static str) -> Self {
        debug_assert!(SECTIONS.contains(&name), "[{name}] is not in SECTIONS");
        let fields = serde_aux::serde_introspection::serde_introspect::<T>();
        self.settings.insert(name, fields.iter().copied().collect());
        self
    }

    /// Adds section `name` (one of [`SECTIONS`]), read from the file only (no variables).
    pub fn whole(mut self, name: &'static str) -> Self {
        debug_assert!(SECTIONS.contains(&name), "[{name}] is not in SECTIONS");
        self.whole.insert(name);
        self
    }

    /// Whether the binary reads section `name`.
    pub fn reads(&self, name: &str) -> bool {
        self.settings.contains_key(name) || self.whole.contains(name)
    }

    /// The settings of section `name`.
    pub fn settings(&self, name: &str) -> Option<&BTreeSet<&'static str>> {
        self.settings.get(name)
    }
}

/// `(name, value)` pairs as [`load`] takes the environment (`std::env::vars()` collected), for
/// callers and tests that state the variables themselves.
pub fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The config file as a table (empty without a file).
pub fn read_table(path: Option<&Path>) -> Result<toml::Table> {
    let Some(p) = path else {
        return Ok(toml::Table::new());
    };
    let text = std::fs::read_to_string(p).map_err(|source| Error::Read {
        path: p.to_path_buf(),
        source,
    })?;
    text.parse::<toml::Table>().map_err(|source| Error::Toml {
        path: p.to_path_buf(),
        source,
    })
}

/// Applies `FRESHET_<SECTION>_<KEY>=value` on top of `table` for the settings in `sections`.
/// Variables that name no setting are left alone.
pub fn apply_env(
    table: &mut toml::Table,
    env: &[(String, String)],
    sections: &Sections,
) -> Result<()> {
    for (name, raw) in env {
        let Some(rest) = name.strip_prefix("FRESHET_") else {
            continue;
        };
        let rest = rest.to_ascii_lowercase();
        // The longest section name that prefixes the variable wins.
        let Some((section, keys)) = sections
            .settings
            .iter()
            .filter(|(s, _)| rest.starts_with(&format!("{s}_")))
            .max_by_key(|(s, _)| s.len())
        else {
            continue;
        };
        let key = &rest[section.len() + 1..];
        if !keys.contains(key) {
            tracing::debug!(variable = %name, "not a configuration setting; ignored");
            continue;
        }
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let Some(section_table) = entry.as_table_mut() else {
            return Err(Error::NotATable(section.to_string()));
        };
        section_table.insert(key.to_string(), parse_env_value(raw));
    }
    Ok(())
}

/// A variable's value as TOML (`4`, `true`, `["a"]`, `{a = 1}`), else as a plain string.
pub fn parse_env_value(raw: &str) -> toml::Value {
    match format!("v = {raw}").parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

/// Refuses a section that is none of [`SECTIONS`] (a misspelt section is never ignored).
pub fn check_sections(table: &toml::Table) -> Result<()> {
    match table.keys().find(|k| !SECTIONS.contains(&k.as_str())) {
        Some(name) => Err(Error::UnknownSection { name: name.clone() }),
        None => Ok(()),
    }
}

/// Reads `path` (if any), checks its sections, keeps those in `sections`, applies `env` for
/// them, and deserializes the result.
pub fn load<T: DeserializeOwned>(
    path: Option<&Path>,
    env: &[(String, String)],
    sections: &Sections,
) -> Result<T> {
    let mut table = read_table(path)?;
    check_sections(&table)?;
    table.retain(|name, _| sections.reads(name));
    apply_env(&mut table, env, sections)?;
    toml::Value::Table(table).try_into().map_err(Error::Invalid)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Kafka {
        brokers: String,
        properties: BTreeMap<String, String>,
        threads: Option<usize>,
    }

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Query {
        listen: String,
        max_k: usize,
    }

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Config {
        kafka: Kafka,
        query: Query,
    }

    fn sections() -> Sections {
        Sections::new()
            .with::<Kafka>("kafka")
            .with::<Query>("query")
    }

    use crate::vars as env;

    #[test]
    fn settings_are_the_field_names_optional_ones_included() {
        let s = sections();
        let kafka: Vec<&str> = s.settings("kafka").unwrap().iter().copied().collect();
        assert_eq!(kafka, ["brokers", "properties", "threads"]);
        assert_eq!(s.settings("nope"), None);
    }

    #[test]
    fn variables_override_the_file_as_toml_values_or_strings() {
        let dir = std::env::temp_dir().join(format!("freshet-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f.toml");
        std::fs::write(&file, "[kafka]\nbrokers = \"a:1\"\n[query]\nmax_k = 5\n").unwrap();
        let c: Config = load(
            Some(&file),
            &env(&[
                ("FRESHET_KAFKA_BROKERS", "b:2"),
                ("FRESHET_KAFKA_THREADS", "3"),
                ("FRESHET_KAFKA_PROPERTIES", "{\"acks\" = \"all\"}"),
                ("FRESHET_QUERY_LISTEN", "0.0.0.0:80"),
                // not settings: left alone
                ("FRESHET_KAFKA_PORT", "9092"),
                ("FRESHET_HOME", "/x"),
                ("OTHER", "1"),
            ]),
            &sections(),
        )
        .unwrap();
        assert_eq!(c.kafka.brokers, "b:2");
        assert_eq!(c.kafka.threads, Some(3));
        assert_eq!(c.kafka.properties["acks"], "all");
        assert_eq!(c.query.listen, "0.0.0.0:80");
        assert_eq!(c.query.max_k, 5, "the file's value stays");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A binary parses only its own sections; a section no binary reads stops every one.
    #[test]
    fn other_binaries_sections_are_dropped_and_unknown_ones_refused() {
        let file =
            std::env::temp_dir().join(format!("freshet-sections-{}.toml", std::process::id()));
        std::fs::write(
            &file,
            "[kafka]\nbrokers = \"a:1\"\n[ingest]\nlisten = \"x\"\n[[sources]]\ntopic = \"t\"\n",
        )
        .unwrap();
        let c: Config = load(Some(&file), &[], &sections()).unwrap();
        assert_eq!(c.kafka.brokers, "a:1");
        std::fs::write(
            &file,
            "[kafka]\nbrokers = \"a:1\"\n[kafak]\nbrokers = \"b\"\n",
        )
        .unwrap();
        let e = load::<Config>(Some(&file), &[], &sections()).unwrap_err();
        assert!(
            matches!(&e, Error::UnknownSection { name } if name == "kafak"),
            "{e}"
        );
        assert!(e.to_string().contains("[kafak]"), "{e}");
        std::fs::remove_file(&file).unwrap();
    }

    /// The documented file has exactly the sections this crate knows.
    #[test]
    fn the_documented_file_has_every_section() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/freshet.toml");
        let table = read_table(Some(&path)).unwrap();
        check_sections(&table).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        for name in SECTIONS {
            assert!(
                table.contains_key(*name) || text.contains(&format!("[[{name}]]")),
                "deploy/freshet.toml does not document [{name}]"
            );
        }
    }

    #[test]
    fn errors_name_the_file_or_the_setting() {
        let e = read_table(Some(Path::new("/nonexistent/freshet.toml"))).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/freshet.toml"), "{e}");
        let e = load::<Config>(None, &env(&[("FRESHET_QUERY_MAX_K", "many")]), &sections())
            .unwrap_err();
        assert!(e.to_string().contains("max_k"), "{e}");
        let mut t: toml::Table = "kafka = 3".parse().unwrap();
        let e =
            apply_env(&mut t, &env(&[("FRESHET_KAFKA_BROKERS", "x")]), &sections()).unwrap_err();
        assert!(matches!(e, Error::NotATable(s) if s == "kafka"));
    }

    /// `deploy/lib.sh` (every deploy script) and the binaries keep the local stack's state in
    /// the same place, whichever of `HOME`, `FRESHET_HOME` and `FRESHET_RUN_DIR` are set.
    #[test]
    fn the_deploy_scripts_and_the_binaries_agree_on_the_state_directory() {
        let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/lib.sh");
        let tmp = std::env::temp_dir().join(format!("freshet-run-dir-{}", std::process::id()));
        let (home, fhome, run) = (tmp.join("h"), tmp.join("fh"), tmp.join("r"));
        let cases: [(Option<&Path>, Option<&Path>); 4] = [
            (None, None),
            (Some(&fhome), None),
            (None, Some(&run)),
            (Some(&fhome), Some(&run)),
        ];
        for (freshet_home, run_dir) in cases {
            let mut cmd = std::process::Command::new("bash");
            cmd.env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", &home)
                .arg("-c")
                .arg(". \"$1\" && printf %s \"$FRESHET_RUN_DIR\"")
                .arg("lib.sh")
                .arg(&lib);
            if let Some(h) = freshet_home {
                cmd.env("FRESHET_HOME", h);
            }
            if let Some(r) = run_dir {
                cmd.env("FRESHET_RUN_DIR", r);
            }
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{out:?}");
            let scripts = PathBuf::from(String::from_utf8(out.stdout).unwrap());
            let binaries = run_dir_from(
                run_dir.map(Path::as_os_str),
                &freshet_home_from(freshet_home.map(Path::as_os_str), Some(home.as_os_str())),
            );
            assert_eq!(
                scripts, binaries,
                "FRESHET_HOME={freshet_home:?} FRESHET_RUN_DIR={run_dir:?}"
            );
        }
        assert_eq!(
            run_dir_from(None, &freshet_home_from(None, Some(home.as_os_str()))),
            home.join(".freshet").join("run")
        );
    }

    #[test]
    fn home_is_freshet_home_or_dot_freshet() {
        let h = freshet_home();
        match std::env::var_os("FRESHET_HOME") {
            Some(v) if !v.is_empty() => assert_eq!(h, PathBuf::from(v)),
            _ => assert!(h.ends_with(".freshet")),
        }
    }
}
