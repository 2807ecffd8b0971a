//! Who may see a document, as a record states it, and the rules that keep a missing or misspelt
//! ACL from making a document public.
//!
//! - `"acl": ["group:hr", …]`: the principals that may see the document ([`Acl::Principals`]).
//! - `"acl": "public"`: visible to everyone, stated ([`Acl::Public`]). The one string value
//!   `acl` takes; a principal is always an array element, so no group name can collide with it.
//! - `acl` absent, null or `[]`: no ACL stated ([`Acl::Unstated`]): public, unless `[limits]
//!   require_acl` is on, when the record is `missing_acl`.
//!
//! Both public forms are stored the same way (an empty ACL, the stored form of a public
//! document), so an index reads the same whichever form wrote it.
//!
//! **Reserved principals.** `public`, `everyone` and `*` (any case, surrounding spaces ignored)
//! are not principals: an array holding one is `invalid_field`, since its writer meant a public
//! document and would get one visible to nobody (or, had it been read as public, a restricted
//! list made public by one entry).
//!
//! **Near-miss keys.** A top-level or `metadata` key other than `acl` itself (top level) that
//! reads as an ACL ([`is_acl_like`]: `ACL`, `acls`, `Access-Control`, `permissions`,
//! `principals`, `_acl`, …) is `invalid_field`: kept as metadata, it would leave the document
//! public while its writer meant to restrict it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{wrong_type, DecodeError};
use crate::limits::RecordLimits;

/// The value of `acl` that states a public document.
pub const PUBLIC: &str = "public";

/// Strings that are never principals (compared trimmed and lowercased).
pub const RESERVED_PRINCIPALS: [&str; 3] = [PUBLIC, "everyone", "*"];

/// Names that mean an ACL, in their normal form ([`normal_form`]).
const ACL_NAMES: [&str; 5] = [
    "acl",
    "accesscontrol",
    "accesscontrollist",
    "permission",
    "principal",
];

/// A document's ACL as a record states it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Acl {
    /// No ACL: `acl` absent, null or an empty array.
    #[default]
    Unstated,
    /// `"acl": "public"`.
    Public,
    /// The principals, sorted and each once (never empty).
    Principals(Vec<String>),
}

impl Acl {
    /// `principals` as an ACL: sorted, each once; none is [`Acl::Unstated`]. `Err` with the
    /// reason for an empty or reserved principal.
    pub fn principals<I, S>(principals: I) -> Result<Acl, String>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut acl: Vec<String> = Vec::new();
        for p in principals {
            let p = p.into();
            check_principal(&p)?;
            acl.push(p);
        }
        acl.sort();
        acl.dedup();
        Ok(if acl.is_empty() {
            Acl::Unstated
        } else {
            Acl::Principals(acl)
        })
    }

    /// The ACL a document stores (empty: public), or `missing_acl` when none is stated and
    /// `limits.require_acl` is on.
    pub fn resolve(self, limits: &RecordLimits) -> Result<Vec<String>, DecodeError> {
        match self {
            Acl::Unstated if limits.require_acl => Err(DecodeError::MissingAcl {
                reason: "the document states no ACL and [limits] require_acl is on: give its \
                         principals in `acl`, or \"acl\": \"public\" for a document everyone \
                         may see"
                    .into(),
            }),
            Acl::Unstated | Acl::Public => Ok(Vec::new()),
            Acl::Principals(p) => Ok(p),
        }
    }

    /// The value of `acl` in a record that states this ACL (`None`: no `acl` field).
    pub fn to_json(&self) -> Option<Value> {
        match self {
            Acl::Unstated => None,
            Acl::Public => Some(Value::from(PUBLIC)),
            Acl::Principals(p) => Some(Value::from(p.clone())),
        }
    }
}

/// `Err` with the reason when `p` cannot be a principal: empty, or reserved.
pub fn check_principal(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("empty principal".into());
    }
    let folded = p.trim().to_lowercase();
    if RESERVED_PRINCIPALS.contains(&folded.as_str()) {
        return Err(format!(
            "{p:?} is reserved, not a principal: a public document says so with \
             \"acl\": \"public\" (a Debezium source: null_acl = \"public\"), a restricted one \
             lists its principals"
        ));
    }
    Ok(())
}

/// `acl` as a record gives it (see the module docs).
pub fn acl_field(value: Option<Value>) -> Result<Acl, DecodeError> {
    match value {
        None | Some(Value::Null) => Ok(Acl::Unstated),
        Some(Value::String(s)) if s == PUBLIC => Ok(Acl::Public),
        Some(Value::Array(items)) => {
            let mut acl = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                match item {
                    Value::String(s) => {
                        check_principal(&s).map_err(|reason| DecodeError::InvalidField {
                            field: format!("acl[{i}]"),
                            reason,
                        })?;
                        acl.push(s);
                    }
                    other => return Err(wrong_type(&format!("acl[{i}]"), "a string", &other)),
                }
            }
            acl.sort();
            acl.dedup();
            Ok(if acl.is_empty() {
                Acl::Unstated
            } else {
                Acl::Principals(acl)
            })
        }
        Some(other) => Err(wrong_type(
            "acl",
            "an array of principals, or \"public\"",
            &other,
        )),
    }
}

/// A key's normal form: lowercase, without `_`, `-`, `.` and whitespace, one trailing `s` off.
fn normal_form(key: &str) -> String {
    let mut k: String = key
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | '.') && !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect();
    if k.len() > 1 && k.ends_with('s') {
        k.pop();
    }
    k
}

/// Whether `key` names an ACL ([`ACL_NAMES`] in [`normal_form`]): `acl` itself included.
pub fn is_acl_like(key: &str) -> bool {
    ACL_NAMES.contains(&normal_form(key).as_str())
}

/// `invalid_field` for the first ACL-like key among `top` (the envelope's fields freshet does
/// not read) and `metadata`'s keys.
pub(crate) fn check_near_misses<'a>(
    top: impl IntoIterator<Item = &'a String>,
    metadata: impl IntoIterator<Item = &'a String>,
) -> Result<(), DecodeError> {
    if let Some(k) = top.into_iter().find(|k| is_acl_like(k)) {
        return Err(DecodeError::InvalidField {
            field: k.clone(),
            reason: "reads as an ACL, but the ACL is the field `acl` (an array of principals, \
                     or \"public\"); kept as metadata it would leave the document public"
                .into(),
        });
    }
    if let Some(k) = metadata.into_iter().find(|k| is_acl_like(k)) {
        return Err(DecodeError::InvalidField {
            field: format!("metadata.{k}"),
            reason: "reads as an ACL, but metadata restricts nobody: give the principals as the \
                     top-level `acl`, or name the metadata otherwise"
                .into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_like_keys() {
        for k in [
            "acl",
            "ACL",
            "Acl",
            "acls",
            "ACLs",
            "_acl",
            "a-c-l",
            "access_control",
            "Access-Control",
            "accessControlList",
            "access_control_lists",
            "permissions",
            "Permission",
            "principals",
        ] {
            assert!(is_acl_like(k), "{k}");
        }
        for k in [
            "lang", "class", "access", "aclx", "acl2", "groups", "s", "", "tags", "clause",
        ] {
            assert!(!is_acl_like(k), "{k}");
        }
    }

    #[test]
    fn reserved_principals_are_refused_in_any_case() {
        for p in ["public", "PUBLIC", " Public ", "everyone", "Everyone", "*"] {
            assert!(check_principal(p).is_err(), "{p}");
        }
        for p in ["group:public", "user:everyone", "public-relations", "**x"] {
            assert_eq!(check_principal(p), Ok(()), "{p}");
        }
        assert_eq!(check_principal(""), Err("empty principal".into()));
    }

    #[test]
    fn principals_make_an_acl() {
        assert_eq!(Acl::principals(Vec::<String>::new()), Ok(Acl::Unstated));
        assert_eq!(
            Acl::principals(["b", "a", "b"]),
            Ok(Acl::Principals(vec!["a".into(), "b".into()]))
        );
        assert!(Acl::principals(["a", "*"]).is_err());
    }

    #[test]
    fn resolve_under_require_acl() {
        let mut l = RecordLimits::default();
        assert_eq!(Acl::Unstated.resolve(&l), Ok(vec![]));
        l.require_acl = true;
        let e = Acl::Unstated.resolve(&l).unwrap_err();
        assert_eq!(e.class(), "missing_acl");
        assert!(e.to_string().contains("require_acl"), "{e}");
        assert_eq!(Acl::Public.resolve(&l), Ok(vec![]));
        assert_eq!(
            Acl::Principals(vec!["g".into()]).resolve(&l),
            Ok(vec!["g".into()])
        );
    }

    use crate::document::Change;
    use crate::envelope::{decode, encode, encode_stating};

    fn dec(key: Option<&str>, value: Option<&str>) -> Result<Change, DecodeError> {
        decode(
            key.map(str::as_bytes),
            value.map(str::as_bytes),
            &RecordLimits::default(),
        )
    }

    fn upsert(key: Option<&str>, value: &str) -> crate::document::Document {
        match dec(key, Some(value)) {
            Ok(Change::Upsert(d)) => d,
            other => panic!("expected an upsert, got {other:?}"),
        }
    }

    fn class(r: Result<Change, DecodeError>) -> &'static str {
        r.expect_err("expected an error").class()
    }

    fn strict() -> RecordLimits {
        RecordLimits {
            require_acl: true,
            ..RecordLimits::default()
        }
    }

    /// A key that reads as an ACL is refused, at the top level and in `metadata`, instead of
    /// being kept as metadata while the document goes public; the message names the right field.
    #[test]
    fn misspelt_acl_keys_are_invalid_fields() {
        for key in [
            "ACL",
            "Acl",
            "acls",
            "ACLs",
            "access_control",
            "accessControlList",
            "permissions",
            "principals",
            "_acl",
        ] {
            let v = serde_json::json!({"id": "a", "text": "t", key: ["group:hr"]}).to_string();
            let e = dec(None, Some(&v)).unwrap_err();
            assert_eq!(e.class(), "invalid_field", "{key}");
            let msg = e.to_string();
            assert!(msg.contains(&format!("`{key}`")), "{msg}");
            assert!(msg.contains("`acl`"), "{msg}");
            // beside a real acl too: the writer meant something by it
            let v =
                serde_json::json!({"id": "a", "acl": ["group:x"], key: ["group:hr"]}).to_string();
            assert_eq!(class(dec(None, Some(&v))), "invalid_field", "{key}");
            // inside metadata
            let v = serde_json::json!({"id": "a", "metadata": {key: ["group:hr"]}}).to_string();
            let e = dec(None, Some(&v)).unwrap_err();
            assert_eq!(e.class(), "invalid_field", "{key}");
            assert!(e.to_string().contains(&format!("metadata.{key}")), "{e}");
        }
        let v = r#"{"id":"a","metadata":{"acl":["group:hr"]}}"#;
        assert_eq!(class(dec(None, Some(v))), "invalid_field");
        // other unknown fields are still kept
        let d = upsert(
            None,
            r#"{"id":"a","access":"x","groups":["g"],"acl":["group:x"]}"#,
        );
        assert_eq!(d.metadata["access"], "\"x\"");
        assert_eq!(d.metadata["groups"], "[\"g\"]");
        // a delete ignores every field but op and id
        assert!(dec(None, Some(r#"{"op":"delete","id":"a","ACL":1}"#)).is_ok());
    }

    /// `"acl": "public"` states a public document, stored as the empty ACL a public document
    /// always had; reserved words are never principals; other strings stay wrong.
    #[test]
    fn public_is_stated_and_reserved() {
        let d = upsert(None, r#"{"id":"a","acl":"public"}"#);
        assert!(d.acl.is_empty());
        assert_eq!(d, upsert(None, r#"{"id":"a","acl":[]}"#));
        for v in [
            r#"{"id":"a","acl":"Public"}"#,
            r#"{"id":"a","acl":"group:x"}"#,
            r#"{"id":"a","acl":["public"]}"#,
            r#"{"id":"a","acl":["group:x","*"]}"#,
            r#"{"id":"a","acl":["Everyone"]}"#,
            r#"{"id":"a","acl":[" PUBLIC "]}"#,
        ] {
            let e = dec(None, Some(v)).unwrap_err();
            assert_eq!(e.class(), "invalid_field", "{v}");
            assert!(e.to_string().contains("public"), "{v}: {e}");
        }
        assert_eq!(
            upsert(None, r#"{"id":"a","acl":["group:public"]}"#).acl,
            ["group:public"]
        );
    }

    /// With `require_acl`, an upsert that states no ACL is `missing_acl`; stated ones pass, and
    /// deletes need none.
    #[test]
    fn require_acl_refuses_unstated_acls() {
        let l = strict();
        let d = |v: &str| decode(Some(b"a"), Some(v.as_bytes()), &l);
        for v in [
            r#"{"text":"t"}"#,
            r#"{"text":"t","acl":null}"#,
            r#"{"text":"t","acl":[]}"#,
        ] {
            let e = d(v).unwrap_err();
            assert_eq!(e.class(), "missing_acl", "{v}");
            assert!(e.to_string().contains("\"acl\": \"public\""), "{e}");
        }
        let Ok(Change::Upsert(p)) = d(r#"{"text":"t","acl":"public"}"#) else {
            panic!("a public upsert")
        };
        assert!(p.acl.is_empty());
        let Ok(Change::Upsert(r)) = d(r#"{"text":"t","acl":["group:hr"]}"#) else {
            panic!("a restricted upsert")
        };
        assert_eq!(r.acl, ["group:hr"]);
        assert_eq!(
            d(r#"{"op":"delete"}"#),
            Ok(Change::Delete { id: "a".into() })
        );
        assert_eq!(
            decode(Some(b"a"), None, &l),
            Ok(Change::Delete { id: "a".into() })
        );
        // without require_acl the unstated ACL is public, as it always was
        assert!(upsert(Some("a"), r#"{"text":"t"}"#).acl.is_empty());
    }

    /// `encode_stating` writes an empty ACL as `"public"`, which `require_acl` accepts; `encode`
    /// writes `[]`, which it refuses.
    #[test]
    fn encode_states_public_when_asked() {
        let doc = upsert(Some("a"), r#"{"text":"t"}"#);
        let change = Change::Upsert(doc.clone());
        let stated = encode_stating(&change, true);
        let json: Value = serde_json::from_slice(&stated).unwrap();
        assert_eq!(json["acl"], "public");
        assert_eq!(
            decode(Some(b"a"), Some(&stated), &strict()),
            Ok(change.clone())
        );
        let plain = encode(&change);
        assert_eq!(
            decode(Some(b"a"), Some(&plain), &strict())
                .unwrap_err()
                .class(),
            "missing_acl"
        );
        // principals are written as they are either way
        let mut restricted = doc;
        restricted.acl = vec!["group:hr".into()];
        let r = Change::Upsert(restricted);
        assert_eq!(encode_stating(&r, true), encode(&r));
    }
}
