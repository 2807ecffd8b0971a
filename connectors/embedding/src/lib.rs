//! freshet embedding connector.
