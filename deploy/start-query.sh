#!/usr/bin/env bash
# Start the query node (`freshet-query`) in the background (pid file, log under $FRESHET_RUN_DIR)
# and wait until /healthz answers. The binary: $FRESHET_QUERY_BIN, else
# target/{debug,release}/freshet-query. FRESHET_CONFIG and FRESHET_<SECTION>_<KEY> pass through.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

root="$(dirname "$FRESHET_DEPLOY_DIR")"
BIN="${FRESHET_QUERY_BIN:-$root/target/${FRESHET_PROFILE:-debug}/freshet-query}"
[[ -x "$BIN" ]] || die "no freshet-query binary at $BIN: build it with 'cargo build -p freshet-query' (or set FRESHET_QUERY_BIN)"
PIDFILE="$FRESHET_RUN_DIR/pids/query.pid"
LOGFILE="$FRESHET_RUN_DIR/logs/query.log"
LISTEN="${FRESHET_QUERY_LISTEN:-127.0.0.1:8080}"
TIMEOUT="${FRESHET_QUERY_START_TIMEOUT:-60}"

if pidfile_running "$PIDFILE" freshet-query; then
    log "query node already running (pid $PIDFILE_PID); log: $LOGFILE"
    exit 0
fi
export FRESHET_QUERY_LISTEN="$LISTEN"
start_daemon query "$PIDFILE" "$LOGFILE" "$root" "$BIN"
wait_for_tcp "${LISTEN%:*}" "${LISTEN##*:}" "$TIMEOUT" "$DAEMON_PID" ||
    die_with_log "$LOGFILE" "the query node did not come up within ${TIMEOUT}s"
log "query node up: http://$LISTEN (API: POST /v1/retrieve, docs: /openapi.json)"
