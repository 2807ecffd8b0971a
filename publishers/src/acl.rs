//! Which ACL the documents of `freshet publish` and `freshet watch` get, and the `[files]`
//! settings both commands read.
//!
//! An ACL comes from rules of globs over the document id (a file's path relative to its
//! directory, prefixed by the directory's name when several are watched; a JSONL line's id),
//! tried in order: **the first rule whose glob matches gives the document its ACL**, so a
//! narrow rule goes before a broad one (`hr/**` before `**`). A document no rule matches gets
//! the default (`--acl` principals, or `--public`), and without one states no ACL: public,
//! unless the pipeline's `[limits] require_acl` refuses it.

use globset::{Glob, GlobMatcher};
use serde::{Deserialize, Serialize};

use freshet_operators::envelope::Acl;

use crate::{Error, Result};

/// The `[files]` section: how `freshet publish --dir` and `freshet watch` read files and which
/// ACL their documents get.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilesConfig {
    /// Follow a symlink whose target resolves outside the directories given (default off: such
    /// a link is not a document, and the file it points to is never read).
    pub follow_symlinks_outside_roots: bool,
    /// ACL rules by glob, first match wins (`[[files.acl]]`).
    pub acl: Vec<AclRuleConfig>,
}

/// One `[[files.acl]]` rule: a glob and either principals or `public = true`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AclRuleConfig {
    /// A glob over the document id (`hr/**`, `**/*.pdf`).
    pub glob: String,
    /// The principals that may see the documents it matches.
    pub principals: Vec<String>,
    /// The documents it matches are public, said so.
    pub public: bool,
}

impl AclRuleConfig {
    /// The rule's ACL, checked: exactly one of `principals` and `public`.
    fn acl(&self) -> Result<Acl> {
        let bad = |why: String| Error::Config(format!("[[files.acl]] glob {:?}: {why}", self.glob));
        match (self.public, self.principals.is_empty()) {
            (true, true) => Ok(Acl::Public),
            (true, false) => Err(bad("give principals or public = true, not both".into())),
            (false, true) => Err(bad("give principals, or public = true".into())),
            (false, false) => Acl::principals(self.principals.iter().cloned()).map_err(bad),
        }
    }
}

/// The ACL rules and the default, compiled.
#[derive(Clone, Debug, Default)]
pub struct FileAcls {
    rules: Vec<(GlobMatcher, Acl)>,
    default: Acl,
}

impl PartialEq for FileAcls {
    fn eq(&self, other: &Self) -> bool {
        let globs = |a: &FileAcls| -> Vec<(String, Acl)> {
            a.rules
                .iter()
                .map(|(g, acl)| (g.glob().glob().to_string(), acl.clone()))
                .collect()
        };
        self.default == other.default && globs(self) == globs(other)
    }
}

impl Eq for FileAcls {}

impl FileAcls {
    /// Every document gets `default`.
    pub fn all(default: Acl) -> FileAcls {
        FileAcls {
            rules: Vec::new(),
            default,
        }
    }

    /// `rules` (first match wins), then `default`. `Err` for a glob that does not parse or a
    /// rule without a valid ACL.
    pub fn new(rules: &[AclRuleConfig], default: Acl) -> Result<FileAcls> {
        let mut compiled = Vec::with_capacity(rules.len());
        for r in rules {
            let glob = Glob::new(&r.glob)
                .map_err(|e| Error::Config(format!("[[files.acl]] glob {:?}: {e}", r.glob)))?;
            compiled.push((glob.compile_matcher(), r.acl()?));
        }
        Ok(FileAcls {
            rules: compiled,
            default,
        })
    }

    /// The default from the command line: `--acl` principals, or `--public` (not both).
    pub fn default_from_flags(principals: &[String], public: bool) -> Result<Acl> {
        match (public, principals.is_empty()) {
            (true, false) => Err(Error::Config("give --acl or --public, not both".into())),
            (true, true) => Ok(Acl::Public),
            (false, _) => Acl::principals(principals.iter().cloned())
                .map_err(|e| Error::Config(format!("--acl: {e}"))),
        }
    }

    /// The ACL of the document `id`.
    pub fn for_id(&self, id: &str) -> &Acl {
        self.rules
            .iter()
            .find(|(g, _)| g.is_match(id))
            .map_or(&self.default, |(_, acl)| acl)
    }

    /// Whether some document could get no ACL (the default states none).
    pub fn may_leave_unstated(&self) -> bool {
        self.default == Acl::Unstated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(glob: &str, principals: &[&str], public: bool) -> AclRuleConfig {
        AclRuleConfig {
            glob: glob.into(),
            principals: principals.iter().map(|p| p.to_string()).collect(),
            public,
        }
    }

    fn p(list: &[&str]) -> Acl {
        Acl::principals(list.iter().copied()).unwrap()
    }

    #[test]
    fn first_matching_rule_wins_then_the_default() {
        let acls = FileAcls::new(
            &[
                rule("hr/payroll/**", &["group:payroll"], false),
                rule("hr/**", &["group:hr", "group:hr"], false),
                rule("handbook/**", &[], true),
            ],
            p(&["group:staff"]),
        )
        .unwrap();
        assert_eq!(acls.for_id("hr/payroll/2026.md"), &p(&["group:payroll"]));
        assert_eq!(acls.for_id("hr/leave.md"), &p(&["group:hr"]));
        assert_eq!(acls.for_id("handbook/a/b.md"), &Acl::Public);
        assert_eq!(acls.for_id("notes/x.md"), &p(&["group:staff"]));
        assert_eq!(acls.for_id("hr.md"), &p(&["group:staff"]));
        assert!(!acls.may_leave_unstated());
        let none = FileAcls::new(&[rule("**", &["g"], false)], Acl::Unstated).unwrap();
        assert!(none.may_leave_unstated());
        assert_eq!(FileAcls::default().for_id("a"), &Acl::Unstated);
    }

    #[test]
    fn bad_rules_and_flags_are_config_errors() {
        for (r, needle) in [
            (rule("a/**", &[], false), "principals"),
            (rule("a/**", &["g"], true), "not both"),
            (rule("a/**", &["public"], false), "reserved"),
            (rule("a/**", &[""], false), "empty"),
            (rule("a/[", &["g"], false), "a/["),
        ] {
            let e = FileAcls::new(&[r], Acl::Unstated).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
        assert_eq!(
            FileAcls::default_from_flags(&[], false).unwrap(),
            Acl::Unstated
        );
        assert_eq!(
            FileAcls::default_from_flags(&[], true).unwrap(),
            Acl::Public
        );
        assert!(FileAcls::default_from_flags(&["g".into()], true).is_err());
        assert!(FileAcls::default_from_flags(&["*".into()], false).is_err());
    }
}
