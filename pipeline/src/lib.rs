//! The freshet indexing pipeline: configuration, the per-worker source loop, the sink stage and
//! the driver that assembles the dataflow from `freshet-operators` and the connectors.

pub mod cache;
pub mod census;
pub mod config;
pub mod dlq;
pub mod embedder;
pub mod endpoint;
pub mod epochs;
pub mod faults;
pub mod limits;
pub mod metrics;
pub mod preflight;
pub mod priority;
pub mod quarantine;
pub mod run;
pub mod sink;
pub mod source;
pub mod stall;
pub mod status;
pub mod topics;
pub mod worker;
