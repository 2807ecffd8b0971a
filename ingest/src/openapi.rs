//! The OpenAPI 3.1 document served at `/openapi.json`. [`ROUTES`] lists every route and method
//! the router serves; the tests check that each is documented and routed.

use serde_json::{json, Value};

/// Every (path, method) the router serves.
pub const ROUTES: &[(&str, &str)] = &[
    ("/v1/documents/{id}", "put"),
    ("/v1/documents/{id}", "delete"),
    ("/v1/documents:batch", "post"),
    ("/healthz", "get"),
    ("/readyz", "get"),
    ("/metrics", "get"),
    ("/openapi.json", "get"),
];

/// The OpenAPI document.
pub fn document() -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "freshet ingest service",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Documents over HTTP onto the freshet document topic. A write is answered once the broker has acknowledged it, with its partition and offset; the query node's GET /v1/index/wait tells when that offset is searchable."
        },
        "components": components(),
        "paths": paths(),
    })
}

fn err_resp(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

fn components() -> Value {
    json!({
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}
        },
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
                    "code": {"type": "string", "enum": ["bad_request", "invalid_document", "invalid_batch", "unauthorized", "forbidden", "too_many_requests", "not_found", "method_not_allowed", "too_large", "too_many_documents", "unsupported_media_type", "unavailable"]},
                    "message": {"type": "string"},
                    "class": {"type": "string", "description": "invalid_document: the pipeline decoder's error class (malformed_json, missing_id, id_mismatch, unknown_op, invalid_field, invalid_utf8, too_large, field_too_large, too_many_acl_entries, missing_acl)."},
                    "lines": {"type": "array", "description": "invalid_batch, forbidden (a batch): every refused line (1-based).", "items": {"type": "object", "properties": {
                        "line": {"type": "integer"}, "class": {"type": "string"}, "message": {"type": "string"}
                    }}}
                }}}
            },
            "Envelope": {
                "type": "object",
                "description": "The document contract (README, Document contract). Unknown fields are kept as metadata, except ones that read as an ACL (ACL, acls, permissions, ...), which are invalid_field.",
                "properties": {
                    "op": {"type": ["string", "null"], "enum": ["upsert", "delete", null], "description": "PUT: absent or upsert. Batch: either."},
                    "id": {"type": ["string", "integer"], "description": "PUT: optional, must equal the path's id. Batch: required."},
                    "title": {"type": ["string", "null"]},
                    "text": {"type": ["string", "null"]},
                    "content_base64": {"type": "string", "description": "The file of a binary content type (PDF, DOCX, EPUB)."},
                    "content_type": {"type": ["string", "null"], "default": "text/plain"},
                    "source": {"type": ["string", "null"]},
                    "metadata": {"type": ["object", "null"]},
                    "acl": {"anyOf": [
                        {"type": ["array", "null"], "items": {"type": "string", "minLength": 1}},
                        {"type": "string", "enum": ["public"]}
                    ], "description": "The principals that may see the document, or \"public\". Absent, null or []: no ACL stated (public; missing_acl under limits.require_acl)."}
                }
            },
            "Written": {
                "type": "object",
                "required": ["id", "op", "topic", "partition", "offset"],
                "properties": {
                    "id": {"type": "string"},
                    "op": {"type": "string", "enum": ["upsert", "delete"]},
                    "topic": {"type": "string"},
                    "partition": {"type": "integer"},
                    "offset": {"type": "integer", "description": "Searchable once the query node's committed next offset of this partition is above it (GET /v1/index/wait)."}
                }
            },
            "BatchWritten": {
                "type": "object",
                "required": ["topic", "documents", "results"],
                "properties": {
                    "topic": {"type": "string"},
                    "documents": {"type": "integer"},
                    "results": {"type": "array", "items": {"type": "object", "properties": {
                        "line": {"type": "integer"}, "id": {"type": "string"}, "op": {"type": "string", "enum": ["upsert", "delete"]},
                        "partition": {"type": "integer"}, "offset": {"type": "integer"}
                    }}}
                }
            }
        }
    })
}

fn paths() -> Value {
    let security = json!([{"bearer": []}, {"apiKey": []}]);
    let id = json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string", "minLength": 1}, "description": "The document id (a `/` in it as %2F)."});
    let query = |name: &str, description: &str, schema: Value| json!({"name": name, "in": "query", "required": false, "schema": schema, "description": description});
    let file = json!({"schema": {"type": "string", "format": "binary"}});
    json!({
        "/v1/documents/{id}": {
            "put": {
                "summary": "Write one document: a JSON envelope, or a file with its media type",
                "description": "The query parameters describe a file upload; with a JSON envelope (which carries its own fields) any of them is a 400.",
                "security": security,
                "parameters": [
                    id,
                    query("title", "File upload: the title (default: the file's own heading or <title>; for PDF/DOCX/EPUB, the file's metadata).", json!({"type": "string"})),
                    query("source", "File upload: the document's source (URL, path).", json!({"type": "string"})),
                    query("acl", "File upload: one ACL principal; repeat for more. None: no ACL stated (public; missing_acl under limits.require_acl).", json!({"type": "string", "minLength": 1})),
                    query("public", "File upload: true states the document public (not with acl).", json!({"type": "boolean"})),
                    {"name": "metadata", "in": "query", "required": false, "description": "File upload: a JSON object of metadata (URL-encoded JSON text; empty: none).",
                     "content": {"application/json": {"schema": {"type": "object"}}}}
                ],
                "requestBody": {"required": true, "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}},
                    "text/plain": file, "text/markdown": file, "text/html": file, "text/csv": file,
                    "text/x-rust": file, "text/x-python": file, "text/javascript": file,
                    "text/x-typescript": file, "text/x-go": file, "text/x-java": file,
                    "application/pdf": file,
                    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": file,
                    "application/epub+zip": file
                }},
                "responses": {
                    "200": {"description": "Acknowledged by the broker", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Written"}}}},
                    "400": err_resp("Malformed envelope, bad id or query string (the decoder's class)"),
                    "401": err_resp("Missing or wrong credential"),
                    "403": err_resp("The credential may not write this id, grant a principal of the acl, or publish a document without an acl"),
                    "413": err_resp("Body over ingest.max_body_bytes, or record over limits.max_value_bytes"),
                    "415": err_resp("Unsupported media type"),
                    "429": err_resp("Over the credential's rate or in-flight limit (Retry-After)"),
                    "503": err_resp("The broker did not acknowledge in time")
                }
            },
            "delete": {
                "summary": "Delete one document (a tombstone)",
                "security": security,
                "parameters": [id],
                "responses": {
                    "200": {"description": "Acknowledged by the broker", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Written"}}}},
                    "400": err_resp("Bad id"),
                    "401": err_resp("Missing or wrong credential"),
                    "403": err_resp("The credential may not delete, or not this id"),
                    "429": err_resp("Over the credential's rate or in-flight limit (Retry-After)"),
                    "503": err_resp("The broker did not acknowledge in time")
                }
            }
        },
        "/v1/documents:batch": {"post": {
            "summary": "Write many documents: NDJSON, one envelope (with its id) per line. Every line is checked first; one bad line refuses the whole batch and nothing is produced.",
            "security": security,
            "requestBody": {"required": true, "content": {"application/x-ndjson": {"schema": {"type": "string"}}}},
            "responses": {
                "200": {"description": "Every record acknowledged by the broker", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/BatchWritten"}}}},
                "400": err_resp("Refused lines (invalid_batch, with lines) or an empty batch"),
                "401": err_resp("Missing or wrong credential"),
                "403": err_resp("A line the credential may not write (forbidden, with lines); nothing was produced"),
                "413": err_resp("Body over ingest.max_body_bytes or more than ingest.max_batch_documents documents"),
                "415": err_resp("Not NDJSON"),
                "429": err_resp("Over the credential's rate or in-flight limit (Retry-After)"),
                "503": err_resp("The broker did not acknowledge every record in time (some may have been written; retrying is safe)")
            }
        }},
        "/healthz": {"get": {"summary": "Process is up", "responses": {"200": {"description": "ok"}}}},
        "/readyz": {"get": {"summary": "The broker answers and has the topic, and tokens can be verified; says how writers are identified (auth, auth_warnings)", "responses": {"200": {"description": "ready"}, "503": {"description": "not ready, with the reason"}}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "OpenMetrics text"}}}},
        "/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_documented_and_nothing_else() {
        let doc = document();
        let paths = doc["paths"].as_object().unwrap();
        let mut documented = Vec::new();
        for (path, ops) in paths {
            for method in ops.as_object().unwrap().keys() {
                documented.push((path.as_str(), method.as_str()));
            }
        }
        documented.sort();
        let mut routes = ROUTES.to_vec();
        routes.sort();
        assert_eq!(documented, routes);
    }
}
