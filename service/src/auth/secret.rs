//! Secrets in settings: a [`Secret`] (its `Debug` prints `"<redacted>"`) given inline, in a file
//! or in an environment variable, exactly one of them ([`resolve_secret`], in `freshet-config`
//! so that clients of outside systems read keys by the same rules without the service crate).

pub use freshet_config::{resolve_secret, Secret};
