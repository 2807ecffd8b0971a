//! The OpenAI-compatible routes in the node's OpenAPI document (`crate::openapi`): their
//! request, response and error schemas, as OpenAI's clients read them.

use serde_json::{json, Value};

/// OpenAI's error shape.
fn error(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OpenAIError"}}}})
}

/// The schemas these routes add.
pub fn schemas() -> Value {
    let part = json!({"type": "object", "required": ["type", "text"], "properties": {
        "type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}});
    json!({
        "OpenAIError": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["message", "type", "code"], "properties": {
                "message": {"type": "string"},
                "type": {"type": "string", "enum": ["invalid_request_error", "authentication_error", "permission_error", "rate_limit_error", "server_error"]},
                "param": {"type": ["string", "null"]},
                "code": {"type": "string", "description": "The node's error code (bad_request, model_not_found, unauthorized, llm_timeout ...)"}
            }}}},
        "Model": {"type": "object", "required": ["id", "object", "created", "owned_by"], "properties": {
            "id": {"type": "string", "description": "The assistant's name"},
            "object": {"type": "string", "enum": ["model"]},
            "created": {"type": "integer", "description": "When the node started (seconds since the epoch)"},
            "owned_by": {"type": "string", "enum": ["freshet"]},
            "description": {"type": "string"}
        }},
        "ModelList": {"type": "object", "required": ["object", "data"], "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": {"$ref": "#/components/schemas/Model"}}
        }},
        "ChatCompletionRequest": {
            "type": "object",
            "required": ["model", "messages"],
            "description": "Unsupported parameters (tools, tool_choice, functions, function_call, n other than 1, logprobs, top_logprobs, response_format other than text, audio, modalities other than text, prediction, web_search_options) are 400s; others (top_p, frequency_penalty, presence_penalty, seed, stop, user, metadata, store, logit_bias ...) are ignored.",
            "properties": {
                "model": {"type": "string", "minLength": 1, "description": "An assistant of GET /v1/models; 404 model_not_found otherwise."},
                "messages": {"type": "array", "minItems": 1, "description": "The last one is the user's question; earlier user and assistant turns are the conversation; system and developer messages are ignored (the node's instructions are fixed).", "items": {
                    "type": "object", "required": ["role"], "properties": {
                        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant"]},
                        "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": part}, {"type": "null"}]}
                    }}},
                "stream": {"type": ["boolean", "null"], "default": false},
                "stream_options": {"type": ["object", "null"], "properties": {"include_usage": {"type": ["boolean", "null"]}}},
                "max_tokens": {"type": ["integer", "null"], "minimum": 1, "description": "At most, and by default, [llm] max_tokens."},
                "max_completion_tokens": {"type": ["integer", "null"], "minimum": 1, "description": "As max_tokens; wins when both are sent."},
                "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
                "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 1},
                "freshet": {"type": ["object", "null"], "description": "Further /v1/answer fields (filter, k, mode, principals, grounding ...) beside the assistant's own; not query, history, stream, wait_for, max_tokens, temperature, nor a field the assistant sets."}
            }
        },
        "ChatCompletion": {"type": "object", "required": ["id", "object", "created", "model", "choices"], "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["chat.completion"]},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {"type": "array", "items": {"type": "object", "required": ["index", "message", "finish_reason"], "properties": {
                "index": {"type": "integer"},
                "message": {"type": "object", "required": ["role", "content"], "properties": {
                    "role": {"type": "string", "enum": ["assistant"]},
                    "content": {"type": "string", "description": "The answer with its [n] markers, or the refusal sentence."}
                }},
                "finish_reason": {"type": "string", "enum": ["stop", "length", "content_filter"]}
            }}},
            "usage": {"type": ["object", "null"], "properties": {
                "prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}}},
            "freshet": {"$ref": "#/components/schemas/AnswerResponse", "description": "The /v1/answer response without answer (the message's content): citations, passages, flags, index commit."}
        }}
    })
}

fn common(mut responses: Value) -> Value {
    let r = responses.as_object_mut().expect("an object");
    r.insert("401".into(), error("Missing or invalid credential"));
    r.insert(
        "429".into(),
        error("Over the credential's rate or concurrency limit (Retry-After)"),
    );
    responses
}

/// The paths these routes add.
pub fn paths() -> Value {
    let security = json!([{"bearer": []}, {"apiKey": []}, {"jwt": []}]);
    json!({
        "/v1/models": {"get": {
            "summary": "The assistants, as OpenAI models",
            "security": security,
            "responses": common(json!({"200": {"description": "Every assistant", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ModelList"}}}}}))
        }},
        "/v1/models/{model}": {"get": {
            "summary": "One assistant",
            "security": security,
            "parameters": [{"name": "model", "in": "path", "required": true, "schema": {"type": "string"}}],
            "responses": common(json!({
                "200": {"description": "The assistant", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Model"}}}},
                "404": error("No assistant has this name (code model_not_found)")
            }))
        }},
        "/v1/chat/completions": {"post": {
            "summary": "An answer with citations, as an OpenAI chat completion",
            "description": "The assistant named by model answers the last user message with /v1/answer (docs/integrations.md). The citations are [n] markers in the content and the freshet member. With stream, chat.completion.chunk events (data: only), the last choice chunk with finish_reason and freshet, a usage chunk with stream_options.include_usage, then data: [DONE]; a model failing mid-stream sends {\"error\": ...} and no [DONE].",
            "security": security,
            "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletionRequest"}}}},
            "responses": common(json!({
                "200": {"description": "The completion (or its chunks with stream)", "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletion"}},
                    "text/event-stream": {"schema": {"type": "string"}}
                }},
                "400": error("A body, message or parameter the node does not accept (param names it)"),
                "403": error("The request names principals its credential does not hold"),
                "404": error("No assistant has this name (code model_not_found)"),
                "413": error("The body is over query.max_body_bytes"),
                "503": error("No [llm], an index or the model unavailable, or overloaded")
            }))
        }}
    })
}
