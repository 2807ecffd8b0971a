#!/usr/bin/env bash
# Start the local services: tansu Kafka broker (+ topics), then Milvus.
# Honours the same environment variables as start-broker.sh and start-milvus.sh.
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$DIR/lib.sh"

t0=$SECONDS
# Broker first: the milvus wrapper picks its metrics port from 9091 upwards.
"$DIR/start-broker.sh" || die "start-broker.sh failed (log: $FRESHET_RUN_DIR/logs/tansu.log)"
"$DIR/start-milvus.sh" || die "start-milvus.sh failed (log: $FRESHET_RUN_DIR/logs/milvus.log); the broker is still running, deploy/stop-all.sh stops it"
log "all services up in $((SECONDS - t0))s: kafka 127.0.0.1:${FRESHET_KAFKA_PORT:-9092}, milvus 127.0.0.1:${FRESHET_MILVUS_PORT:-19530} (run dir $FRESHET_RUN_DIR)"
