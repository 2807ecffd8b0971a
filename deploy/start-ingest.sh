#!/usr/bin/env bash
# Start the ingest service (`freshet-ingest`, docs/ingest.md) in the background (pid file, log
# under $FRESHET_RUN_DIR) and wait until it listens. The binary: $FRESHET_INGEST_BIN, else
# target/{debug,release}/freshet-ingest. FRESHET_CONFIG and FRESHET_<SECTION>_<KEY> pass through;
# the broker defaults to the local one (127.0.0.1:$FRESHET_KAFKA_PORT).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

root="$(dirname "$FRESHET_DEPLOY_DIR")"
BIN="${FRESHET_INGEST_BIN:-$root/target/${FRESHET_PROFILE:-debug}/freshet-ingest}"
[[ -x "$BIN" ]] || die "no freshet-ingest binary at $BIN: build it with 'cargo build -p freshet-ingest' (or set FRESHET_INGEST_BIN)"
PIDFILE="$FRESHET_RUN_DIR/pids/ingest.pid"
LOGFILE="$FRESHET_RUN_DIR/logs/ingest.log"
LISTEN="${FRESHET_INGEST_LISTEN:-127.0.0.1:8090}"
TIMEOUT="${FRESHET_INGEST_START_TIMEOUT:-30}"

if pidfile_running "$PIDFILE" freshet-ingest; then
    log "ingest service already running (pid $PIDFILE_PID); log: $LOGFILE"
    exit 0
fi
export FRESHET_KAFKA_BROKERS="${FRESHET_KAFKA_BROKERS:-127.0.0.1:${FRESHET_KAFKA_PORT:-9092}}"
export FRESHET_INGEST_LISTEN="$LISTEN"
start_daemon ingest "$PIDFILE" "$LOGFILE" "$root" "$BIN"
wait_for_tcp "${LISTEN%:*}" "${LISTEN##*:}" "$TIMEOUT" "$DAEMON_PID" ||
    die_with_log "$LOGFILE" "the ingest service did not come up within ${TIMEOUT}s"
log "ingest service up: http://$LISTEN (API: PUT/DELETE /v1/documents/{id}, POST /v1/documents:batch, docs: /openapi.json)"
