#!/usr/bin/env bash
# Stop the Milvus started by deploy/start-milvus.sh (standalone or lite): SIGTERM to
# the process group it created, wait until every process of it has exited,
# SIGKILL after FRESHET_MILVUS_STOP_TIMEOUT (default 15 s). Touches nothing else.
# Milvus 2.3.5 standalone never finishes a graceful shutdown once a collection
# is loaded (rootCoord stops first, the other components then retry it for
# minutes), so the SIGKILL is the normal path; data survives it (rocksmq WAL
# is replayed on the next start, tested).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PIDFILE="$FRESHET_RUN_DIR/pids/milvus.pid"
STOPPED_MARK="$FRESHET_RUN_DIR/pids/milvus.stopped-at"
TIMEOUT="${FRESHET_MILVUS_STOP_TIMEOUT:-15}"

had_pidfile=0
[[ -f "$PIDFILE" ]] && had_pidfile=1
stop_daemon milvus "$PIDFILE" milvus "$TIMEOUT"
if ((had_pidfile)); then
    # start-milvus.sh waits FRESHET_MILVUS_RESTART_GAP seconds after this.
    date +%s >"$STOPPED_MARK"
fi
