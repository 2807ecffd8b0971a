use axum::http::HeaderValue;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;

use super::*;
use crate::config::Config;

const SECRET: &str = "the hs256 secret of the ingest tests";

/// The auth of a service configured by this TOML (and `env` for `_env` secrets).
fn auth_from(toml: &str, env: &[(&str, &str)]) -> Result<IngestAuth> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("freshet.toml");
    std::fs::write(&file, toml)?;
    let c = Config::load_with_env(Some(&file), &[])?;
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    IngestAuth::new(&c.ingest, Metrics::new(), &|n| {
        env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
    })
}

const SETUP: &str = r#"
[ingest]
[[ingest.keys]]
name = "crm"
key_env = "CRM_KEY"
id_prefixes = ["crm/"]
may_grant = ["group:sales", "group:support"]
may_delete = true
[[ingest.keys]]
name = "wiki"
key = "key-wiki"
id_prefixes = ["wiki/", "kb/"]
may_grant = []
may_publish_public = true
[ingest.jwt]
issuer = "https://idp.test"
audience = ["freshet-ingest"]
hs256_secret = "the hs256 secret of the ingest tests"
subject_prefix = "user:"
[[ingest.jwt_rules]]
principal = "group:editors"
id_prefixes = ["docs/"]
may_grant = ["group:eng"]
[[ingest.jwt_rules]]
principal = "user:alice"
id_prefixes = ["users/alice/"]
may_grant = ["user:alice"]
may_delete = true
"#;

fn setup() -> IngestAuth {
    auth_from(SETUP, &[("CRM_KEY", "key-crm")]).unwrap()
}

fn bearer(v: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {v}")).unwrap(),
    );
    h
}

fn token(sub: &str, groups: serde_json::Value) -> String {
    let claims = json!({"iss": "https://idp.test", "aud": "freshet-ingest", "sub": sub,
        "exp": jsonwebtoken::get_current_timestamp() + 600, "groups": groups});
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn acl(p: &[&str]) -> Vec<String> {
    p.iter().map(|s| s.to_string()).collect()
}

/// `Ok` or the 403's message.
fn may(auth: &IngestAuth, cred: &str, w: Write<'_>) -> Result<(), String> {
    let (writer, _permit) = auth.admit(&bearer(cred)).map_err(|e| e.message)?;
    auth.check(&writer, &[(None, w)]).map_err(|e| {
        assert_eq!((e.status, e.code), (StatusCode::FORBIDDEN, "forbidden"));
        e.message
    })
}

#[test]
fn a_key_writes_its_prefixes_with_its_grants_only() {
    let auth = setup();
    assert_eq!(auth.mode(), "keys+jwt");
    let sales = acl(&["group:sales"]);
    let up = |id, acl| Write::Upsert { id, acl };
    assert!(may(&auth, "key-crm", up("crm/1", &sales)).is_ok());
    assert!(may(&auth, "key-crm", Write::Delete { id: "crm/1" }).is_ok());
    // Another namespace: the folder watcher's, another source's, or no namespace at all.
    for id in ["wiki/1", "notes/a.md", "pg.public.t/1", "crm"] {
        let e = may(&auth, "key-crm", up(id, &sales)).unwrap_err();
        assert!(e.contains("\"crm\"") && e.contains(id), "{e}");
    }
    let hr = acl(&["group:sales", "group:hr"]);
    let e = may(&auth, "key-crm", up("crm/1", &hr)).unwrap_err();
    assert!(e.contains("group:hr"), "{e}");
    let e = may(&auth, "key-crm", up("crm/1", &[])).unwrap_err();
    assert!(e.contains("public"), "{e}");
    // A key that may publish public documents but grant nothing, and not delete.
    assert!(may(&auth, "key-wiki", up("kb/1", &[])).is_ok());
    assert!(may(&auth, "key-wiki", up("kb/1", &sales)).is_err());
    let e = may(&auth, "key-wiki", Write::Delete { id: "kb/1" }).unwrap_err();
    assert!(e.contains("may not delete"), "{e}");
}

#[test]
fn a_token_writes_by_the_rules_of_the_principals_it_holds() {
    let auth = setup();
    let eng = acl(&["group:eng"]);
    let editor = token("bob", json!(["editors"]));
    assert!(may(
        &auth,
        &editor,
        Write::Upsert {
            id: "docs/a",
            acl: &eng
        }
    )
    .is_ok());
    assert!(may(&auth, &editor, Write::Delete { id: "docs/a" }).is_err());
    // alice: an editor and her own rule; one rule must allow the whole write.
    let alice = token("alice", json!(["editors"]));
    let own = acl(&["user:alice"]);
    assert!(may(
        &auth,
        &alice,
        Write::Upsert {
            id: "users/alice/n",
            acl: &own
        }
    )
    .is_ok());
    assert!(may(
        &auth,
        &alice,
        Write::Delete {
            id: "users/alice/n"
        }
    )
    .is_ok());
    let e = may(
        &auth,
        &alice,
        Write::Upsert {
            id: "users/alice/n",
            acl: &eng,
        },
    )
    .unwrap_err();
    assert!(e.starts_with("no rule allows it"), "{e}");
    // A token whose principals match no rule writes nothing; one without groups neither.
    for t in [token("carol", json!(["sales"])), token("dave", json!(null))] {
        let e = may(
            &auth,
            &t,
            Write::Upsert {
                id: "docs/a",
                acl: &eng,
            },
        )
        .unwrap_err();
        assert!(e.contains("jwt_rules"), "{e}");
    }
}

#[test]
fn bad_credentials_are_401_and_counted() {
    let auth = setup();
    for h in [
        HeaderMap::new(),
        bearer("key-x"),
        bearer(&token("x", json!([])).replace('.', ".x")),
    ] {
        let e = auth.admit(&h).unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::UNAUTHORIZED, "unauthorized")
        );
    }
    let m = auth.metrics.encode();
    assert!(
        m.contains(r#"auth_rejections_total{key="unknown",reason="unauthorized"} 1"#),
        "{m}"
    );
    assert!(!m.contains("key-x"));
}

#[test]
fn without_keys_or_an_issuer_it_warns_and_serves_loopback_only() {
    let auth = auth_from("[ingest]\n", &[]).unwrap();
    assert_eq!(auth.mode(), "none");
    assert!(
        auth.warnings()[0].contains("no authentication"),
        "{:?}",
        auth.warnings()
    );
    let (w, _) = auth.admit(&HeaderMap::new()).unwrap();
    assert!(w.rights.allows(Write::Delete { id: "anything" }).is_ok());
    let e = auth_from("[ingest]\nlisten = \"0.0.0.0:8090\"\n", &[])
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("allow_unauthenticated"), "{e:#}");
    let open = auth_from(
        "[ingest]\nlisten = \"0.0.0.0:8090\"\nallow_unauthenticated = true\n",
        &[],
    )
    .unwrap();
    let w = open.warnings().join("\n");
    assert!(
        w.contains("no authentication") && w.contains("without TLS"),
        "{w}"
    );
}

#[test]
fn configuration_mistakes_are_refused_at_start() {
    let key = "[ingest]\n[[ingest.keys]]\nname = \"a\"\nkey = \"k\"\n";
    for (toml, expect) in [
        (format!("{key}may_grant = [\"g\"]\n"), "id_prefixes"),
        (format!("{key}id_prefixes = []\nmay_grant = [\"g\"]\n"), "id_prefixes"),
        (format!("{key}id_prefixes = [\"\"]\nmay_grant = [\"g\"]\n"), "\"*\""),
        (format!("{key}id_prefixes = [\"a/\"]\n"), "may write nothing"),
        (format!("{key}id_prefixes = [\"a/\"]\nmay_grant = [\" \"]\n"), "empty principal"),
        (format!("{key}id_prefixes = [\"a/\"]\nmay_delete = true\nallow_unauthenticated = true\n"), "allow_unauthenticated"),
        (format!("{key}id_prefixes = [\"a/\"]\nmay_delete = true\nprefixes = [\"b/\"]\n"), "prefixes"),
        ("[ingest]\n[[ingest.keys]]\nname = \"a\"\nid_prefixes = [\"*\"]\nmay_delete = true\n".into(), "no key"),
        ("[ingest]\napi_keys = [\"k\"]\n".into(), "api_keys"),
        ("[ingest]\n[ingest.jwt]\nissuer = \"i\"\naudience = [\"a\"]\nhs256_secret = \"s\"\n".into(), "jwt_rules"),
        ("[ingest]\n[[ingest.jwt_rules]]\nprincipal = \"group:a\"\nid_prefixes = [\"*\"]\nmay_delete = true\n".into(), "issuer"),
        ("[ingest]\ntls_key_file = \"/k.pem\"\n".into(), "tls_cert_file"),
        (format!("{key}id_prefixes = [\"a/\"]\nmay_delete = true\n[[ingest.keys]]\nname = \"b\"\nkey = \"k\"\nid_prefixes = [\"b/\"]\nmay_delete = true\n"), "twice"),
    ] {
        let e = match auth_from(&toml, &[]) {
            Ok(_) => panic!("accepted: {toml}"),
            Err(e) => format!("{e:#}"),
        };
        assert!(e.contains(expect), "{toml}: {e}");
    }
}

#[test]
fn keys_are_never_printed() {
    let c = Config::load_with_env(
        None,
        &[(
            "FRESHET_INGEST_KEYS".to_string(),
            r#"[{name = "crm", key = "crm-s3cret", id_prefixes = ["crm/"], may_delete = true}]"#
                .to_string(),
        )],
    )
    .unwrap();
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("crm-s3cret") && shown.contains("redacted"),
        "{shown}"
    );
    let auth = IngestAuth::new(&c.ingest, Metrics::new(), &|_| None).unwrap();
    let (w, _) = auth.admit(&bearer("crm-s3cret")).unwrap();
    assert_eq!(w.name, "crm");
    assert!(!format!("{w:?}").contains("crm-s3cret"));
}
