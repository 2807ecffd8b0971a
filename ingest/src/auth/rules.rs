//! What a writer may do: write ids under its prefixes, give documents ACLs made of principals
//! it may grant (or make them public, an empty decoded ACL, when it may publish public
//! documents), and delete. A key has one rule; a token has the rules of the principals it holds, and a write
//! is allowed when one of them allows all of it (rules are not mixed: a prefix of one rule and
//! the grants of another do not add up).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::settings::Grants;

/// Every id, or ids starting with one of these.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ids {
    All,
    Prefixes(Vec<String>),
}

/// Every principal, or these.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Principals {
    All,
    These(BTreeSet<String>),
}

/// One rule: what one key, or the tokens holding one principal, may write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRule {
    /// Who the rule belongs to, in errors (`key "crm"`, `rule for "group:crm"`).
    pub owner: String,
    ids: Ids,
    grants: Principals,
    may_publish_public: bool,
    may_delete: bool,
}

/// One write to check: an upsert with its (decoded) ACL, or a delete.
#[derive(Clone, Copy, Debug)]
pub enum Write<'a> {
    Upsert { id: &'a str, acl: &'a [String] },
    Delete { id: &'a str },
}

impl WriteRule {
    /// `*` in `id_prefixes` is every id; `*` in `may_grant` every principal.
    pub fn new(owner: String, g: &Grants<'_>) -> WriteRule {
        let ids = if g.id_prefixes.iter().any(|p| p == "*") {
            Ids::All
        } else {
            Ids::Prefixes(g.id_prefixes.to_vec())
        };
        let grants = if g.may_grant.iter().any(|p| p == "*") {
            Principals::All
        } else {
            Principals::These(g.may_grant.iter().cloned().collect())
        };
        WriteRule {
            owner,
            ids,
            grants,
            may_publish_public: g.may_publish_public,
            may_delete: g.may_delete,
        }
    }

    /// `Ok` when this rule allows `w`, else what it does not allow.
    pub fn allows(&self, w: Write<'_>) -> Result<(), String> {
        let id = match w {
            Write::Upsert { id, .. } | Write::Delete { id } => id,
        };
        if let Ids::Prefixes(prefixes) = &self.ids {
            if !prefixes.iter().any(|p| id.starts_with(p.as_str())) {
                return Err(format!(
                    "{} may not write the id {id:?} (its id_prefixes: {prefixes:?})",
                    self.owner
                ));
            }
        }
        match w {
            Write::Delete { .. } if !self.may_delete => Err(format!(
                "{} may not delete (may_delete = false)",
                self.owner
            )),
            Write::Delete { .. } => Ok(()),
            Write::Upsert { acl: [], .. } => {
                if self.may_publish_public {
                    Ok(())
                } else {
                    Err(format!(
                        "{} may not publish a public document (\"acl\": \"public\" or none \
                         stated; may_publish_public = false): give the document an acl of \
                         principals it may grant",
                        self.owner
                    ))
                }
            }
            Write::Upsert { acl, .. } => match &self.grants {
                Principals::All => Ok(()),
                Principals::These(held) => {
                    let extra: Vec<&str> = acl
                        .iter()
                        .filter(|p| !held.contains(*p))
                        .map(String::as_str)
                        .collect();
                    if extra.is_empty() {
                        Ok(())
                    } else {
                        Err(format!(
                            "{} may not grant {extra:?} in an acl (its may_grant: {:?})",
                            self.owner,
                            held.iter().collect::<Vec<_>>()
                        ))
                    }
                }
            },
        }
    }
}

/// What an admitted writer may do.
#[derive(Clone, Debug)]
pub enum Rights {
    /// No authentication is configured: everything.
    Everything,
    /// A key's rule, or a token's rules (none: it may write nothing).
    Rules(Vec<Arc<WriteRule>>),
}

impl Rights {
    /// `Ok` when one rule allows all of `w`, else why not (every rule's reason).
    pub fn allows(&self, w: Write<'_>) -> Result<(), String> {
        let rules = match self {
            Rights::Everything => return Ok(()),
            Rights::Rules(r) => r,
        };
        let mut why = Vec::new();
        for r in rules {
            match r.allows(w) {
                Ok(()) => return Ok(()),
                Err(e) => why.push(e),
            }
        }
        Err(match why.len() {
            0 => "the token matches no [[ingest.jwt_rules]] principal: it may write nothing"
                .to_string(),
            1 => why.remove(0),
            _ => format!("no rule allows it: {}", why.join("; ")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(prefixes: &[&str], grant: &[&str], public: bool, delete: bool) -> WriteRule {
        let p: Vec<String> = prefixes.iter().map(|s| s.to_string()).collect();
        let g: Vec<String> = grant.iter().map(|s| s.to_string()).collect();
        WriteRule::new(
            "key \"k\"".into(),
            &Grants {
                id_prefixes: &p,
                may_grant: &g,
                may_publish_public: public,
                may_delete: delete,
            },
        )
    }

    fn up<'a>(id: &'a str, acl: &'a [String]) -> Write<'a> {
        Write::Upsert { id, acl }
    }

    fn acl(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_rule_allows_its_prefixes_grants_and_nothing_else() {
        let r = rule(&["crm/"], &["group:sales", "group:support"], false, false);
        assert!(r.allows(up("crm/1", &acl(&["group:sales"]))).is_ok());
        assert!(r
            .allows(up("crm/1", &acl(&["group:sales", "group:support"])))
            .is_ok());
        let e = r.allows(up("wiki/1", &acl(&["group:sales"]))).unwrap_err();
        assert!(e.contains("\"wiki/1\"") && e.contains("crm/"), "{e}");
        assert!(r.allows(up("crm", &acl(&["group:sales"]))).is_err());
        let e = r
            .allows(up("crm/1", &acl(&["group:sales", "group:eng"])))
            .unwrap_err();
        assert!(
            e.contains("group:eng") && !e.contains("\"group:sales\"]"),
            "{e}"
        );
        let e = r.allows(up("crm/1", &[])).unwrap_err();
        assert!(e.contains("public"), "{e}");
        let e = r.allows(Write::Delete { id: "crm/1" }).unwrap_err();
        assert!(e.contains("may not delete"), "{e}");
    }

    #[test]
    fn stars_mean_every_id_and_every_principal() {
        let r = rule(&["*"], &["*"], true, true);
        for w in [
            up("anything", &acl(&["group:x"])),
            up("", &[]),
            Write::Delete { id: "x" },
        ] {
            assert!(r.allows(w).is_ok(), "{w:?}");
        }
        // A literal "*" is not a prefix of every id when other prefixes are given alone.
        let r = rule(&["a*"], &["group:a"], false, false);
        assert!(r.allows(up("ab", &acl(&["group:a"]))).is_err());
    }

    #[test]
    fn one_rule_must_allow_all_of_a_write() {
        let sales = Arc::new(rule(&["crm/"], &["group:sales"], false, false));
        let eng = Arc::new(rule(&["wiki/"], &["group:eng"], true, true));
        let both = Rights::Rules(vec![sales, eng]);
        assert!(both.allows(up("crm/1", &acl(&["group:sales"]))).is_ok());
        assert!(both.allows(up("wiki/1", &[])).is_ok());
        assert!(both.allows(Write::Delete { id: "wiki/1" }).is_ok());
        // crm/ from one rule, group:eng from the other: refused.
        let e = both.allows(up("crm/1", &acl(&["group:eng"]))).unwrap_err();
        assert!(e.starts_with("no rule allows it"), "{e}");
        let none = Rights::Rules(vec![]);
        assert!(none.allows(up("x", &[])).unwrap_err().contains("jwt_rules"));
        assert!(Rights::Everything.allows(Write::Delete { id: "x" }).is_ok());
    }
}
