#!/usr/bin/env bash
# Stop the ingest service started by start-ingest.sh.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
stop_daemon ingest "$FRESHET_RUN_DIR/pids/ingest.pid" freshet-ingest "${FRESHET_INGEST_STOP_TIMEOUT:-30}"
