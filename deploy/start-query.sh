#!/usr/bin/env bash
# Start the query node (`freshet-query`) in the background (pid file, log under $FRESHET_RUN_DIR)
# and wait until it listens. The binary: $FRESHET_QUERY_BIN, else target/{debug,release}/
# freshet-query; $FRESHET_QUERY_LISTEN (default 127.0.0.1:8080), $FRESHET_QUERY_START_TIMEOUT
# (default 60 s). FRESHET_CONFIG and FRESHET_<SECTION>_<KEY> pass through.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_http_service query freshet-query FRESHET_QUERY 127.0.0.1:8080 60 "query node" \
    "API: POST /v1/retrieve, docs: /openapi.json"
