use std::path::PathBuf;

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
    Verifier::from_config(c, &|_| None).unwrap().unwrap()
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
    let no_groups = with(&|c| {
        c.as_object_mut().unwrap().remove("groups");
    })
    .unwrap_err();
    assert!(no_groups.contains("\"groups\""), "{no_groups}");
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
    assert!(Verifier::from_config(&no_key, &|_| None).is_err());
    let bad_pem = JwtConfig {
        hs256_secret: Default::default(),
        public_key_file: fixture("README.md"),
        ..config()
    };
    assert!(Verifier::from_config(&bad_pem, &|_| None).is_err());
    let not_a_url = JwtConfig {
        hs256_secret: Default::default(),
        jwks_url: "idp.example.com/certs".into(),
        ..config()
    };
    let e = Verifier::from_config(&not_a_url, &|_| None).unwrap_err();
    assert!(e.to_string().contains("not an http(s) URL"), "{e}");
    assert!(Verifier::from_config(&JwtConfig::default(), &|_| None)
        .unwrap()
        .is_none());
    let from_env = JwtConfig {
        hs256_secret: Default::default(),
        hs256_secret_env: "JWT_SECRET".into(),
        ..config()
    };
    let v = Verifier::from_config(&from_env, &|n| (n == "JWT_SECRET").then(|| "s".into()))
        .unwrap()
        .unwrap();
    assert!(v.verify(&hs256(&claims(), "s")).is_ok());
}
