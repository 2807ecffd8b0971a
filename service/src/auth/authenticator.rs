//! One request's headers → who is calling (a key's rights `R`, or a token's claims), with the
//! identity's limits applied, or why not (401, 429). A service maps the identity to what it
//! may do; an authenticator with neither keys nor an issuer admits no one, and the service
//! decides what an unauthenticated request gets.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{bail, Result};
use http::{HeaderMap, StatusCode};
use tokio::sync::OwnedSemaphorePermit;

use crate::auth::credential::{credential, looks_like_jwt};
use crate::auth::jwt::{Claims, Verifier};
use crate::auth::keys::{self, KeyEntry};
use crate::auth::limits::{retry_after_secs, Gate, Gates, Limits, Refusal};

/// Who an admitted credential belongs to.
#[derive(Debug, Clone, PartialEq)]
pub enum Caller<R> {
    /// A key, with the rights it was configured with.
    Key(R),
    /// A token of the issuer.
    Token(Claims),
}

/// An admitted request: its identity's name (a key's name, or `jwt`; for logs and metrics),
/// who it is, and its concurrency slot (held until dropped).
#[derive(Debug)]
pub struct Admitted<R> {
    pub name: String,
    pub caller: Caller<R>,
    pub permit: Option<OwnedSemaphorePermit>,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// No credential, or one that is not valid (401). `label` says which kind, for metrics:
    /// `none` (no usable credential), `jwt` (a token failed a check), `unknown` (no key matched).
    Unauthorized {
        label: &'static str,
        message: String,
    },
    /// Over the identity's rate or in-flight limit (429).
    Limited { name: String, refusal: Refusal },
}

impl Refused {
    pub fn status(&self) -> StatusCode {
        match self {
            Refused::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Refused::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The JSON error code: `unauthorized` or `too_many_requests`.
    pub fn code(&self) -> &'static str {
        match self {
            Refused::Unauthorized { .. } => "unauthorized",
            Refused::Limited { .. } => "too_many_requests",
        }
    }

    /// The metrics label of the identity (never a secret or a token subject).
    pub fn label(&self) -> &str {
        match self {
            Refused::Unauthorized { label, .. } => label,
            Refused::Limited { name, .. } => name,
        }
    }

    /// The metrics reason: `unauthorized`, `rate_limited`, `concurrency_limited`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Unauthorized { .. } => "unauthorized",
            Refused::Limited {
                refusal: Refusal::Rate(_),
                ..
            } => "rate_limited",
            Refused::Limited {
                refusal: Refusal::Concurrency,
                ..
            } => "concurrency_limited",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refused::Unauthorized { message, .. } => message.clone(),
            Refused::Limited { name, refusal } => {
                let what = match refusal {
                    Refusal::Rate(_) => "request rate limit reached",
                    Refusal::Concurrency => "too many requests in flight",
                };
                format!("{what} for {name:?}; retry later")
            }
        }
    }

    /// Seconds for `Retry-After` (429 only).
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Refused::Limited { refusal, .. } => Some(retry_after_secs(*refusal)),
            Refused::Unauthorized { .. } => None,
        }
    }
}

/// The keys and the issuer of a service.
pub struct Authenticator<R> {
    keys: Vec<KeyEntry<R>>,
    jwt: Option<(Verifier, Gates)>,
}

impl<R: Clone> Authenticator<R> {
    /// `keys` must hold distinct secrets; `jwt` is the issuer with its per-subject limits.
    pub fn new(keys: Vec<KeyEntry<R>>, jwt: Option<(Verifier, Limits)>) -> Result<Self> {
        let unique: BTreeSet<&[u8; 32]> = keys.iter().map(KeyEntry::digest).collect();
        if unique.len() != keys.len() {
            bail!("the same key is configured twice");
        }
        Ok(Authenticator {
            keys,
            jwt: jwt.map(|(v, limits)| (v, Gates::new(limits))),
        })
    }

    /// Whether the service has neither keys nor an issuer (it admits no one).
    pub fn is_open(&self) -> bool {
        self.keys.is_empty() && self.jwt.is_none()
    }

    /// `keys`, `jwt`, `keys+jwt` or `none`.
    pub fn mode(&self) -> &'static str {
        match (!self.keys.is_empty(), self.jwt.is_some()) {
            (true, true) => "keys+jwt",
            (true, false) => "keys",
            (false, true) => "jwt",
            (false, false) => "none",
        }
    }

    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// Whether `secret` is one of the keys.
    pub fn holds(&self, secret: &str) -> bool {
        keys::find(&self.keys, KeyEntry::digest, secret).is_some()
    }

    /// Starts fetching the issuer's JWKS URL, when one is configured (inside a tokio runtime).
    pub fn start(&self) -> Result<()> {
        if let Some(remote) = self.jwt.as_ref().and_then(|(v, _)| v.remote()) {
            remote.spawn()?;
        }
        Ok(())
    }

    /// `Err` with why while tokens cannot be verified yet (the JWKS URL not fetched).
    pub fn ready(&self) -> Result<(), String> {
        match self.jwt.as_ref().and_then(|(v, _)| v.remote()) {
            Some(remote) => remote.status(),
            None => Ok(()),
        }
    }

    /// Identifies the caller of a request by its one credential and applies its limits.
    pub fn admit(&self, headers: &HeaderMap) -> Result<Admitted<R>, Refused> {
        let given = credential(headers).map_err(|message| Refused::Unauthorized {
            label: "none",
            message,
        })?;
        let (name, caller, gate): (String, Caller<R>, Arc<Gate>) =
            if let Some(k) = keys::find(&self.keys, KeyEntry::digest, given) {
                (
                    k.name.clone(),
                    Caller::Key(k.rights.clone()),
                    k.gate.clone(),
                )
            } else if let (Some((verifier, gates)), true) = (&self.jwt, looks_like_jwt(given)) {
                let claims = verifier
                    .verify(given)
                    .map_err(|message| Refused::Unauthorized {
                        label: "jwt",
                        message,
                    })?;
                let gate = gates.get(&claims.subject);
                ("jwt".into(), Caller::Token(claims), gate)
            } else {
                return Err(Refused::Unauthorized {
                    label: "unknown",
                    message: "invalid API key".into(),
                });
            };
        match gate.admit() {
            Ok(permit) => Ok(Admitted {
                name,
                caller,
                permit,
            }),
            Err(refusal) => Err(Refused::Limited { name, refusal }),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn bearer(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {v}")).unwrap(),
        );
        h
    }

    fn key(name: &str, secret: &str, rights: u32, limits: Limits) -> KeyEntry<u32> {
        KeyEntry::new(name.into(), secret, rights, Arc::new(Gate::new(limits)))
    }

    #[test]
    fn a_key_admits_its_rights_and_its_limits_apply() {
        let one = Limits {
            rate_per_second: 0.0,
            burst: 0,
            max_concurrent: 1,
        };
        let a = Authenticator::new(
            vec![
                key("a", "key-a", 1, Limits::NONE),
                key("b", "key-b", 2, one),
            ],
            None,
        )
        .unwrap();
        assert_eq!(a.mode(), "keys");
        let got = a.admit(&bearer("key-b")).unwrap();
        assert_eq!((got.name.as_str(), &got.caller), ("b", &Caller::Key(2)));
        let e = a.admit(&bearer("key-b")).unwrap_err();
        assert_eq!(
            (e.status(), e.reason()),
            (StatusCode::TOO_MANY_REQUESTS, "concurrency_limited")
        );
        assert_eq!(e.retry_after(), Some(1));
        drop(got);
        assert!(a.admit(&bearer("key-b")).is_ok());
        for (h, label) in [
            (HeaderMap::new(), "none"),
            (bearer("key-c"), "unknown"),
            (bearer("a.b.c"), "unknown"),
        ] {
            let e = a.admit(&h).unwrap_err();
            assert_eq!((e.status(), e.label()), (StatusCode::UNAUTHORIZED, label));
        }
        assert!(a.holds("key-a") && !a.holds("key-c"));
    }

    #[test]
    fn the_same_key_twice_is_refused() {
        let e = Authenticator::new(
            vec![
                key("a", "k", 1, Limits::NONE),
                key("b", "k", 2, Limits::NONE),
            ],
            None,
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("twice"), "{e}");
        assert!(Authenticator::<u32>::new(vec![], None).unwrap().is_open());
    }
}
