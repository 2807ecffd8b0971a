//! What the `freshet` command line reads: the pipeline's sections
//! ([`freshet_pipeline::config::Config`]) and `[files]` (`[[files.acl]]`), how `freshet
//! publish` and `freshet watch` read files and which ACL their documents get
//! ([`freshet_publishers::acl`]).

use std::path::Path;

use anyhow::Result;
use freshet_config::Sections;
use freshet_publishers::{FileAcls, FilesConfig};
use serde::Deserialize;

/// Everything the `freshet` binary reads.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// The pipeline's sections (`freshet run`; `publish` and `watch` use `[kafka]`, `[limits]`
    /// and `[pipeline] topic_partitions`).
    pub pipeline: freshet_pipeline::config::Config,
    pub files: FilesConfig,
    /// `[reindex]` (`freshet reindex`).
    pub reindex: crate::reindex::ReindexConfig,
}

/// The `[files]` section of the file (the other sections are the pipeline's).
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Files {
    files: FilesConfig,
    reindex: crate::reindex::ReindexConfig,
}

impl Config {
    /// Reads `path` (if any), applies the process environment, validates.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        Self::load_with_env(path, &env)
    }

    pub fn load_with_env(path: Option<&Path>, env: &[(String, String)]) -> Result<Config> {
        let pipeline = freshet_pipeline::config::Config::load_with_env(path, env)?;
        let sections = Sections::new()
            .with::<FilesConfig>("files")
            .with::<crate::reindex::ReindexConfig>("reindex");
        let Files { files, reindex } = freshet_config::load::<Files>(path, env, &sections)?;
        FileAcls::new(&files.acl, Default::default())?;
        Ok(Config {
            pipeline,
            files,
            reindex,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    use freshet_config::vars as env;

    #[test]
    fn the_documented_file_parses_and_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/freshet.toml");
        let c = Config::load_with_env(Some(&path), &[]).unwrap();
        assert_eq!(c.files, FilesConfig::default());
    }

    /// `[files]` and its `[[files.acl]]` rules, from the file or the environment; a bad rule
    /// stops the process.
    #[test]
    fn file_acl_rules_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.toml");
        std::fs::write(
            &file,
            "[files]\nfollow_symlinks_outside_roots = true\n\
             [[files.acl]]\nglob = \"hr/**\"\nprincipals = [\"group:hr\"]\n\
             [[files.acl]]\nglob = \"**\"\npublic = true\n",
        )
        .unwrap();
        let c = Config::load_with_env(Some(&file), &[]).unwrap();
        assert!(c.files.follow_symlinks_outside_roots);
        assert_eq!(c.files.acl.len(), 2);
        assert_eq!(c.files.acl[0].principals, ["group:hr"]);
        assert!(c.files.acl[1].public);
        let c = Config::load_with_env(
            None,
            &env(&[(
                "FRESHET_FILES_ACL",
                r#"[{glob = "a/**", principals = ["group:a"]}]"#,
            )]),
        )
        .unwrap();
        assert_eq!(c.files.acl[0].glob, "a/**");
        for bad in [
            "[[files.acl]]\nglob = \"a\"\n",
            "[[files.acl]]\nglob = \"a\"\nprincipals = [\"public\"]\n",
            "[[files.acl]]\nglob = \"a\"\nprincipal = [\"g\"]\n",
        ] {
            std::fs::write(&file, bad).unwrap();
            assert!(Config::load_with_env(Some(&file), &[]).is_err(), "{bad}");
        }
    }
}
