//! The freshet query node: hybrid retrieval over the tantivy index and the Milvus collection the
//! pipeline maintains, served as JSON over HTTP.
//!
//! A request goes `http` (over a [`node::Node`]: the engine and `auth`, limits, errors) → `request`
//! (validated [`request::Plan`]) → `retrieve` ([`retrieve::Engine`]: both routes in parallel,
//! filtered inside each search, then `fusion`, parent-child and expansion in `passage`, `rerank`,
//! `pack`); `answer` turns a retrieval into a cited answer from the language model
//! (`[llm]`), and `openai` serves those answers as an OpenAI-compatible chat API. `indexes` keeps the node on the newest pipeline commit without restarts; a request
//! reads one pinned snapshot of it, and `visible` checks every chunk of the answer against the
//! request's filter and principals; `transform` rewrites the question with the language model
//! before the routes run (multi-query, HyDE, conversations); `overload` bounds the retrievals running and waiting and stops
//! the work of a request past its deadline. `metrics` (spec: `query/METRICS.md`) and `openapi`
//! describe it; `pathway` offers a Pathway-compatible endpoint; `status` answers what an
//! operator watches (`GET /v1/status`, with the pipeline's own status) and `console` serves the
//! browser console over these routes (`/console`). `replica` keeps the node's own index from
//! the pipeline's changelog topic, for nodes on machines without the pipeline's disk.

pub mod answer;
pub mod auth;
pub mod config;
pub mod console;
pub mod deletes;
pub mod documents;
pub mod fusion;
pub mod http;
pub mod indexes;
pub mod language;
pub mod mcp;
pub mod metrics;
pub mod models;
pub mod node;
pub mod openai;
pub mod openapi;
pub mod overload;
pub mod pack;
pub mod passage;
pub mod pathway;
pub mod reload;
pub mod replica;
pub mod request;
pub mod rerank;
pub mod retrieve;
mod routes;
pub mod server;
pub mod serving;
pub mod status;
pub mod transform;
pub mod visible;
pub mod wait;

#[cfg(test)]
mod fuzz_tests;
