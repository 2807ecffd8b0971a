//! Who is calling a freshet HTTP service. The query node (`freshet-query`) and the ingest
//! service (`freshet-ingest`) both use it, each mapping an identity to its own rights
//! (principals to search with, or ids and ACLs to write).
//!
//! - [`credential`]: the one credential of a request (`Authorization: Bearer` or `X-API-Key`).
//! - [`keys`]: API keys, kept as SHA-256 digests and compared in constant time against every
//!   key, so neither the time nor the length of a comparison tells anything about a key.
//! - [`jwt`]: tokens of one issuer (HS256 secret, RS256/ES256 PEM, a JWKS file or URL
//!   ([`jwks`]), whose keys are read by [`jwk`]), checked for `iss`, `aud`, `exp`, `nbf`, with
//!   the caller's groups from a configurable claim.
//! - [`limits`]: a request rate and a concurrency limit per identity.
//! - [`authenticator`]: the above together: a request's headers → an admitted identity or why
//!   not.
//! - [`secret`]: secrets in settings (inline, a file or an environment variable; never printed).

pub mod authenticator;
pub mod credential;
pub mod jwk;
pub mod jwks;
pub mod jwt;
pub mod keys;
pub mod limits;
pub mod secret;

pub use authenticator::{Admitted, Authenticator, Caller, Refused};
pub use jwt::{Claims, JwtConfig, MissingGroups, Verifier};
pub use limits::Limits;
pub use secret::{resolve_secret, Secret};
