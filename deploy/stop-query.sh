#!/usr/bin/env bash
# Stop the query node started by start-query.sh ($FRESHET_QUERY_NAME names one of several).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
name=$(query_node_name)
stop_daemon "$name" "$FRESHET_RUN_DIR/pids/$name.pid" freshet-query "${FRESHET_QUERY_STOP_TIMEOUT:-30}"
