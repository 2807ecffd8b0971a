//! Connectors: the edges of freshet (Kafka, Milvus, tantivy, embedding models).
