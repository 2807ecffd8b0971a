use std::path::PathBuf;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{encode, EncodingKey, Header};
use serde_json::json;

use super::*;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/jwt")
        .join(name)
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

fn config() -> JwtConfig {
    JwtConfig {
        issuer: "https://idp.test".into(),
        audience: vec!["freshet".into()],
        hs256_secret: "an hs256 secret of the tests".into(),
        ..JwtConfig::default()
    }
}

fn verifier(c: &JwtConfig) -> Verifier {
    Verifier::from_config(c, "query.jwt", &|_| None)
        .unwrap()
        .unwrap()
}

fn claims() -> Value {
    json!({"iss": "https://idp.test", "aud": "freshet", "sub": "alice",
           "exp": now() + 600, "groups": ["a", "eng"]})
}

fn hs256(claims: &Value, secret: &str) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

fn principals(c: &Claims) -> Vec<&str> {
    c.principals.iter().map(String::as_str).collect()
}

#[test]
fn a_good_token_maps_its_groups_to_principals() {
    let v = verifier(&config());
    let c = v
        .verify(&hs256(&claims(), "an hs256 secret of the tests"))
        .unwrap();
    assert_eq!(c.subject, "alice");
    assert_eq!(principals(&c), ["group:a", "group:eng"]);

    // A subject prefix adds the user; a nested claim path and a single string are read.
    let mut cfg = config();
    cfg.subject_prefix = "user:".into();
    cfg.groups_claim = "realm_access.roles".into();
    cfg.group_prefix = String::new();
    let mut cl = claims();
    cl["realm_access"] = json!({"roles": "ops"});
    let c = verifier(&cfg)
        .verify(&hs256(&cl, "an hs256 secret of the tests"))
        .unwrap();
    assert_eq!(principals(&c), ["ops", "user:alice"]);
}

#[test]
fn bad_tokens_are_refused_with_the_reason() {
    let v = verifier(&config());
    let secret = "an hs256 secret of the tests";
    let with = |f: &dyn Fn(&mut Value)| {
        let mut c = claims();
        f(&mut c);
        v.verify(&hs256(&c, secret))
    };
    let expired = with(&|c| c["exp"] = json!(now() - 120)).unwrap_err();
    assert!(expired.contains("ExpiredSignature"), "{expired}");
    // Within the leeway (30 s) an expired token still passes.
    assert!(with(&|c| c["exp"] = json!(now() - 5)).is_ok());
    let early = with(&|c| c["nbf"] = json!(now() + 600)).unwrap_err();
    assert!(early.contains("ImmatureSignature"), "{early}");
    let iss = with(&|c| c["iss"] = json!("https://evil.test")).unwrap_err();
    assert!(iss.contains("InvalidIssuer"), "{iss}");
    let aud = with(&|c| c["aud"] = json!("other")).unwrap_err();
    assert!(aud.contains("InvalidAudience"), "{aud}");
    let no_exp = with(&|c| {
        c.as_object_mut().unwrap().remove("exp");
    })
    .unwrap_err();
    assert!(no_exp.contains("exp"), "{no_exp}");
    let bad_groups = with(&|c| c["groups"] = json!([1, 2])).unwrap_err();
    assert!(bad_groups.contains("strings"), "{bad_groups}");
    let bad_sig = v.verify(&hs256(&claims(), "another secret")).unwrap_err();
    assert!(bad_sig.contains("InvalidSignature"), "{bad_sig}");
    // A tampered payload fails the signature.
    let good = hs256(&claims(), secret);
    let mut parts: Vec<String> = good.split('.').map(String::from).collect();
    let mut forged = claims();
    forged["groups"] = json!(["admin"]);
    parts[1] = hs256(&forged, "x").split('.').nth(1).unwrap().to_owned();
    assert!(v.verify(&parts.join(".")).is_err());
    assert!(v.verify("not a token").is_err());
    // Unsigned tokens are never accepted.
    let none = format!(
        "{}.{}.",
        base64url(br#"{"alg":"none","typ":"JWT"}"#),
        base64url(claims().to_string().as_bytes())
    );
    assert!(v.verify(&none).is_err());
}

fn base64url(b: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..=c.len() {
            out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

#[test]
fn rs256_and_es256_public_keys_verify_their_tokens_only() {
    for (alg, private, public) in [
        (Algorithm::RS256, "rsa-private.pem", "rsa-public.pem"),
        (Algorithm::ES256, "ec-private.pem", "ec-public.pem"),
    ] {
        let cfg = JwtConfig {
            hs256_secret: Default::default(),
            public_key_file: fixture(public),
            ..config()
        };
        let v = verifier(&cfg);
        let pem = std::fs::read(fixture(private)).unwrap();
        let key = match alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem).unwrap(),
            _ => EncodingKey::from_ec_pem(&pem).unwrap(),
        };
        let token = encode(&Header::new(alg), &claims(), &key).unwrap();
        assert_eq!(v.verify(&token).unwrap().subject, "alice", "{alg:?}");
        // An HS256 token "signed" with the public key as the secret (algorithm confusion).
        let public_pem = std::fs::read(fixture(public)).unwrap();
        let confused = encode(
            &Header::new(Algorithm::HS256),
            &claims(),
            &EncodingKey::from_secret(&public_pem),
        )
        .unwrap();
        let e = v.verify(&confused).unwrap_err();
        assert!(e.contains("no configured key"), "{e}");
    }
}

#[test]
fn a_jwks_key_is_picked_by_kid() {
    let pem = std::fs::read(fixture("rsa-private.pem")).unwrap();
    let key = EncodingKey::from_rsa_pem(&pem).unwrap();
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&key, Algorithm::RS256).unwrap();
    jwk.common.key_id = Some("k1".into());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(
        &path,
        serde_json::to_string(&JwkSet { keys: vec![jwk] }).unwrap(),
    )
    .unwrap();
    let cfg = JwtConfig {
        hs256_secret: Default::default(),
        jwks_file: path,
        ..config()
    };
    let v = verifier(&cfg);
    let header = |kid: &str| Header {
        kid: Some(kid.into()),
        ..Header::new(Algorithm::RS256)
    };
    let token = encode(&header("k1"), &claims(), &key).unwrap();
    assert_eq!(v.verify(&token).unwrap().subject, "alice");
    let token = encode(&header("k2"), &claims(), &key).unwrap();
    assert!(v.verify(&token).unwrap_err().contains("k2"));
}

#[test]
fn configuration_mistakes_are_errors() {
    let no_key = JwtConfig {
        hs256_secret: Default::default(),
        ..config()
    };
    assert!(Verifier::from_config(&no_key, "query.jwt", &|_| None).is_err());
    let bad_pem = JwtConfig {
        hs256_secret: Default::default(),
        public_key_file: fixture("README.md"),
        ..config()
    };
    assert!(Verifier::from_config(&bad_pem, "query.jwt", &|_| None).is_err());
    let not_a_url = JwtConfig {
        hs256_secret: Default::default(),
        jwks_url: "idp.example.com/certs".into(),
        ..config()
    };
    let e = Verifier::from_config(&not_a_url, "query.jwt", &|_| None).unwrap_err();
    assert!(e.to_string().contains("not a URL"), "{e}");
    assert!(
        Verifier::from_config(&JwtConfig::default(), "query.jwt", &|_| None)
            .unwrap()
            .is_none()
    );
    let from_env = JwtConfig {
        hs256_secret: Default::default(),
        hs256_secret_env: "JWT_SECRET".into(),
        ..config()
    };
    let v = Verifier::from_config(&from_env, "query.jwt", &|n| {
        (n == "JWT_SECRET").then(|| "s".into())
    })
    .unwrap()
    .unwrap();
    assert!(v.verify(&hs256(&claims(), "s")).is_ok());
}

/// Auth0 puts groups under a namespaced claim whose name holds dots and slashes; Keycloak
/// nests them; a JSON pointer reaches either.
#[test]
fn the_groups_claim_is_found_by_its_exact_name_a_path_or_a_pointer() {
    let secret = "an hs256 secret of the tests";
    let mut cl = claims();
    cl.as_object_mut().unwrap().remove("groups");
    cl["https://example.com/groups"] = json!(["sales"]);
    cl["realm_access"] = json!({"roles": ["ops"]});
    cl["a.b"] = json!(["top-level"]);
    cl["a"] = json!({"b": ["nested"]});
    let token = hs256(&cl, secret);
    for (name, expected) in [
        ("https://example.com/groups", "group:sales"),
        ("/https:~1~1example.com~1groups", "group:sales"),
        ("realm_access.roles", "group:ops"),
        ("/realm_access/roles", "group:ops"),
        ("a.b", "group:top-level"),
        ("/a/b", "group:nested"),
    ] {
        let cfg = JwtConfig {
            groups_claim: name.into(),
            ..config()
        };
        let c = verifier(&cfg).verify(&token).unwrap();
        assert_eq!(principals(&c), [expected], "{name}");
    }
}

/// A token without the groups claim holds no group, unless `missing_groups = "reject"`.
#[test]
fn a_token_without_groups_holds_none_or_is_refused_when_configured() {
    let secret = "an hs256 secret of the tests";
    for missing in [json!(null), json!("absent")] {
        let mut cl = claims();
        if missing.is_null() {
            cl["groups"] = Value::Null;
        } else {
            cl.as_object_mut().unwrap().remove("groups");
        }
        let token = hs256(&cl, secret);
        let c = verifier(&config()).verify(&token).unwrap();
        assert!(c.principals.is_empty(), "{missing}: {c:?}");
        let with_subject = JwtConfig {
            subject_prefix: "user:".into(),
            ..config()
        };
        let c = verifier(&with_subject).verify(&token).unwrap();
        assert_eq!(principals(&c), ["user:alice"]);
        let strict = JwtConfig {
            missing_groups: MissingGroups::Reject,
            ..config()
        };
        let e = verifier(&strict).verify(&token).unwrap_err();
        assert!(e.contains("\"groups\""), "{e}");
    }
}

/// A Keycloak realm's JWKS: the RS256 signing key beside an RSA-OAEP encryption key (and, here,
/// keys of other kinds nobody can verify with). The signing key is kept and verifies.
#[test]
fn a_jwks_with_an_encryption_key_keeps_its_signing_keys() {
    let pem = std::fs::read(fixture("rsa-private.pem")).unwrap();
    let key = EncodingKey::from_rsa_pem(&pem).unwrap();
    let mut sig = jsonwebtoken::jwk::Jwk::from_encoding_key(&key, Algorithm::RS256).unwrap();
    sig.common.key_id = Some("sig-1".into());
    let sig = serde_json::to_value(&sig).unwrap();
    let mut enc = sig.clone();
    enc["kid"] = json!("enc-1");
    enc["alg"] = json!("RSA-OAEP");
    enc["use"] = json!("enc");
    let mut wrapping = sig.clone();
    wrapping["kid"] = json!("wrap-1");
    wrapping.as_object_mut().unwrap().remove("alg");
    wrapping["key_ops"] = json!(["wrapKey"]);
    let odd = json!({"kid": "odd", "kty": "XYZ", "alg": "FOO256"});
    let doc = json!({"keys": [enc, sig, wrapping, odd]}).to_string();
    let (keys, skipped) = crate::auth::jwk::parse_jwks(&doc, "test").unwrap();
    assert_eq!(
        keys.iter().map(|k| k.kid.as_deref()).collect::<Vec<_>>(),
        [Some("sig-1")]
    );
    assert_eq!(skipped.len(), 3, "{skipped:?}");
    assert!(skipped[0].contains("enc-1"), "{skipped:?}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, &doc).unwrap();
    let cfg = JwtConfig {
        hs256_secret: Default::default(),
        jwks_file: path.clone(),
        ..config()
    };
    let header = Header {
        kid: Some("sig-1".into()),
        ..Header::new(Algorithm::RS256)
    };
    let token = encode(&header, &claims(), &key).unwrap();
    assert_eq!(verifier(&cfg).verify(&token).unwrap().subject, "alice");

    // A set with no signing key at all is refused, with what was skipped.
    std::fs::write(&path, json!({"keys": [doc_key(&doc, 0)]}).to_string()).unwrap();
    let e = Verifier::from_config(&cfg, "query.jwt", &|_| None).unwrap_err();
    assert!(format!("{e:#}").contains("enc-1"), "{e:#}");
}

fn doc_key(doc: &str, i: usize) -> Value {
    serde_json::from_str::<Value>(doc).unwrap()["keys"][i].clone()
}

#[test]
fn a_jwks_url_must_be_https_unless_loopback_or_allowed() {
    let url = |u: &str, allow: bool| JwtConfig {
        hs256_secret: Default::default(),
        jwks_url: u.into(),
        allow_insecure_http: allow,
        ..config()
    };
    let e = Verifier::from_config(
        &url("http://idp.example.com/certs", false),
        "query.jwt",
        &|_| None,
    )
    .unwrap_err();
    assert!(
        format!("{e:#}").contains("query.jwt.allow_insecure_http"),
        "{e:#}"
    );
    for ok in [
        url("https://idp.example.com/certs", false),
        url("http://127.0.0.1:8080/certs", false),
        url("http://localhost/certs", false),
        url("http://[::1]:9/certs", false),
        url("http://idp.example.com/certs", true),
    ] {
        assert!(
            Verifier::from_config(&ok, "query.jwt", &|_| None).is_ok(),
            "{}",
            ok.jwks_url
        );
    }
    let e =
        Verifier::from_config(&url("ftp://idp/certs", true), "query.jwt", &|_| None).unwrap_err();
    assert!(e.to_string().contains("not an http(s) URL"), "{e}");
}
