//! The OpenAPI 3.1 document served at `/openapi.json`. Kept next to the request/response types
//! it describes (`request.rs`, `retrieve.rs`); a unit test checks that every request field
//! accepted by the parser is documented.

use serde_json::{json, Value};

/// The OpenAPI document: the routes ([`paths`]) and their schemas ([`components`]).
pub fn document() -> Value {
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "freshet query node",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Hybrid retrieval (BM25 + vectors) over the indexes the freshet pipeline keeps fresh."
        },
        "components": components(),
        "paths": paths(),
    });
    // The parsers read an optional field given as null as left out.
    nullable_optionals(&mut doc["components"]["schemas"]["RetrieveRequest"]);
    let answer =
        crate::answer::openapi::request_schema(&doc["components"]["schemas"]["RetrieveRequest"]);
    doc["components"]["schemas"]["AnswerRequest"] = answer;
    nullable_optionals(&mut doc["components"]["schemas"]["AnswerRequest"]);
    doc["components"]["schemas"]["AnswerResponse"] = crate::answer::openapi::response_schema();
    doc["paths"]["/v1/answer"] =
        json!({"post": secured(crate::answer::openapi::operation(&err_resp))});
    if let (Some(schemas), Some(own)) = (
        doc["components"]["schemas"].as_object_mut(),
        crate::openai::openapi::schemas().as_object().cloned(),
    ) {
        schemas.extend(own);
    }
    if let (Some(paths), Some(own)) = (
        doc["paths"].as_object_mut(),
        crate::openai::openapi::paths().as_object().cloned(),
    ) {
        paths.extend(own);
    }
    nullable_optionals(
        &mut doc["paths"]["/pathway/v1/retrieve"]["post"]["requestBody"]["content"]
            ["application/json"]["schema"],
    );
    doc
}

/// Lets every optional property of `schema` (and of the objects inside it) be null.
fn nullable_optionals(schema: &mut Value) {
    if let Some(options) = schema.get_mut("oneOf").and_then(Value::as_array_mut) {
        options.iter_mut().for_each(nullable_optionals);
    }
    let required: Vec<Value> = schema["required"].as_array().cloned().unwrap_or_default();
    let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, prop) in props.iter_mut() {
        nullable_optionals(prop);
        if required.contains(&Value::from(name.as_str())) {
            continue;
        }
        if let Some(options) = prop.get_mut("oneOf").and_then(Value::as_array_mut) {
            options.push(json!({"type": "null"}));
        }
        if let Some(values) = prop.get_mut("enum").and_then(Value::as_array_mut) {
            values.push(Value::Null);
        }
        match prop.get_mut("type") {
            Some(Value::Array(types)) if !types.contains(&json!("null")) => {
                types.push(json!("null"))
            }
            Some(t @ Value::String(_)) => *t = json!([t.take(), "null"]),
            _ => {}
        }
    }
}

/// A response with the error body.
fn err_resp(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

/// A 429 with its `Retry-After` header.
fn too_many() -> Value {
    let mut r = err_resp(
        "Over the credential's request rate or concurrency limit (code too_many_requests)",
    );
    r["headers"] = json!({"Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer", "minimum": 1}}});
    r
}

/// The credentials of an API route, and the answers authentication adds to its responses.
fn secured(mut op: Value) -> Value {
    op["security"] = json!([{"bearer": []}, {"apiKey": []}, {"jwt": []}]);
    let r = &mut op["responses"];
    r["401"] = err_resp("Missing or invalid credential (API key or JWT), or both headers sent");
    r["403"] =
        err_resp("The request names principals its credential does not hold (code forbidden)");
    r["429"] = too_many();
    op
}

/// Security schemes and the request, response and error schemas.
fn components() -> Value {
    let stage = json!({
        "type": ["object", "null"],
        "properties": {"rank": {"type": "integer"}, "score": {"type": "number"}}
    });
    json!({
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "description": "An API key of query.keys or query.api_keys"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "An API key of query.keys or query.api_keys"},
            "jwt": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT", "description": "A token of the query.jwt issuer: iss, aud, exp (nbf) checked; the groups claim gives the principals"},
            "adminKey": {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "A key of query.admin_keys (also as Authorization: Bearer), for /metrics and /v1/status"}
        },
        "schemas": {
            "Error": {
                "type": "object",
                "properties": {"error": {"type": "object", "properties": {
                    "code": {"type": "string", "enum": ["bad_request", "unauthorized", "forbidden", "too_many_requests", "not_found", "method_not_allowed", "too_large", "unavailable", "timeout", "overloaded", "internal", "llm_timeout", "llm_rate_limited", "llm_server_error", "llm_unavailable", "llm_refused", "llm_bad_response", "llm_error"]},
                    "message": {"type": "string"}
                }}}
            },
            "RetrieveRequest": {
                "type": "object",
                "required": ["query"],
                "additionalProperties": false,
                "properties": {
                    "query": {"type": "string", "minLength": 1, "description": "Searched as plain text: no query syntax. Not blank; at most query.max_query_chars characters (4096)."},
                    "k": {"type": "integer", "minimum": 1, "description": "Results wanted (default query.default_k, at most query.max_k)."},
                    "mode": {"type": "string", "enum": ["hybrid", "bm25", "vector"], "default": "hybrid"},
                    "filter": {
                        "type": "object",
                        "description": "Metadata conditions, all must hold, applied inside both searches: {\"key\": scalar} | {\"key\": {\"eq\": scalar}} | {\"key\": {\"in\": [scalars]}}.",
                        "additionalProperties": true
                    },
                    "principals": {"type": "array", "items": {"type": "string"}, "description": "Narrows the principals of the credential (a chunk is visible if its document's acl is empty or intersects them): each must be held by the API key or token, else 403. Omitted: all of the credential's principals. [] : public documents only. On a node without authentication: public only (403 for any principal) unless query.trust_request_principals."},
                    "bm25_top_k": {"type": "integer", "minimum": 1, "description": "BM25 candidates (default query.route_top_k = 50)."},
                    "vector_top_k": {"type": "integer", "minimum": 1, "description": "Vector candidates (default 50)."},
                    "fusion": {"type": "object", "additionalProperties": false, "properties": {
                        "method": {"type": "string", "enum": ["rrf", "weighted", "dbsf", "tmm"], "description": "rrf: reciprocal ranks; weighted: per-route min-max normalised scores; dbsf: per-route mean ± 3σ; tmm: per-route theoretical minimum (BM25 0, cosine -1) to the list maximum. Weights apply to the last three."},
                        "rrf_k": {"type": "number", "default": 60},
                        "bm25_weight": {"type": "number"},
                        "vector_weight": {"type": "number"}
                    }},
                    "rerank": {"oneOf": [{"type": "boolean"}, {"type": "object", "properties": {"candidates": {"type": "integer", "minimum": 1}}}], "description": "Cross-encoder rerank of the top fused candidates."},
                    "expand": {"oneOf": [{"type": "boolean"}, {"type": "object", "additionalProperties": false, "properties": {
                        "top_m": {"type": "integer", "minimum": 1},
                        "window": {"type": "integer", "minimum": 1, "maximum": 2},
                        "min_vector_score": {"type": "number", "description": "Expand only results at least this similar (cosine)."}
                    }}], "description": "Add ±window neighbouring chunks of the same section to the top M results and merge contiguous spans."},
                    "parents": {"type": "boolean", "description": "Parent-child indexes: return the parents of the matching children."},
                    "highlight": {"type": "boolean", "description": "Each result carries `highlights`: where the query's terms occur in its `text`, found with the BM25 index's own analyzers (English stems; Chinese, Japanese and Korean words). Default false."},
                    "pack": {"type": "object", "required": ["budget_tokens"], "additionalProperties": false, "properties": {
                        "budget_tokens": {"type": "integer", "minimum": 1},
                        "order": {"type": "string", "enum": ["relevance_first", "edges_first"]}
                    }, "description": "Pack whole results into a cited context within a token budget (model tokenizer)."},
                    "allow_partial": {"type": "boolean", "description": "Hybrid only: if the vector route is unavailable (Milvus down), answer from BM25 alone and list it under `degraded` instead of a 503. Default: the server's `allow_partial` (true)."},
                    "language": {"type": "string", "description": "The query's language as an ISO 639-1 or 639-3 code (e.g. \"zh\"), when the caller knows it; default: detected from the query (script for Chinese, Japanese, Korean; whatlang for the rest)."},
                    "language_routing": {"type": "string", "enum": ["auto", "all"], "description": "auto: a hybrid retrieval runs BM25 alone for a query in a language the embedding model does not cover, and lists the vector route under `left_out`; all: both routes always run. Default: the server's `language_routing` (auto)."},
                    "transform": {"type": "object", "additionalProperties": false, "properties": {
                        "multi_query": {"type": "integer", "minimum": 0, "description": "Rewrites of the question the language model writes; each is searched beside the question (same filter and principals) and the rankings are fused with RRF. At most the server's `transform.max_multi_query`. Default: the server's `transform.multi_query` (0)."},
                        "hyde": {"type": "string", "enum": ["off", "on", "auto"], "description": "HyDE: the vector route embeds a hypothetical answer passage the language model writes; BM25 keeps the question's words. auto: for analytical questions only (docs/query-api.md). Default: the server's `transform.hyde` (off)."}
                    }, "description": "Query transformation by the server's language model ([llm]); a node without one answers 400."},
                    "history": {"type": "array", "description": "The conversation's previous turns, oldest first: the question is rewritten into a standalone question before retrieval (needs [llm]). At most `transform.max_history_turns` turns and `transform.max_history_chars` characters.", "items": {"type": "object", "required": ["role", "content"], "additionalProperties": false, "properties": {
                        "role": {"type": "string", "enum": ["user", "assistant"]},
                        "content": {"type": "string", "minLength": 1}
                    }}}
                }
            },
            "Hit": {
                "type": "object",
                "properties": {
                    "rank": {"type": "integer"},
                    "chunk_id": {"type": "string"},
                    "doc_id": {"type": "string"},
                    "kind": {"type": "string", "enum": ["leaf", "parent"]},
                    "parent_id": {"type": ["string", "null"]},
                    "title": {"type": "string"},
                    "source": {"type": "string"},
                    "section": {"type": "array", "items": {"type": "string"}},
                    "chunk_index": {"type": "integer"},
                    "char_start": {"type": "integer"},
                    "char_end": {"type": "integer"},
                    "text": {"type": "string"},
                    "metadata": {"type": "object"},
                    "page_start": {"type": "integer", "description": "First page of the passage (paged documents such as PDF)."},
                    "page_end": {"type": "integer", "description": "Last page of the passage (paged documents such as PDF)."},
                    "score": {"type": "number"},
                    "scores": {"type": "object", "properties": {"bm25": stage, "vector": stage, "fused": stage, "rerank": stage}},
                    "passage_chunk_ids": {"type": "array", "items": {"type": "string"}},
                    "matched_children": {"type": "array", "items": {"type": "string"}},
                    "highlights": {"type": "array", "description": "With `highlight`: character ranges [start, end) of `text` (Unicode scalar values, as char_start), sorted and merged, where a term of the query occurs.", "items": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 2, "maxItems": 2}}
                }
            },
            "RetrieveResponse": {
                "type": "object",
                "properties": {
                    "results": {"type": "array", "items": {"$ref": "#/components/schemas/Hit"}},
                    "context": {"type": "string"},
                    "citations": {"type": "array", "items": {"type": "object", "properties": {
                        "number": {"type": "integer"}, "doc_id": {"type": "string"}, "title": {"type": "string"},
                        "source": {"type": "string"}, "result_index": {"type": "integer"}, "tokens": {"type": "integer"},
                        "page_start": {"type": "integer"}, "page_end": {"type": "integer"}
                    }}},
                    "context_tokens": {"type": "integer"},
                    "mode": {"type": "string"},
                    "timings_ms": {"type": "object", "additionalProperties": {"type": "number"}},
                    "index": {"type": "object", "properties": {
                        "epoch": {"type": "integer"}, "committed_at_ms": {"type": "integer"}, "age_ms": {"type": "integer"},
                        "generation": {"type": "string", "description": "With a serving pointer: the index generation that answered the whole request"}
                    }},
                    "degraded": {"type": "array", "description": "Present only on a partial answer: the routes left out and why (vector: Milvus unavailable; transform: a language model step failed and the question was searched as it was).", "items": {"type": "object", "properties": {
                        "route": {"type": "string", "enum": ["vector", "transform"]}, "reason": {"type": "string"}
                    }}},
                    "transform": {"type": "object", "description": "Present only when the request was transformed: what the language model made of it.", "properties": {
                        "standalone_query": {"type": "string", "description": "With history: the standalone question searched, reranked and packed for."},
                        "queries": {"type": "array", "items": {"type": "string"}, "description": "Every query searched, the (standalone) question first, then the rewrites."},
                        "hyde": {"type": "string", "enum": ["off", "on", "auto"]},
                        "hyde_used": {"type": "boolean"},
                        "hyde_reason": {"type": "string", "description": "requested, off, auto: <the classifier's reason>, or failed: <class>."},
                        "hyde_passage": {"type": "string", "description": "The passage the vector route embedded."},
                        "cached": {"type": "array", "items": {"type": "string", "enum": ["condense", "multi_query", "hyde"]}, "description": "Steps answered from the cache."},
                        "llm_calls": {"type": "integer"}
                    }},
                    "language": {"type": "object", "description": "The query's language and whether the embedding model understands it.", "properties": {
                        "language": {"type": ["string", "null"], "description": "ISO 639-1 code (639-3 where there is none); null when it cannot be told."},
                        "detected_by": {"type": ["string", "null"], "enum": ["request", "script", "statistics", null]},
                        "model_covers": {"type": ["boolean", "null"], "description": "null when the model declares no languages or the query has no letters."}
                    }},
                    "left_out": {"type": "array", "description": "Present only when a hybrid retrieval left a route out on purpose (the query's language is not the model's): the route and why.", "items": {"type": "object", "properties": {
                        "route": {"type": "string", "enum": ["vector"]}, "reason": {"type": "string"}
                    }}}
                }
            }
        }
    })
}

/// The filter language of the Pathway routes.
const PATHWAY_FILTER: &str = "JMESPath subset: key == 'v', key == `json`, contains(key, 'v'); on path (the document source): path == 'v', contains(path, 'v') (a substring), globmatch('pattern', path); joined by &&";
/// The glob of the Pathway routes.
const PATHWAY_GLOB: &str = "A glob over the document source, as Pathway's globmatch: * and ? within a /-separated segment, ** any number of segments, [abc], {a,b}";

/// Pathway's statistics route (GET or POST, no body).
fn pathway_statistics() -> Value {
    secured(json!({
        "summary": "Pathway DocumentStore-compatible statistics: documents visible to the credential's principals, last commit and visibility times",
        "responses": {
            "200": {"description": "{file_count, last_modified, last_indexed} (Unix seconds)", "content": {"application/json": {"schema": {"type": "object", "properties": {
                "file_count": {"type": "integer", "description": "Documents the caller may see (each once, however many chunks it has)"}, "last_modified": {"type": "integer"}, "last_indexed": {"type": "integer"}
            }}}}},
            "503": err_resp("The index is not readable")
        }
    }))
}

/// `GET /v1/status` (the console's status page, docs/console.md).
fn status() -> Value {
    let health = json!({"type": "object", "properties": {"ok": {"type": "boolean"}, "detail": {"type": "string"}}});
    let mut op = secured(json!({
        "summary": "What an operator watches: documents, chunks and vectors in the indexes, the commit served and its age over the last minutes, Milvus and model health, and the pipeline's own status (consumer lag, freshness, dead letters by class with the latest ones, Kafka/Milvus/model health) fetched from query.pipeline_url. Needs an admin key when query.admin_keys is set, else a credential the API admits",
        "responses": {
            "200": {"description": "Status", "content": {"application/json": {"schema": {"type": "object", "required": ["generated_at_ms", "node", "pipeline"], "properties": {
                "generated_at_ms": {"type": "integer"},
                "node": {"type": "object", "properties": {
                    "ready": {"type": "boolean"}, "auth": {"type": "string"},
                    "auth_warnings": {"type": "array", "items": {"type": "string"}},
                    "index": {"type": "object", "properties": {
                        "epoch": {"type": "integer"}, "committed_at_ms": {"type": "integer"}, "visible_at_ms": {"type": "integer"},
                        "age_ms": {"type": ["integer", "null"]},
                        "offsets": {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": {"type": "integer"}}}
                    }},
                    "tantivy": {"type": "object", "properties": {"ok": {"type": "boolean"}, "detail": {"type": "string"}, "documents": {"type": ["integer", "null"]}, "chunks": {"type": ["integer", "null"]}}},
                    "milvus": {"type": "object", "properties": {"ok": {"type": "boolean"}, "detail": {"type": "string"}, "vectors": {"type": ["integer", "null"]}}},
                    "model": health,
                    "generation": {"type": ["object", "null"], "description": "With a serving pointer (docs/reindex.md): the generation served, one being opened, a pointer that cannot be read", "properties": {
                        "serving": {"type": ["string", "null"]}, "opening": {"type": "object"}, "pointer_error": {"type": "string"}
                    }},
                    "commit_ages": {"type": "object", "properties": {
                        "every_ms": {"type": "integer"}, "window_s": {"type": "integer"},
                        "samples": {"type": "array", "items": {"type": "object", "properties": {"t_ms": {"type": "integer"}, "epoch": {"type": "integer"}, "age_ms": {"type": "integer"}}}}
                    }}
                }},
                "pipeline": {"type": "object", "required": ["state", "url"], "properties": {
                    "state": {"type": "string", "enum": ["not_configured", "ok", "unreachable", "unauthorized", "error"]},
                    "url": {"type": "string"}, "detail": {"type": "string"},
                    "status": {"type": "object", "description": "The pipeline's GET /v1/status as it answered (docs/console.md)"}
                }}
            }}}}},
            "503": err_resp("The node runs all the retrievals it may (code overloaded, with Retry-After) or the count timed out")
        }
    }));
    op["security"] = json!([{"adminKey": []}, {"bearer": []}, {"apiKey": []}, {"jwt": []}]);
    op["responses"]["401"] = err_resp("query.admin_keys is set and the admin key is missing or wrong, or (without admin keys) the credential is missing or invalid");
    op
}

/// Every route.
fn paths() -> Value {
    json!({
        "/v1/retrieve": {"post": secured(json!({
            "summary": "Retrieve context for a query",
            "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RetrieveRequest"}}}},
            "responses": {
                "200": {"description": "Results", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RetrieveResponse"}}}},
                "400": err_resp("Invalid request"),
                "413": err_resp("Body too large"),
                "503": err_resp("An index or the reranker is unavailable, the request timed out (code timeout), or the node runs all the retrievals it may (code overloaded, with Retry-After)")
            }
        }))},
        "/pathway/v1/retrieve": {"post": secured(json!({
            "summary": "Pathway DocumentStore-compatible retrieve",
            "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["query"], "properties": {
                "query": {"type": "string", "minLength": 1}, "k": {"type": "integer", "minimum": 1},
                "metadata_filter": {"type": ["string", "null"], "description": PATHWAY_FILTER},
                "filepath_globpattern": {"type": ["string", "null"], "description": PATHWAY_GLOB}
            }}}}},
            "responses": {
                "200": {"description": "[{text, metadata, dist}]", "content": {"application/json": {"schema": {"type": "array", "items": {"type": "object", "properties": {
                    "text": {"type": "string"}, "metadata": {"type": "object"}, "dist": {"type": "number"}
                }}}}}},
                "400": err_resp("Invalid request"),
                "401": err_resp("Missing or wrong API key"),
                "413": err_resp("Body too large"),
                "503": err_resp("An index is unavailable, the request timed out (code timeout), or the node runs all the retrievals it may (code overloaded, with Retry-After)")
            }
        }))},
        "/v1/index": {"get": secured(json!({
            "summary": "The pipeline commit this node serves: Kafka offsets per topic and partition (the next offset to read), epoch, commit time, chunk count",
            "responses": {
                "200": {"description": "Index state", "content": {"application/json": {"schema": {"type": "object", "properties": {
                    "epoch": {"type": "integer"}, "committed_at_ms": {"type": "integer"}, "chunks": {"type": "integer"},
                    "offsets": {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": {"type": "integer"}}},
                    "index_id": {"type": "string", "description": "The id binding the tantivy index and the Milvus collection"},
                    "generation": {"type": "string", "description": "With a serving pointer: the index generation served"},
                    "milvus_collection": {"type": "string"},
                    "opening": {"type": "object", "description": "A generation the pointer names that the node is opening before it switches, and what it waits for"},
                    "pointer_error": {"type": "string", "description": "Why the serving pointer cannot be read (the node keeps serving)"}
                }}}}},
                "503": err_resp("The index is not open")
            }
        }))},
        "/v1/index/wait": {"get": secured(json!({
            "summary": "Wait until a Kafka record is searchable: answers once the commit this node serves has a next offset above `offset` for the partition (the ingest service answers every write with its topic, partition and offset)",
            "parameters": [
                {"name": "topic", "in": "query", "required": true, "schema": {"type": "string", "minLength": 1}},
                {"name": "partition", "in": "query", "required": true, "schema": {"type": "integer", "minimum": 0}},
                {"name": "offset", "in": "query", "required": true, "schema": {"type": "integer", "minimum": 0}},
                {"name": "timeout_ms", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 0, "maximum": 120000, "default": 10000}}
            ],
            "responses": {
                "200": {"description": "Searchable", "content": {"application/json": {"schema": {"type": "object", "properties": {
                    "topic": {"type": "string"}, "partition": {"type": "integer"}, "offset": {"type": "integer"},
                    "committed_offset": {"type": "integer", "description": "The served next offset of the partition (above offset)."},
                    "epoch": {"type": "integer"}, "committed_at_ms": {"type": "integer"}, "waited_ms": {"type": "integer"}
                }}}}},
                "400": err_resp("Missing or invalid parameter"),
                "504": err_resp("Not searchable within timeout_ms (code timeout)")
            }
        }))},
        "/v1/documents/{doc_id}/chunks": {"get": secured(json!({
            "summary": "A document's chunks in order (a page of `limit` leaf chunks from position `from`), or with `around` one chunk with `neighbours` chunks of its kind on either side; only what the credential's principals may see. A document (or chunk) the caller may not see answers 404 exactly as one that does not exist",
            "parameters": [
                {"name": "doc_id", "in": "path", "required": true, "schema": {"type": "string", "minLength": 1}, "description": "The document id (percent-encode `/`)"},
                {"name": "around", "in": "query", "required": false, "schema": {"type": "string", "minLength": 1}, "description": "A chunk id of the document"},
                {"name": "neighbours", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 0, "maximum": crate::documents::MAX_NEIGHBOURS, "default": 1}},
                {"name": "from", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 0, "maximum": u32::MAX, "default": 0}},
                {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": crate::documents::MAX_LIMIT, "default": crate::documents::DEFAULT_LIMIT}}
            ],
            "responses": {
                "200": {"description": "The chunks", "content": {"application/json": {"schema": {"type": "object", "properties": {
                    "doc_id": {"type": "string"}, "title": {"type": "string"}, "source": {"type": "string"}, "metadata": {"type": "object"},
                    "chunks": {"type": "array", "items": {"type": "object", "properties": {
                        "chunk_id": {"type": "string"}, "kind": {"type": "string", "enum": ["leaf", "parent"]}, "index": {"type": "integer"},
                        "parent_id": {"type": ["string", "null"]}, "section": {"type": "array", "items": {"type": "string"}},
                        "char_start": {"type": "integer"}, "char_end": {"type": "integer"},
                        "page_start": {"type": "integer"}, "page_end": {"type": "integer"}, "text": {"type": "string"}
                    }}},
                    "total_chunks": {"type": "integer", "description": "Leaf chunks of the document visible to the caller"},
                    "next_from": {"type": "integer", "description": "The `from` of the next page, when chunks remain"},
                    "index": {"type": "object", "description": "The index commit read", "properties": {
                        "epoch": {"type": "integer"}, "committed_at_ms": {"type": "integer"}, "age_ms": {"type": "integer"},
                        "generation": {"type": "string"}
                    }}
                }}}}},
                "400": err_resp("Invalid parameter"),
                "404": err_resp("No such document or chunk visible to the caller (code not_found)"),
                "503": err_resp("The index is not open, the request timed out (code timeout), or the node runs all the retrievals it may (code overloaded, with Retry-After)")
            }
        }))},
        "/v1/status": {"get": status()},
        "/pathway/v1/statistics": {"get": pathway_statistics(), "post": pathway_statistics()},
        "/pathway/v1/inputs": {"post": secured(json!({
            "summary": "Pathway DocumentStore-compatible inputs: the metadata of each document visible to the credential's principals that matches the filters (path, doc_id, title and its own metadata), sorted by doc_id",
            "requestBody": {"required": false, "content": {"application/json": {"schema": {"type": "object", "properties": {
                "metadata_filter": {"type": ["string", "null"], "description": PATHWAY_FILTER},
                "filepath_globpattern": {"type": ["string", "null"], "description": PATHWAY_GLOB},
                "return_status": {"type": ["boolean", "null"], "description": "Adds _indexing_status (INDEXED) to each document"}
            }}}}},
            "responses": {
                "200": {"description": "[{path, doc_id, title, ...}]", "content": {"application/json": {"schema": {"type": "array", "items": {"type": "object", "properties": {
                    "path": {"type": "string"}, "doc_id": {"type": "string"}, "title": {"type": "string"}, "_indexing_status": {"type": "string"}
                }}}}}},
                "400": err_resp("Invalid request"),
                "413": err_resp("Body too large"),
                "503": err_resp("The index is not readable")
            }
        }))},
        "/healthz": {"get": {"summary": "Process is up", "responses": {"200": {"description": "ok"}}}},
        "/readyz": {"get": {"summary": "Both indexes reachable and, with a jwks_url, its keys fetched (jwks); also how callers are authenticated (auth: keys, jwt, keys+jwt, trusted_proxy, none) and auth_warnings", "responses": {"200": {"description": "ready"}, "503": {"description": "not ready, with reasons"}}}},
        "/metrics": {"get": {"summary": "Prometheus metrics (on query.admin_listen instead when set)", "security": [{}, {"adminKey": []}], "responses": {"200": {"description": "OpenMetrics text"}, "401": err_resp("query.admin_keys is set and the key is missing or wrong")}}},
        "/v1/deletes": {"get": deletes()},
        "/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}}
    })
}

/// `GET /v1/deletes`: the delete receipts (docs/query-api.md, "Delete receipts").
fn deletes() -> Value {
    let source = json!({"type": "object", "required": ["topic", "partition", "offset"], "properties": {
        "topic": {"type": "string"}, "partition": {"type": "integer"}, "offset": {"type": "integer"}
    }});
    let receipt = json!({"type": "object",
    "required": ["seq", "doc_id", "cause", "chunks_removed", "commit", "completed_at_ms", "chunks_now"],
    "properties": {
        "seq": {"type": "integer", "description": "Place in the receipts log; pass the last as after for the next page"},
        "doc_id": {"type": "string"},
        "cause": {"type": "string", "enum": ["delete", "refused"]},
        "class": {"type": "string", "description": "The dead-letter class of a refusal"},
        "source": source,
        "source_timestamp_ms": {"type": "integer", "description": "Kafka timestamp of that record"},
        "chunks_removed": {"type": "integer", "description": "Chunks the commit removed (0: the index held none of the document)"},
        "commit": {"type": "object", "required": ["opstamp", "epoch"], "properties": {
            "opstamp": {"type": "integer", "description": "tantivy's opstamp of the commit that made the removal durable in both indexes"},
            "epoch": {"type": "integer"}
        }},
        "completed_at_ms": {"type": "integer", "description": "When that commit was made (ms since the Unix epoch)"},
        "chunks_now": {"type": "integer", "description": "Chunks of the document in the commit served: 0 while it stays gone"}
    }});
    let q = |name: &str, schema: Value, description: &str| json!({"name": name, "in": "query", "required": false, "schema": schema, "description": description});
    json!({
        "summary": "Delete receipts: for each document removed from both indexes, the record that asked for it, the commit that made it durable and when (admin keys only; on query.admin_listen instead when set)",
        "security": [{"adminKey": []}],
        "parameters": [
            q("doc_id", json!({"type": "string", "minLength": 1}), "Only this document's receipts"),
            q("since", json!({"type": "string"}), "Only receipts completed at or after this time: milliseconds since the Unix epoch or an RFC 3339 time"),
            q("after", json!({"type": "integer", "minimum": 0}), "Only receipts after this seq (a previous page's next_after)"),
            q("limit", json!({"type": "integer", "minimum": 1, "maximum": crate::deletes::MAX_LIMIT, "default": crate::deletes::DEFAULT_LIMIT}), "Most receipts answered, oldest first")
        ],
        "responses": {
            "200": {"description": "Receipts up to the commit served", "content": {"application/json": {"schema": {"type": "object", "required": ["receipts", "index"], "properties": {
                "receipts": {"type": "array", "items": receipt},
                "next_after": {"type": "integer", "description": "The after of the next page, when this page is full"},
                "index": {"type": "object", "properties": {"epoch": {"type": "integer"}, "committed_at_ms": {"type": "integer"}, "age_ms": {"type": "integer"}}}
            }}}}},
            "400": err_resp("Invalid query string"),
            "401": err_resp("The admin key is missing or wrong"),
            "403": err_resp("The node has no query.admin_keys: the route is refused"),
            "404": err_resp("The node is a query replica: receipts are served by a node that reads the pipeline's index"),
            "500": err_resp("The receipts log cannot be read (damaged)"),
            "503": err_resp("The index is not readable")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_field_is_documented() {
        let doc = document();
        let props = doc["components"]["schemas"]["RetrieveRequest"]["properties"]
            .as_object()
            .unwrap();
        // Each documented field must be accepted by the parser, and an undocumented one is
        // rejected (deny_unknown_fields): the two lists cannot drift apart silently.
        for name in props.keys() {
            let body = match name.as_str() {
                "query" => json!({"query": "q"}),
                "mode" => json!({"query": "q", name: "bm25"}),
                "filter" | "fusion" => json!({"query": "q", name: {}}),
                "principals" => json!({"query": "q", name: []}),
                "rerank" | "expand" | "parents" | "allow_partial" | "highlight" => {
                    json!({"query": "q", name: false})
                }
                "pack" => json!({"query": "q", name: {"budget_tokens": 10}}),
                "language" => json!({"query": "q", name: "zh"}),
                "language_routing" => json!({"query": "q", name: "all"}),
                "transform" => json!({"query": "q", name: {"multi_query": 0, "hyde": "off"}}),
                "history" => json!({"query": "q", name: [{"role": "user", "content": "hi"}]}),
                _ => json!({"query": "q", name: 5}),
            };
            crate::request::parse(body.to_string().as_bytes())
                .unwrap_or_else(|e| panic!("documented field {name} rejected: {}", e.0));
        }
        assert!(crate::request::parse(br#"{"query":"q","undocumented":1}"#).is_err());
        assert_eq!(props.len(), 18);
    }

    /// The answer's request is the retrieval's plus its own fields, each accepted by its
    /// parser.
    #[test]
    fn every_answer_field_is_documented_and_accepted() {
        let doc = document();
        let props = doc["components"]["schemas"]["AnswerRequest"]["properties"]
            .as_object()
            .unwrap();
        let retrieve = doc["components"]["schemas"]["RetrieveRequest"]["properties"]
            .as_object()
            .unwrap();
        assert!(retrieve.keys().all(|k| props.contains_key(k)));
        let cfg = crate::answer::config::AnswerConfig::default();
        for name in [
            "stream",
            "max_tokens",
            "temperature",
            "grounding",
            "wait_for",
        ] {
            let value = match name {
                "stream" | "grounding" => json!(true),
                "temperature" => json!(0.5),
                "wait_for" => json!([{"topic": "t", "partition": 0, "offset": 1}]),
                _ => json!(5),
            };
            assert!(props.contains_key(name), "{name} is not documented");
            let body = json!({"query": "q", name: value}).to_string();
            crate::answer::request::parse(body.as_bytes(), &cfg, 100)
                .unwrap_or_else(|e| panic!("documented field {name} rejected: {}", e.0));
            let null = json!({"query": "q", name: null}).to_string();
            assert!(
                crate::answer::request::parse(null.as_bytes(), &cfg, 100).is_ok(),
                "{name}"
            );
        }
        assert_eq!(props.len(), retrieve.len() + 5);
    }

    #[test]
    fn every_api_route_documents_its_credentials_and_refusals() {
        let doc = document();
        for (path, method) in [
            ("/v1/retrieve", "post"),
            ("/v1/answer", "post"),
            ("/pathway/v1/retrieve", "post"),
            ("/pathway/v1/statistics", "get"),
            ("/pathway/v1/inputs", "post"),
            ("/v1/index", "get"),
            ("/v1/index/wait", "get"),
            ("/v1/documents/{doc_id}/chunks", "get"),
        ] {
            let op = &doc["paths"][path][method];
            assert_eq!(op["security"].as_array().map(Vec::len), Some(3), "{path}");
            for status in ["200", "401", "403", "429"] {
                assert!(op["responses"][status].is_object(), "{path} {status}");
            }
            assert!(op["responses"]["429"]["headers"]["Retry-After"].is_object());
        }
    }

    /// Schemathesis found null accepted for optional fields the document did not let be null:
    /// every optional field documented as nullable is accepted as null, a required one is not.
    #[test]
    fn optional_fields_may_be_null() {
        let doc = document();
        let props = doc["components"]["schemas"]["RetrieveRequest"]["properties"]
            .as_object()
            .unwrap();
        for (name, prop) in props {
            let nullable = prop["type"]
                .as_array()
                .is_some_and(|t| t.contains(&json!("null")))
                || prop["oneOf"]
                    .as_array()
                    .is_some_and(|o| o.contains(&json!({"type": "null"})));
            let parsed =
                crate::request::parse(json!({"query": "q", name: null}).to_string().as_bytes());
            if name == "query" {
                assert!(!nullable);
            } else {
                assert!(nullable, "{name} is not nullable");
                assert!(parsed.is_ok(), "{name}: null rejected");
            }
        }
        assert_eq!(
            doc["components"]["schemas"]["RetrieveRequest"]["properties"]["mode"]["enum"][3],
            Value::Null
        );
        assert_eq!(
            doc["components"]["schemas"]["RetrieveRequest"]["properties"]["pack"]["properties"]
                ["budget_tokens"]["type"],
            "integer"
        );
    }

    /// Every route of the router, with each of its methods, is documented (schemathesis found
    /// the statistics route and a 401 of the Pathway route missing).
    #[test]
    fn every_route_is_documented() {
        let doc = document();
        for (path, method) in [
            ("/v1/retrieve", "post"),
            ("/v1/answer", "post"),
            ("/v1/index", "get"),
            ("/v1/index/wait", "get"),
            ("/v1/documents/{doc_id}/chunks", "get"),
            ("/pathway/v1/retrieve", "post"),
            ("/pathway/v1/statistics", "get"),
            ("/pathway/v1/statistics", "post"),
            ("/pathway/v1/inputs", "post"),
            ("/healthz", "get"),
            ("/readyz", "get"),
            ("/metrics", "get"),
            ("/v1/deletes", "get"),
            ("/openapi.json", "get"),
        ] {
            let op = &doc["paths"][path][method];
            assert!(op.is_object(), "{method} {path} is not documented");
            if op.get("security").is_some() {
                assert!(
                    op["responses"]["401"].is_object(),
                    "{method} {path}: no 401"
                );
            }
        }
    }
}
