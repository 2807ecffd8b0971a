#!/usr/bin/env bash
# Start `freshet run` in the background (pid file, log under $FRESHET_RUN_DIR) and wait until it
# is ready (GET /readyz: the Milvus collection is loaded and every worker reads its partitions;
# loading a large collection after a Milvus restart can take a minute or more). The binary:
# $FRESHET_BIN, else target/{debug,release}/freshet.
#   FRESHET_CONFIG=path.toml and FRESHET_<SECTION>_<KEY> settings pass through.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

root="$(dirname "$FRESHET_DEPLOY_DIR")"
BIN="${FRESHET_BIN:-$root/target/${FRESHET_PROFILE:-debug}/freshet}"
[[ -x "$BIN" ]] || die "no freshet binary at $BIN: build it with 'cargo build -p freshet-cli' (or set FRESHET_BIN)"
PIDFILE="$FRESHET_RUN_DIR/pids/pipeline.pid"
LOGFILE="$FRESHET_RUN_DIR/logs/pipeline.log"
LISTEN="${FRESHET_METRICS_LISTEN:-127.0.0.1:9464}"
TIMEOUT="${FRESHET_PIPELINE_START_TIMEOUT:-300}"

if pidfile_running "$PIDFILE" freshet; then
    log "pipeline already running (pid $PIDFILE_PID); log: $LOGFILE"
    exit 0
fi
export FRESHET_PIPELINE_EMBEDDING_CACHE_PATH="${FRESHET_PIPELINE_EMBEDDING_CACHE_PATH:-$FRESHET_HOME/cache/embeddings.log}"
local_broker_fetch_settings
start_daemon pipeline "$PIDFILE" "$LOGFILE" "$root" "$BIN" run
wait_for_ready "http://$LISTEN/readyz" "$TIMEOUT" "$DAEMON_PID" ||
    die_with_log "$LOGFILE" "the pipeline was not ready within ${TIMEOUT}s (http://$LISTEN/readyz)"
log "pipeline ready: http://$LISTEN/metrics, /healthz, /readyz"
