#!/usr/bin/env bash
# Start the query node (`freshet-query`) in the background (pid file, log under $FRESHET_RUN_DIR)
# and wait until it listens. The binary: $FRESHET_QUERY_BIN, else target/{debug,release}/
# freshet-query; $FRESHET_QUERY_LISTEN (default 127.0.0.1:8080), $FRESHET_QUERY_START_TIMEOUT
# (default 60 s). FRESHET_CONFIG and FRESHET_<SECTION>_<KEY> pass through.
# Several nodes on one machine (query replicas, docs/replicas.md) each need a name of their own
# for their pid file and log: $FRESHET_QUERY_NAME (default "query"; stop-query.sh takes the same).
#   FRESHET_QUERY_NAME=replica1 FRESHET_QUERY_LISTEN=127.0.0.1:8081 FRESHET_REPLICA_ENABLED=true \
#     FRESHET_REPLICA_PATH=~/.freshet/run/replica1 deploy/start-query.sh
# A replica started beside the local pipeline (running) gets FRESHET_REPLICA_STAGE=false unless
# that is set.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

name=$(query_node_name)
if [[ "${FRESHET_REPLICA_ENABLED:-false}" == true ]]; then
    # A replica reads the changelog from the broker as the pipeline's workers read the documents.
    local_broker_fetch_settings
    # Beside the local stack's running pipeline a replica shares its cores: building a batch's
    # segment during the pipeline's commit ([replica] stage) slows the pipeline and its node more
    # than it speeds the replica (docs/replicas.md), so it builds after the marker there.
    if [[ -z "${FRESHET_REPLICA_STAGE:-}" ]] && pidfile_running "$FRESHET_RUN_DIR/pids/pipeline.pid" freshet; then
        export FRESHET_REPLICA_STAGE=false
        log "replica beside the running pipeline: [replica] stage = false (FRESHET_REPLICA_STAGE=true keeps it on)"
    fi
fi
what="query node"
[[ "$name" == query ]] || what="query node $name"
start_http_service "$name" freshet-query FRESHET_QUERY 127.0.0.1:8080 60 "$what" \
    "API: POST /v1/retrieve, docs: /openapi.json"
