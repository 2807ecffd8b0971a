"""Schemathesis hooks of tests/tests/api_fuzz_e2e.rs (loaded with SCHEMATHESIS_HOOKS).

Adds one check (every 4xx answer is JSON of the shape {"error": {"code": str, "message": str}})
and a serializer for the ingest service's NDJSON batch body.
"""

import schemathesis


@schemathesis.check
def error_shape(ctx, response, case):
    """Every 4xx answer carries the JSON error shape."""
    if not 400 <= response.status_code < 500:
        return
    try:
        body = response.json()
    except ValueError as e:  # not JSON at all (json.JSONDecodeError)
        raise AssertionError(
            f"{response.status_code} answer is not JSON ({e}): {response.text[:200]!r}"
        ) from e
    error = body.get("error") if isinstance(body, dict) else None
    if not (
        isinstance(error, dict)
        and isinstance(error.get("code"), str)
        and isinstance(error.get("message"), str)
    ):
        # a schemathesis check reports a failure by raising AssertionError
        raise AssertionError(  # noqa: TRY004
            f"{response.status_code} answer lacks the error shape: {response.text[:200]!r}"
        )


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    """The ingest service's batch body: a string as it is, anything else as JSON lines."""
    import json

    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, bytes):
        return value
    items = value if isinstance(value, list) else [value]
    return "\n".join(json.dumps(item) for item in items).encode("utf-8", "surrogatepass")
