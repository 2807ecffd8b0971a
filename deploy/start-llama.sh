#!/usr/bin/env bash
# Start llama.cpp's OpenAI-compatible server (llama-cpp-python, installed by
# `deploy/install.sh --llama` into $FRESHET_HOME/venv-llama) with the tests' tiny random-weight
# model, for the wire tests (docs/llm.md, "Wire compatibility"). The model is made in the run
# directory by tests/fixtures/make_tiny_gguf.py (0.3 MB, under a second) unless
# $FRESHET_LLAMA_MODEL names a GGUF file. It serves as model `tiny` on
# 127.0.0.1:${FRESHET_LLAMA_PORT:-18082} (base URL http://127.0.0.1:PORT/v1) with a context of
# ${FRESHET_LLAMA_N_CTX:-4096} tokens, pid file and log under $FRESHET_RUN_DIR; it is up when
# GET /v1/models answers, within ${FRESHET_LLAMA_START_TIMEOUT:-60} s. Requests queue
# (`--interrupt_requests false`): by default a new request cuts off the stream in progress, which
# then ends with `[DONE]` and no finish reason, and the tests run in parallel.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HOST=127.0.0.1
PORT="${FRESHET_LLAMA_PORT:-18082}"
N_CTX="${FRESHET_LLAMA_N_CTX:-4096}"
TIMEOUT="${FRESHET_LLAMA_START_TIMEOUT:-60}"
PIDFILE="$FRESHET_RUN_DIR/pids/llama.pid"
LOGFILE="$FRESHET_RUN_DIR/logs/llama.log"
ROOT="$(dirname "$FRESHET_DEPLOY_DIR")"

[[ "$PORT" =~ ^[0-9]+$ ]] || die "FRESHET_LLAMA_PORT must be a number, got '$PORT'"
[[ "$N_CTX" =~ ^[0-9]+$ ]] || die "FRESHET_LLAMA_N_CTX must be a number, got '$N_CTX'"
[[ -x "$FRESHET_LLAMA_PYTHON" ]] ||
    die "no llama-cpp-python venv: $FRESHET_LLAMA_PYTHON does not exist; run deploy/install.sh --llama (or set FRESHET_LLAMA_PYTHON)"
"$FRESHET_LLAMA_PYTHON" -c 'import llama_cpp.server, gguf' >/dev/null 2>&1 ||
    die "$FRESHET_LLAMA_PYTHON cannot import llama_cpp.server and gguf; run deploy/install.sh --llama"

if pidfile_running "$PIDFILE" llama_cpp.server; then
    log "llama server already running (pid $PIDFILE_PID) on $HOST:$PORT; log: $LOGFILE"
    exit 0
fi
if tcp_open "$HOST" "$PORT"; then
    die "port $HOST:$PORT is already in use by another process; stop it or set FRESHET_LLAMA_PORT"
fi

MODEL="${FRESHET_LLAMA_MODEL:-}"
if [[ -z "$MODEL" ]]; then
    MODEL="$FRESHET_RUN_DIR/llama/tiny-$N_CTX.gguf"
    if [[ ! -s "$MODEL" ]]; then
        mkdir -p "$(dirname "$MODEL")" "$(dirname "$LOGFILE")"
        "$FRESHET_LLAMA_PYTHON" "$ROOT/tests/fixtures/make_tiny_gguf.py" "$MODEL.tmp" "$N_CTX" >>"$LOGFILE" 2>&1 ||
            die_with_log "$LOGFILE" "making the tiny model with tests/fixtures/make_tiny_gguf.py failed"
        mv -f "$MODEL.tmp" "$MODEL"
    fi
fi
[[ -f "$MODEL" ]] || die "no model file $MODEL (FRESHET_LLAMA_MODEL)"

t0=$SECONDS
start_daemon llama "$PIDFILE" "$LOGFILE" "$FRESHET_RUN_DIR" \
    "$FRESHET_LLAMA_PYTHON" -m llama_cpp.server --model "$MODEL" --model_alias tiny \
    --host "$HOST" --port "$PORT" --n_ctx "$N_CTX" --interrupt_requests false
rc=0
wait_for_ready "http://$HOST:$PORT/v1/models" "$TIMEOUT" "$DAEMON_PID" || rc=$?
case $rc in
0) log "llama server up in $((SECONDS - t0))s: http://$HOST:$PORT/v1 (model tiny, n_ctx $N_CTX)" ;;
2) die_with_log "$LOGFILE" "the llama server exited during start" ;;
*) die_with_log "$LOGFILE" "the llama server did not answer GET /v1/models within ${TIMEOUT}s" ;;
esac
