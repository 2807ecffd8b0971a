//! API keys: each with a name, the principals it may use and its limits. Keys are kept as
//! SHA-256 digests and compared in constant time (`subtle`), every key every time, so neither
//! the time nor the length of a comparison tells anything about a key.

use std::collections::BTreeSet;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::limits::Gate;

/// One key.
pub struct KeyEntry {
    pub name: String,
    digest: [u8; 32],
    pub principals: BTreeSet<String>,
    pub gate: Arc<Gate>,
}

impl KeyEntry {
    pub fn new(
        name: String,
        secret: &str,
        principals: BTreeSet<String>,
        gate: Arc<Gate>,
    ) -> KeyEntry {
        KeyEntry {
            name,
            digest: digest(secret),
            principals,
            gate,
        }
    }
}

pub fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The entry whose key is `given`, if any.
pub fn find<'a, T>(entries: &'a [T], key: impl Fn(&T) -> &[u8; 32], given: &str) -> Option<&'a T> {
    let d = digest(given);
    let mut found = None;
    for e in entries {
        if bool::from(key(e).ct_eq(&d)) {
            found = Some(e);
        }
    }
    found
}

impl KeyEntry {
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::settings::Limits;

    fn entry(name: &str, key: &str) -> KeyEntry {
        let none = Limits {
            rate_per_second: 0.0,
            burst: 0,
            max_concurrent: 0,
        };
        KeyEntry::new(name.into(), key, BTreeSet::new(), Arc::new(Gate::new(none)))
    }

    #[test]
    fn keys_are_found_by_their_exact_secret() {
        let ring = [entry("a", "key-a"), entry("b", "key-b")];
        let name = |g: &str| find(&ring, KeyEntry::digest, g).map(|e| e.name.as_str());
        assert_eq!(name("key-a"), Some("a"));
        assert_eq!(name("key-b"), Some("b"));
        for wrong in ["", "key-", "key-a ", "KEY-A", "key-c", "key-ab"] {
            assert_eq!(name(wrong), None, "{wrong:?}");
        }
    }
}
