//! API keys: each with a name (for logs and metrics, never the key), what it may do (`R`, the
//! service's own rights) and its limits. Keys are kept as SHA-256 digests and compared in
//! constant time (`subtle`), every key every time, so neither the time nor the length of a
//! comparison tells anything about a key.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::auth::limits::Gate;

/// One key.
pub struct KeyEntry<R> {
    pub name: String,
    digest: [u8; 32],
    pub rights: R,
    pub gate: Arc<Gate>,
}

impl<R> KeyEntry<R> {
    pub fn new(name: String, secret: &str, rights: R, gate: Arc<Gate>) -> KeyEntry<R> {
        KeyEntry {
            name,
            digest: digest(secret),
            rights,
            gate,
        }
    }

    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }
}

impl<R> std::fmt::Debug for KeyEntry<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyEntry")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The SHA-256 digest of a key.
pub fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The entry whose key is `given`, if any: every entry is compared, in constant time.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::limits::Limits;

    fn entry(name: &str, key: &str) -> KeyEntry<()> {
        KeyEntry::new(name.into(), key, (), Arc::new(Gate::new(Limits::NONE)))
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
        assert!(!format!("{:?}", ring[0]).contains("key-a"));
    }
}
