#!/usr/bin/env bash
# Stop the query node started by start-query.sh.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
stop_daemon query "$FRESHET_RUN_DIR/pids/query.pid" freshet-query "${FRESHET_QUERY_STOP_TIMEOUT:-30}"
