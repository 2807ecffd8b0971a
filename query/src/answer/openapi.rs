//! `/v1/answer` in the node's OpenAPI document (`crate::openapi`): its request is the
//! retrieval request's schema plus the answer's own fields, so the two cannot drift apart.

use serde_json::{json, Value};

/// The answer's own request fields.
fn answer_fields() -> Value {
    json!({
        "stream": {"type": "boolean", "default": false, "description": "Server-sent events: retrieval, delta (each piece of text), then done (the whole answer with its citations) or error."},
        "max_tokens": {"type": "integer", "minimum": 1, "description": "The most tokens of the answer (at most, and by default, [llm] max_tokens)."},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2, "description": "Default [llm] temperature (0)."},
        "grounding": {"type": "boolean", "description": "Check each cited statement against its passages with a second model call (default [answer] grounding)."},
        "wait_for": {"type": "array", "maxItems": 64, "description": "Kafka records that must be searchable before the retrieval (read-your-writes), as the ingest service reports them; 504 timeout when one is not in time.", "items": {
            "type": "object", "required": ["topic", "partition", "offset"], "additionalProperties": false, "properties": {
                "topic": {"type": "string", "minLength": 1},
                "partition": {"type": "integer", "minimum": 0},
                "offset": {"type": "integer", "minimum": 0},
                "timeout_ms": {"type": "integer", "minimum": 0, "maximum": 120000, "default": 10000}
            }
        }}
    })
}

/// The `AnswerRequest` schema, made from `retrieve` (the `RetrieveRequest` schema).
pub fn request_schema(retrieve: &Value) -> Value {
    let mut s = retrieve.clone();
    if let (Some(props), Some(own)) = (
        s["properties"].as_object_mut(),
        answer_fields().as_object().cloned(),
    ) {
        props.extend(own);
        if let Some(q) = props.get_mut("query") {
            q["description"] =
                json!("The question. Not blank; at most query.max_query_chars characters.");
        }
        if let Some(k) = props.get_mut("k") {
            k["description"] = json!("Passages retrieved (default [answer] k = 8).");
        }
        if let Some(p) = props.get_mut("pack") {
            p["description"] = json!("The context budget and order (default [answer] context_tokens = 3000, pack_order).");
        }
    }
    s
}

fn mark() -> Value {
    json!({"type": "object", "properties": {
        "number": {"type": "integer"}, "start": {"type": "integer"}, "end": {"type": "integer"},
        "sentence": {"type": "integer"}
    }})
}

/// The `AnswerResponse` schema.
pub fn response_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "answer": {"type": "string", "description": "The model's answer with its [n] markers, or the refusal sentence."},
            "refused": {"type": "boolean"},
            "refusal_reason": {"type": "string", "enum": ["no_passages", "model"], "description": "no_passages: no passage was visible, the node refused without calling the model."},
            "question": {"type": "string"},
            "passages": {"type": "array", "description": "Every numbered passage of the prompt.", "items": {"type": "object", "properties": {
                "number": {"type": "integer"}, "doc_id": {"type": "string"}, "chunk_id": {"type": "string"},
                "chunk_ids": {"type": "array", "items": {"type": "string"}}, "title": {"type": "string"},
                "source": {"type": "string"}, "section": {"type": "array", "items": {"type": "string"}},
                "page_start": {"type": "integer"}, "page_end": {"type": "integer"},
                "char_start": {"type": "integer"}, "char_end": {"type": "integer"},
                "rank": {"type": "integer"}, "score": {"type": "number"}, "metadata": {"type": "object"},
                "text": {"type": "string"}, "cited": {"type": "boolean"}
            }}},
            "citations": {"type": "array", "items": mark(), "description": "Valid markers in order (character offsets)."},
            "invalid_citations": {"type": "array", "items": mark(), "description": "Markers naming no passage."},
            "sentences": {"type": "array", "items": {"type": "object", "properties": {
                "text": {"type": "string"}, "start": {"type": "integer"}, "end": {"type": "integer"},
                "cites": {"type": "array", "items": {"type": "integer"}}
            }}},
            "uncited_sentences": {"type": "array", "items": {"type": "integer"}, "description": "Indexes of sentences without a valid citation."},
            "grounding": {"type": "object", "properties": {
                "statements": {"type": "array", "items": {"type": "object", "properties": {
                    "sentence": {"type": "integer"}, "text": {"type": "string"},
                    "cites": {"type": "array", "items": {"type": "integer"}},
                    "supported": {"type": ["boolean", "null"]}
                }}},
                "error": {"type": "string"}
            }},
            "model": {"type": "string"},
            "finish_reason": {"type": "string"},
            "usage": {"type": "object", "properties": {
                "prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}
            }},
            "mode": {"type": "string"},
            "timings_ms": {"type": "object", "additionalProperties": {"type": "number"}},
            "index": {"type": "object"},
            "language": {"type": "object"},
            "degraded": {"type": "array"},
            "left_out": {"type": "array"}
        }
    })
}

/// The `/v1/answer` operation (without its security, which the document adds).
pub fn operation(err: &dyn Fn(&str) -> Value) -> Value {
    json!({
        "summary": "Answer a question from the retrieved passages with the configured language model, citing them",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AnswerRequest"}}}},
        "responses": {
            "200": {"description": "The answer (JSON), or with stream: server-sent events retrieval, delta…, done | error", "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/AnswerResponse"}},
                "text/event-stream": {"schema": {"type": "string"}}
            }},
            "400": err("Invalid request"),
            "413": err("Body too large"),
            "503": err("No language model is configured, an index is unavailable, the node is overloaded, or the model failed (code llm_timeout, llm_rate_limited, llm_server_error, llm_unavailable, llm_refused, llm_bad_response)"),
            "504": err("A wait_for offset was not searchable in time (code timeout)")
        }
    })
}
