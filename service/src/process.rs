//! The start and end of a service process: tracing (`FRESHET_LOG`, default `info`), the tokio
//! runtime, and the exit status with the error chain on standard error.

use anyhow::Result;

/// Logs to standard error at the level of `FRESHET_LOG` (an `EnvFilter`, default `info`).
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FRESHET_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}

/// A multi-threaded tokio runtime with I/O and timers.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// The `main` of a service binary `name`: tracing, then `run`; exits 1 with
/// `<name>: error: <the error chain>` when it fails.
pub fn main(name: &str, run: impl FnOnce() -> Result<()>) {
    init_tracing();
    if let Err(e) = run() {
        eprintln!("{name}: error: {e:#}");
        #[allow(clippy::exit)] // the process's own end, reached only from `main`
        std::process::exit(1);
    }
}
