//! freshet milvus connector.
