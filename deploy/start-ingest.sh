#!/usr/bin/env bash
# Start the ingest service (`freshet-ingest`, docs/ingest.md) in the background (pid file, log
# under $FRESHET_RUN_DIR) and wait until it listens. The binary: $FRESHET_INGEST_BIN, else
# target/{debug,release}/freshet-ingest; $FRESHET_INGEST_LISTEN (default 127.0.0.1:8090),
# $FRESHET_INGEST_START_TIMEOUT (default 30 s). FRESHET_CONFIG and FRESHET_<SECTION>_<KEY> pass
# through; the broker defaults to the local one (127.0.0.1:$FRESHET_KAFKA_PORT).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export FRESHET_KAFKA_BROKERS="${FRESHET_KAFKA_BROKERS:-127.0.0.1:${FRESHET_KAFKA_PORT:-9092}}"
start_http_service ingest freshet-ingest FRESHET_INGEST 127.0.0.1:8090 30 "ingest service" \
    "API: PUT/DELETE /v1/documents/{id}, POST /v1/documents:batch, docs: /openapi.json"
