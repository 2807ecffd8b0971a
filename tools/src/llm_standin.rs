//! `freshet-tools llm-standin`: the deterministic OpenAI-compatible chat server of the tests
//! (`freshet_llm::standin`) on an address of your choice, for trying `[llm]` without a model
//! (docs/llm.md, docs/testing.md). It answers until interrupted.

use std::path::Path;

use anyhow::{Context, Result};
use freshet_llm::standin::{self, StandinOptions};

#[derive(clap::Args)]
pub struct LlmStandinArgs {
    /// `host:port` to listen on (`base_url` is then `http://host:port/v1`).
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: String,
    /// Require this environment variable's value as the API key (`Authorization: Bearer`).
    #[arg(long)]
    api_key_env: Option<String>,
}

impl crate::Run for LlmStandinArgs {
    fn run(self, _config: Option<&Path>) -> Result<i32> {
        let api_key = match &self.api_key_env {
            Some(var) => Some(
                std::env::var(var).with_context(|| format!("--api-key-env: {var} is not set"))?,
            ),
            None => None,
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the runtime")?;
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind(&self.listen)
                .await
                .with_context(|| format!("cannot listen on {}", self.listen))?;
            let addr = listener.local_addr()?;
            eprintln!("llm-standin: serving http://{addr}/v1 (model \"standin\"; Ctrl-C stops)");
            tokio::select! {
                served = standin::serve(listener, StandinOptions { api_key }) => {
                    served.context("serving")?;
                }
                _ = tokio::signal::ctrl_c() => {}
            }
            Ok(0)
        })
    }
}
