#!/usr/bin/env bash
# Stop the tansu broker started by deploy/start-broker.sh: SIGTERM to the process
# group it created, wait for it to exit, SIGKILL after FRESHET_KAFKA_STOP_TIMEOUT
# (default 20 s). Touches nothing else. Data stays in $FRESHET_RUN_DIR/tansu.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stop_daemon tansu "$FRESHET_RUN_DIR/pids/tansu.pid" tansu "${FRESHET_KAFKA_STOP_TIMEOUT:-20}"
