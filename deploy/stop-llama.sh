#!/usr/bin/env bash
# Stop the llama.cpp servers started by start-llama.sh.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
stop_daemon llama "$FRESHET_RUN_DIR/pids/llama.pid" llama_cpp.server "${FRESHET_LLAMA_STOP_TIMEOUT:-30}"
stop_daemon llama-embed "$FRESHET_RUN_DIR/pids/llama-embed.pid" llama_cpp.server "${FRESHET_LLAMA_STOP_TIMEOUT:-30}"
