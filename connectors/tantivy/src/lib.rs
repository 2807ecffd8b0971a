//! freshet tantivy connector.
