#!/usr/bin/env bash
# Stop the pipeline started by start-pipeline.sh (SIGTERM: it drains and commits, then exits).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
stop_daemon pipeline "$FRESHET_RUN_DIR/pids/pipeline.pid" freshet "${FRESHET_PIPELINE_STOP_TIMEOUT:-60}"
