//! freshet's operators: pure transforms from a Kafka record to the chunk deltas that the sinks
//! apply. No I/O lives here.

pub mod chunk;
pub mod document;
pub mod embed;
