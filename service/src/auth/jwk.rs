//! The keys of a JWKS document (`{"keys": [...]}`) that can verify token signatures.
//!
//! Identity providers publish more than signing keys: Keycloak realms publish an encryption key
//! (`"use": "enc"`, `"alg": "RSA-OAEP"`) beside the signing one by default, and a set may hold
//! key types or algorithms this service does not verify. Such a key is skipped (logged with its
//! `kid` and why); the others are kept. A document is refused only when it is not a JWKS or
//! when no key in it can verify a signature.

use anyhow::{bail, Context, Result};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyOperations, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

/// A key that verifies tokens of one algorithm (and, when it has one, one `kid`).
pub struct Key {
    pub kid: Option<String>,
    pub alg: Algorithm,
    pub key: DecodingKey,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

/// The usable keys of a JWKS document, and a line per skipped key (`kid`: why). `what` names
/// the document's source in errors.
pub fn parse_jwks(text: &str, what: &str) -> Result<(Vec<Key>, Vec<String>)> {
    let doc: Value = serde_json::from_str(text).with_context(|| format!("{what}: not JSON"))?;
    let Some(entries) = doc.get("keys").and_then(Value::as_array) else {
        bail!("{what}: not a JWKS (no \"keys\" array)");
    };
    let mut keys = Vec::new();
    let mut skipped = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let kid = entry
            .get("kid")
            .and_then(Value::as_str)
            .map(|k| format!("kid {k:?}"))
            .unwrap_or_else(|| format!("key {i}"));
        match usable(entry) {
            Ok(k) => keys.push(k),
            Err(why) => skipped.push(format!("{kid}: {why}")),
        }
    }
    if keys.is_empty() {
        bail!(
            "{what}: no key in it can verify token signatures{}",
            if skipped.is_empty() {
                " (the set is empty)".to_string()
            } else {
                format!(" (skipped: {})", skipped.join("; "))
            }
        );
    }
    Ok((keys, skipped))
}

/// One JWKS entry as a verification key, or why it is not one.
fn usable(entry: &Value) -> Result<Key, String> {
    // The purpose first, from the raw entry: `use` and `key_ops` may hold values the typed
    // parser does not know.
    match entry.get("use").and_then(Value::as_str) {
        None | Some("sig") => {}
        Some(other) => return Err(format!("\"use\": {other:?} (not a signing key)")),
    }
    let jwk: Jwk = serde_json::from_value(entry.clone()).map_err(|e| {
        let alg = entry.get("alg").and_then(Value::as_str).unwrap_or("");
        let kty = entry.get("kty").and_then(Value::as_str).unwrap_or("");
        format!("not a key this service reads (kty {kty:?}, alg {alg:?}: {e})")
    })?;
    if let Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_)) = &jwk.common.public_key_use {
        return Err("not a signing key".into());
    }
    if let Some(ops) = &jwk.common.key_operations {
        if !ops.iter().any(|o| matches!(o, KeyOperations::Verify)) {
            return Err("\"key_ops\" does not include \"verify\"".into());
        }
    }
    let alg = match &jwk.common.key_algorithm {
        Some(a) => a
            .to_string()
            .parse::<Algorithm>()
            .map_err(|_| format!("\"alg\": {a} is not a signature algorithm"))?,
        None => match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => Algorithm::RS256,
            AlgorithmParameters::EllipticCurve(p) => match p.curve {
                EllipticCurve::P256 => Algorithm::ES256,
                EllipticCurve::P384 => Algorithm::ES384,
                ref c => return Err(format!("curve {c:?} is not supported")),
            },
            AlgorithmParameters::OctetKeyPair(_) => Algorithm::EdDSA,
            _ => return Err("no \"alg\", and the key type does not imply one".into()),
        },
    };
    let key = DecodingKey::from_jwk(&jwk).map_err(|e| format!("unreadable key: {e}"))?;
    if key.family() != alg.family() {
        return Err(format!("\"alg\": {alg:?} does not fit the key type"));
    }
    Ok(Key {
        kid: jwk.common.key_id.clone(),
        alg,
        key,
    })
}
