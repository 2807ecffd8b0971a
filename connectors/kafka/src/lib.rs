//! freshet kafka connector.
