use axum::http::HeaderValue;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;

use super::*;
use crate::config::Config;

const SECRET: &str = "the hs256 secret of these tests";

/// A node configured by this TOML `[query]` section (and `env` for `_env` secrets).
fn auth_from(toml: &str, env: &[(&str, &str)]) -> Result<Auth> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("freshet.toml");
    std::fs::write(&file, toml)?;
    let c = Config::load_with_env(Some(&file), &[])?;
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Auth::new(&c.query, Metrics::new(), &|n| {
        env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
    })
}

const KEYS: &str = r#"
[query]
api_keys = ["legacy-key"]
[[query.keys]]
name = "team-a"
key = "key-a"
principals = ["group:a"]
[[query.keys]]
name = "team-ab"
key_env = "KEY_AB"
principals = ["group:a", "group:b"]
rate_per_second = 1.0
burst = 2
[[query.keys]]
name = "one-at-a-time"
key = "key-c"
principals = ["group:c"]
max_concurrent = 1
[query.jwt]
issuer = "https://idp.test"
audience = ["freshet"]
hs256_secret = "the hs256 secret of these tests"
"#;

fn node() -> Auth {
    auth_from(KEYS, &[("KEY_AB", "key-ab")]).unwrap()
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn bearer(v: &str) -> HeaderMap {
    headers(&[("authorization", &format!("Bearer {v}"))])
}

fn held(a: &Admission) -> Vec<String> {
    a.principals(None).unwrap()
}

fn token(groups: Value) -> String {
    let claims = json!({"iss": "https://idp.test", "aud": "freshet", "sub": "alice",
                        "exp": jsonwebtoken::get_current_timestamp() + 600, "groups": groups});
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

use serde_json::Value;

#[test]
fn each_credential_holds_its_principals() {
    let auth = node();
    assert_eq!(auth.mode(), "keys+jwt");
    let a = auth.admit(&bearer("key-a")).unwrap();
    assert_eq!(
        (a.name.as_str(), held(&a)),
        ("team-a", vec!["group:a".into()])
    );
    let a = auth.admit(&headers(&[("x-api-key", "key-ab")])).unwrap();
    assert_eq!(held(&a), ["group:a", "group:b"]);
    // A bare key holds nothing: public documents only, and the node says so.
    let a = auth.admit(&bearer("legacy-key")).unwrap();
    assert_eq!(a.name, "api_keys[0]");
    assert!(held(&a).is_empty());
    assert!(auth.warnings().iter().any(|w| w.contains("query.api_keys")));
    let a = auth.admit(&bearer(&token(json!(["a"])))).unwrap();
    assert_eq!((a.name.as_str(), held(&a)), ("jwt", vec!["group:a".into()]));
}

#[test]
fn a_request_may_narrow_but_never_widen() {
    let auth = node();
    let a = auth.admit(&bearer("key-ab")).unwrap();
    let p = |r: &[&str]| a.principals(Some(r.iter().map(|s| s.to_string()).collect()));
    assert_eq!(p(&["group:b"]).unwrap(), ["group:b"]);
    assert!(p(&[]).unwrap().is_empty(), "an empty list: public only");
    let a_only = auth.admit(&bearer("key-a")).unwrap();
    for wider in [&["group:b"][..], &["group:a", "group:b"], &["group:A"]] {
        let e = a_only
            .principals(Some(wider.iter().map(|s| s.to_string()).collect()))
            .unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::FORBIDDEN, "forbidden"),
            "{wider:?}"
        );
        assert!(e.message.contains("team-a"), "{}", e.message);
    }
    let jwt = auth.admit(&bearer(&token(json!(["a"])))).unwrap();
    assert!(jwt.principals(Some(vec!["group:b".into()])).is_err());
    assert!(
        jwt.principals(Some(vec!["a".into()])).is_err(),
        "the prefix counts"
    );
}

#[test]
fn wrong_or_missing_credentials_are_401() {
    let auth = node();
    let refused = |h: HeaderMap| {
        let e = auth.admit(&h).unwrap_err();
        assert_eq!(e.status, StatusCode::UNAUTHORIZED, "{}", e.message);
        e.message
    };
    assert!(refused(HeaderMap::new()).contains("missing credential"));
    assert!(refused(bearer("key-x")).contains("invalid API key"));
    assert!(refused(headers(&[("authorization", "Basic a2V5LWE=")])).contains("Bearer"));
    assert!(refused(headers(&[
        ("authorization", "Bearer key-a"),
        ("x-api-key", "key-a")
    ]))
    .contains("not both"));
    let expired = json!({"iss": "https://idp.test", "aud": "freshet", "sub": "alice",
                         "exp": 1_000_000, "groups": ["a"]});
    let t = encode(
        &Header::new(Algorithm::HS256),
        &expired,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    assert!(refused(bearer(&t)).contains("Expired"));
    let forged = encode(
        &Header::new(Algorithm::HS256),
        &json!({}),
        &EncodingKey::from_secret(b"guess"),
    )
    .unwrap();
    assert!(refused(bearer(&forged)).contains("invalid token"));
    let metrics = auth.metrics.encode();
    assert!(
        metrics.contains(r#"auth_rejections_total{key="jwt",reason="unauthorized"} 2"#),
        "{metrics}"
    );
    assert!(!metrics.contains("key-x"), "secrets never label metrics");
}

#[test]
fn limits_answer_429_with_retry_after() {
    let auth = node();
    // team-ab: 1/s, burst 2.
    assert!(auth.admit(&bearer("key-ab")).is_ok());
    assert!(auth.admit(&bearer("key-ab")).is_ok());
    let e = auth.admit(&bearer("key-ab")).unwrap_err();
    assert_eq!(
        (e.status, e.code),
        (StatusCode::TOO_MANY_REQUESTS, "too_many_requests")
    );
    assert_eq!(e.retry_after, Some(1));
    // Another key is not affected.
    assert!(auth.admit(&bearer("key-a")).is_ok());
    // one-at-a-time: a second request while the first is in flight.
    let first = auth.admit(&bearer("key-c")).unwrap();
    let e = auth.admit(&bearer("key-c")).unwrap_err();
    assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
    drop(first);
    assert!(auth.admit(&bearer("key-c")).is_ok());
    let m = auth.metrics.encode();
    assert!(
        m.contains(r#"key="team-ab",reason="rate_limited"} 1"#),
        "{m}"
    );
    assert!(
        m.contains(r#"key="one-at-a-time",reason="concurrency_limited"} 1"#),
        "{m}"
    );
}

#[test]
fn an_unauthenticated_node_serves_public_documents_unless_told_to_trust() {
    let auth = auth_from("[query]\n", &[]).unwrap();
    assert_eq!(auth.mode(), "none");
    assert!(auth.warnings()[0].contains("no authentication"));
    // Any credential or none: anonymous, public only; naming a principal is a 403.
    let a = auth.admit(&HeaderMap::new()).unwrap();
    assert!(held(&a).is_empty());
    let e = a.principals(Some(vec!["group:a".into()])).unwrap_err();
    assert_eq!(e.status, StatusCode::FORBIDDEN);
    assert!(e.message.contains("no authentication"), "{}", e.message);

    let auth = auth_from("[query]\ntrust_request_principals = true\n", &[]).unwrap();
    assert_eq!(auth.mode(), "trusted_proxy");
    let a = auth.admit(&HeaderMap::new()).unwrap();
    assert_eq!(
        a.principals(Some(vec!["group:a".into()])).unwrap(),
        ["group:a"]
    );
    assert!(held(&a).is_empty(), "no principals named: public only");
    // The default limits apply to all anonymous callers together.
    let auth = auth_from("[query]\nrate_per_second = 2.0\n", &[]).unwrap();
    assert_eq!(
        (0..5)
            .filter(|_| auth.admit(&HeaderMap::new()).is_ok())
            .count(),
        2
    );
}

#[test]
fn admin_keys_guard_metrics_only_when_set() {
    let open = auth_from("[query]\n", &[]).unwrap();
    assert!(open.admit_admin(&HeaderMap::new()).is_ok());
    let auth = auth_from("[query]\nadmin_keys = [\"adm\"]\napi_keys = [\"k\"]\n", &[]).unwrap();
    assert!(auth.admin_guarded());
    assert!(auth.admit_admin(&bearer("adm")).is_ok());
    assert!(auth.admit_admin(&headers(&[("x-api-key", "adm")])).is_ok());
    for h in [HeaderMap::new(), bearer("k"), bearer("adm2")] {
        assert_eq!(
            auth.admit_admin(&h).unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
    }
    // An admin key is not an API key.
    assert!(auth.admit(&bearer("adm")).is_err());
}

#[test]
fn the_status_needs_an_admin_key_when_set_else_an_admitted_caller() {
    let unauthorized = |a: &Auth, h: &HeaderMap| a.admit_status(h).unwrap_err().status;
    // Admin keys set: only they read the status; an API key (which sees its own documents) or
    // none gets 401.
    let guarded = auth_from("[query]\nadmin_keys = [\"adm\"]\napi_keys = [\"k\"]\n", &[]).unwrap();
    assert!(guarded.admit_status(&bearer("adm")).is_ok());
    for h in [HeaderMap::new(), bearer("k"), bearer("nope")] {
        assert_eq!(unauthorized(&guarded, &h), StatusCode::UNAUTHORIZED);
    }
    // No admin keys: a caller the API admits, and nobody else.
    let keyed = node();
    assert!(keyed.admit_status(&bearer("key-a")).is_ok());
    assert!(keyed.admit_status(&bearer(&token(json!(["g"])))).is_ok());
    for h in [HeaderMap::new(), bearer("nope")] {
        assert_eq!(unauthorized(&keyed, &h), StatusCode::UNAUTHORIZED);
    }
    // An unauthenticated node is open to all, its status too.
    let open = auth_from("[query]\n", &[]).unwrap();
    assert!(open.admit_status(&HeaderMap::new()).is_ok());
}

#[test]
fn configuration_mistakes_are_refused_at_start() {
    for (toml, expect) in [
        ("[query]\n[[query.keys]]\nkey = \"k\"\n", "needs a name"),
        ("[query]\n[[query.keys]]\nname = \"a\"\n", "no key"),
        (
            "[query]\n[[query.keys]]\nname = \"a\"\nkey = \"k\"\nkey_env = \"K\"\n",
            "one way only",
        ),
        (
            "[query]\n[[query.keys]]\nname = \"a\"\nkey = \"k\"\n[[query.keys]]\nname = \"a\"\nkey = \"j\"\n",
            "twice",
        ),
        (
            "[query]\napi_keys = [\"k\"]\n[[query.keys]]\nname = \"a\"\nkey = \"k\"\n",
            "same key",
        ),
        (
            "[query]\n[[query.keys]]\nname = \"a\"\nkey = \"k\"\nprincipals = [\"\"]\n",
            "principals",
        ),
        (
            "[query]\napi_keys = [\"k\"]\ntrust_request_principals = true\n",
            "trust_request_principals",
        ),
        ("[query]\n[query.jwt]\nissuer = \"i\"\nhs256_secret = \"s\"\n", "audience"),
        ("[query]\n[query.jwt]\nissuer = \"i\"\naudience = [\"a\"]\n", "no key is"),
        ("[query]\nrate_per_second = -1.0\n", "rate_per_second"),
        ("[query]\nadmin_listen = \"127.0.0.1:8080\"\n", "admin_listen"),
        ("[query]\n[[query.keys]]\nname = \"a\"\nkey = \"k\"\nprincipal = [\"x\"]\n", "principal"),
    ] {
        let e = match auth_from(toml, &[]) {
            Ok(_) => panic!("accepted: {toml}"),
            Err(e) => format!("{e:#}"),
        };
        assert!(e.contains(expect), "{toml}: {e}");
    }
}

#[test]
fn keys_can_come_from_the_environment_variable_of_the_section() {
    let env = vec![(
        "FRESHET_QUERY_KEYS".to_string(),
        r#"[{name = "ops", key = "from-env", principals = ["group:ops"]}]"#.to_string(),
    )];
    let c = Config::load_with_env(None, &env).unwrap();
    let auth = Auth::new(&c.query, Metrics::new(), &|_| None).unwrap();
    let a = auth.admit(&bearer("from-env")).unwrap();
    assert_eq!(
        (a.name.as_str(), held(&a)),
        ("ops", vec!["group:ops".into()])
    );
}

#[test]
fn listening_beyond_loopback_without_tls_is_a_warning() {
    let open = auth_from(
        "[query]\nlisten = \"0.0.0.0:8080\"\napi_keys = [\"k\"]\n",
        &[],
    )
    .unwrap();
    assert!(
        open.warnings()
            .iter()
            .any(|w| w.contains("0.0.0.0:8080") && w.contains("without TLS")),
        "{:?}",
        open.warnings()
    );
    let local = auth_from("[query]\napi_keys = [\"k\"]\n", &[]).unwrap();
    assert!(!local.warnings().iter().any(|w| w.contains("TLS")));
}
