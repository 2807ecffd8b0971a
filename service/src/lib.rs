//! What an HTTP service of freshet is: the query node (`freshet-query`), the ingest service
//! (`freshet-ingest`) and the pipeline's `/metrics` endpoint are each built from these parts,
//! and the next service is too.
//!
//! - [`process`]: tracing (`FRESHET_LOG`), the runtime, the exit status of a service binary.
//! - [`listen`]: bind, serve (over TLS when configured), stop gracefully on SIGINT/SIGTERM.
//! - [`transport`]: the TLS server settings, https for outgoing secrets, the warning for a
//!   plain-HTTP listener beyond loopback.
//! - [`auth`]: who is calling: API keys and JWTs bound to the service's own rights, limits.
//! - [`error`]: the JSON error answer ([`ApiError`]); [`body`]: request bodies within a limit.
//! - [`routes`]: the JSON 404/405 fallbacks, `/healthz`, the `/metrics` answer.
//! - [`metrics`]: `freshet-metrics` re-exported (registration under the naming spec of
//!   `docs/metrics.md`, the bucket sets, the check of a binary's `METRICS.md`), so a service
//!   names one crate.
//!
//! Each service keeps its own configuration section (read by `freshet-config`), routes and
//! rights; this crate depends on none of the pipeline's crates.

pub mod auth;
pub mod body;
pub mod error;
pub mod listen;
pub mod process;
pub mod routes;
pub mod transport;

pub use error::ApiError;
pub use freshet_metrics as metrics;
