#!/usr/bin/env bash
# Start llama.cpp's OpenAI-compatible server (llama-cpp-python, installed by
# `deploy/install.sh --llama` into $FRESHET_HOME/venv-llama) with the tests' tiny random-weight
# model, for the wire tests (docs/llm.md, "Wire compatibility"). The model is made in the run
# directory by tests/fixtures/make_tiny_gguf.py (0.3 MB, under a second) unless
# $FRESHET_LLAMA_MODEL names a GGUF file. It serves as model `tiny` on
# 127.0.0.1:${FRESHET_LLAMA_PORT:-18082} (base URL http://127.0.0.1:PORT/v1) with a context of
# ${FRESHET_LLAMA_N_CTX:-4096} tokens, pid file and log under $FRESHET_RUN_DIR; it is up when
# GET /v1/models answers, within ${FRESHET_LLAMA_START_TIMEOUT:-60} s. A second server, `llama-embed`
# on port PORT+1 (${FRESHET_LLAMA_EMBED_PORT}), serves the same model made to mean-pool
# (`--pooling mean`) as `tiny-embed` with embeddings on, for the embeddings client's wire test
# (docs/models.md). Requests queue
# (`--interrupt_requests false`): by default a new request cuts off the stream in progress, which
# then ends with `[DONE]` and no finish reason, and the tests run in parallel.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HOST=127.0.0.1
PORT="${FRESHET_LLAMA_PORT:-18082}"
N_CTX="${FRESHET_LLAMA_N_CTX:-4096}"
TIMEOUT="${FRESHET_LLAMA_START_TIMEOUT:-60}"
EMBED_PORT="${FRESHET_LLAMA_EMBED_PORT:-$((PORT + 1))}"
ROOT="$(dirname "$FRESHET_DEPLOY_DIR")"

[[ "$PORT" =~ ^[0-9]+$ ]] || die "FRESHET_LLAMA_PORT must be a number, got '$PORT'"
[[ "$EMBED_PORT" =~ ^[0-9]+$ ]] || die "FRESHET_LLAMA_EMBED_PORT must be a number, got '$EMBED_PORT'"
[[ "$N_CTX" =~ ^[0-9]+$ ]] || die "FRESHET_LLAMA_N_CTX must be a number, got '$N_CTX'"
[[ -x "$FRESHET_LLAMA_PYTHON" ]] ||
    die "no llama-cpp-python venv: $FRESHET_LLAMA_PYTHON does not exist; run deploy/install.sh --llama (or set FRESHET_LLAMA_PYTHON)"
"$FRESHET_LLAMA_PYTHON" -c 'import llama_cpp.server, gguf' >/dev/null 2>&1 ||
    die "$FRESHET_LLAMA_PYTHON cannot import llama_cpp.server and gguf; run deploy/install.sh --llama"

# tiny_model FILE ARGS...: the tiny model made by tests/fixtures/make_tiny_gguf.py (kept once made).
tiny_model() {
    local file=$1
    shift
    if [[ ! -s "$file" ]]; then
        mkdir -p "$(dirname "$file")" "$FRESHET_RUN_DIR/logs"
        "$FRESHET_LLAMA_PYTHON" "$ROOT/tests/fixtures/make_tiny_gguf.py" "$file.tmp" "$@" >>"$FRESHET_RUN_DIR/logs/llama.log" 2>&1 ||
            die_with_log "$FRESHET_RUN_DIR/logs/llama.log" "making the tiny model with tests/fixtures/make_tiny_gguf.py failed"
        mv -f "$file.tmp" "$file"
    fi
}

# serve NAME PORT MODEL ALIAS ARGS...: one llama.cpp server, up when GET /v1/models answers.
serve() {
    local name=$1 port=$2 model=$3 alias=$4
    shift 4
    local pidfile="$FRESHET_RUN_DIR/pids/$name.pid" logfile="$FRESHET_RUN_DIR/logs/$name.log"
    if pidfile_running "$pidfile" llama_cpp.server; then
        log "$name server already running (pid $PIDFILE_PID) on $HOST:$port; log: $logfile"
        return 0
    fi
    if tcp_open "$HOST" "$port"; then
        die "port $HOST:$port is already in use by another process; stop it or set FRESHET_LLAMA_PORT / FRESHET_LLAMA_EMBED_PORT"
    fi
    [[ -f "$model" ]] || die "no model file $model (FRESHET_LLAMA_MODEL)"
    local t0=$SECONDS rc=0
    start_daemon "$name" "$pidfile" "$logfile" "$FRESHET_RUN_DIR" \
        "$FRESHET_LLAMA_PYTHON" -m llama_cpp.server --model "$model" --model_alias "$alias" \
        --host "$HOST" --port "$port" "$@"
    wait_for_ready "http://$HOST:$port/v1/models" "$TIMEOUT" "$DAEMON_PID" || rc=$?
    case $rc in
    0) log "$name server up in $((SECONDS - t0))s: http://$HOST:$port/v1 (model $alias)" ;;
    2) die_with_log "$logfile" "the $name server exited during start" ;;
    *) die_with_log "$logfile" "the $name server did not answer GET /v1/models within ${TIMEOUT}s" ;;
    esac
}

MODEL="${FRESHET_LLAMA_MODEL:-}"
if [[ -z "$MODEL" ]]; then
    MODEL="$FRESHET_RUN_DIR/llama/tiny-$N_CTX.gguf"
    tiny_model "$MODEL" "$N_CTX"
fi
EMBED_MODEL="$FRESHET_RUN_DIR/llama/tiny-embed.gguf"
tiny_model "$EMBED_MODEL" 512 --pooling mean
serve llama "$PORT" "$MODEL" tiny --n_ctx "$N_CTX" --interrupt_requests false
serve llama-embed "$EMBED_PORT" "$EMBED_MODEL" tiny-embed --n_ctx 512 --embedding true --interrupt_requests false
