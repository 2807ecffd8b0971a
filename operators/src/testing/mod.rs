//! Test support for freshet's crates (feature `test-support`, and this crate's own tests): the
//! contract's builders and generators (`freshet_core::testing`: a plain chunk, a seeded
//! generator, random chunks and filters, the test tokenizer), and PDFs written for tests,
//! inflate bombs among them ([`pdf`]).

pub mod pdf;

pub use freshet_core::testing::*;
