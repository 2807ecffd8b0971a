#!/usr/bin/env bash
# The test command: installs what is missing, starts a fresh broker, Milvus, PostgreSQL and
# llama.cpp's server with a tiny model (data under $FRESHET_HOME/test-run), builds, runs every
# unit and integration test, stops the services.
#   deploy/test.sh                 all tests (the model export's pytest suite and the retrieval gate too)
#   deploy/test.sh -- <cargo test args>   e.g. deploy/test.sh -- --test pipeline_e2e
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"

"$here/install.sh" --lite --e5 --llama --pathway
FRESHET_HOME="${FRESHET_HOME:-$HOME/.freshet}"
# shellcheck source=/dev/null
. "$FRESHET_HOME/env.sh"

export FRESHET_RUN_DIR="${FRESHET_TEST_RUN_DIR:-$FRESHET_HOME/test-run}"
# One run per run dir: a second one would stop and restart the first one's services under its
# tests. The lock is a file holding the pid of the run that owns it (not an flock: the services
# started below would inherit its descriptor and hold it after the run); a dead owner's is taken.
LOCK="${FRESHET_RUN_DIR%/}.lock"
take_lock() {
    local owner
    while ! (set -o noclobber && echo "$$" >"$LOCK") 2>/dev/null; do
        owner=$(cat "$LOCK" 2>/dev/null || true)
        if [[ "$owner" =~ ^[0-9]+$ ]] && [[ -r "/proc/$owner/cmdline" ]] &&
            tr '\0' ' ' <"/proc/$owner/cmdline" | grep -q 'test\.sh'; then
            echo "deploy/test.sh: another run (pid $owner) is using $FRESHET_RUN_DIR and its services;" \
                "wait for it to finish, or give this one FRESHET_TEST_RUN_DIR and other ports" \
                "(FRESHET_KAFKA_PORT, FRESHET_MILVUS_PORT, ...)" >&2
            exit 1
        fi
        rm -f "$LOCK"
    done
}
release_lock() { [[ "$(cat "$LOCK" 2>/dev/null)" == "$$" ]] && rm -f "$LOCK"; return 0; }
take_lock
trap release_lock EXIT
export FRESHET_KAFKA_PORT="${FRESHET_KAFKA_PORT:-9092}"
export FRESHET_MILVUS_PORT="${FRESHET_MILVUS_PORT:-19530}"
# milvus-lite (Milvus 3.x API) next to the standalone 2.3.5, for tests/tests/milvus_lite_e2e.rs.
LITE_RUN_DIR="$FRESHET_RUN_DIR/lite"
export FRESHET_MILVUS_LITE_PORT="${FRESHET_MILVUS_LITE_PORT:-19630}"
stop_lite() { FRESHET_RUN_DIR="$LITE_RUN_DIR" "$here/stop-milvus.sh" || true; }
# What tests keep for people (the console's screenshots): moved out of the run dir, which the
# next run deletes, into $FRESHET_HOME/artifacts/<time>; the newest five runs are kept.
keep_artifacts() {
    [ -d "$FRESHET_RUN_DIR/artifacts" ] || return 0
    local dest
    dest="$FRESHET_HOME/artifacts/test-$(date -u +%Y%m%dT%H%M%SZ)"
    mkdir -p "$(dirname "$dest")"
    mv "$FRESHET_RUN_DIR/artifacts" "$dest" && echo "test artifacts: $dest"
    find "$FRESHET_HOME/artifacts" -mindepth 1 -maxdepth 1 -name 'test-*' | sort -r | tail -n +6 \
        | xargs -r rm -rf
}
stop_all() {
    keep_artifacts || true
    stop_lite
    "$here/stop-llama.sh" || true
    "$here/stop-postgres.sh" || true
    "$here/stop-all.sh" || true
}
stop_lite >/dev/null 2>&1
"$here/stop-llama.sh" >/dev/null 2>&1 || true
"$here/stop-postgres.sh" >/dev/null 2>&1 || true
"$here/stop-all.sh" >/dev/null 2>&1 || true
rm -rf "$FRESHET_RUN_DIR"
mkdir -p "$FRESHET_RUN_DIR"
trap 'stop_all; release_lock' EXIT
"$here/start-all.sh"
FRESHET_RUN_DIR="$LITE_RUN_DIR" FRESHET_MILVUS_IMPL=lite FRESHET_MILVUS_PORT="$FRESHET_MILVUS_LITE_PORT" \
    "$here/start-milvus.sh"
export FRESHET_MILVUS_LITE_URL="http://127.0.0.1:$FRESHET_MILVUS_LITE_PORT"
# PostgreSQL with wal2json, for tests/tests/postgres_cdc_e2e.rs.
export FRESHET_POSTGRES_PORT="${FRESHET_POSTGRES_PORT:-5433}"
"$here/start-postgres.sh"
# llama.cpp's OpenAI-compatible servers with a tiny random-weight model, chat and embeddings, for
# the wire tests (connectors/llm/tests/wire_live.rs, wire_embeddings_live.rs and
# tests/tests/answer_llama_e2e.rs, docs/llm.md); the
# feature freshet-tests/live turns on freshet-llm/wire.
export FRESHET_LLAMA_PORT="${FRESHET_LLAMA_PORT:-18082}"
export FRESHET_LLAMA_N_CTX="${FRESHET_LLAMA_N_CTX:-4096}"
"$here/start-llama.sh"
export FRESHET_LLM_WIRE_URL="http://127.0.0.1:$FRESHET_LLAMA_PORT/v1"
export FRESHET_LLM_WIRE_MODEL=tiny
export FRESHET_LLM_WIRE_N_CTX="$FRESHET_LLAMA_N_CTX"
# its embedding twin (connectors/llm/tests/wire_embeddings_live.rs)
export FRESHET_EMBED_WIRE_URL="http://127.0.0.1:${FRESHET_LLAMA_EMBED_PORT:-$((FRESHET_LLAMA_PORT + 1))}/v1"
export FRESHET_EMBED_WIRE_MODEL=tiny-embed

export FRESHET_KAFKA_BROKERS="127.0.0.1:$FRESHET_KAFKA_PORT"
export FRESHET_MILVUS_URL="http://127.0.0.1:$FRESHET_MILVUS_PORT"
export FRESHET_MODEL_DIR="$FRESHET_HOME/models/all-MiniLM-L6-v2"
# its int8 variant, for connectors/embedding/tests/live_int8.rs
export FRESHET_INT8_MODEL_DIR="$FRESHET_HOME/models/all-MiniLM-L6-v2-int8"
# multilingual-e5-small (the documented alternative model), for connectors/embedding/tests/live_e5.rs
export FRESHET_E5_MODEL_DIR="$FRESHET_HOME/models/multilingual-e5-small"
export FRESHET_PYTHON="$FRESHET_HOME/venv/bin/python"
# Pathway itself (install.sh --pathway), for its own clients in tests/tests/clients_e2e.rs
export FRESHET_PATHWAY_PYTHON="$FRESHET_HOME/venv-pathway/bin/python"

shift_args=()
if [[ "${1:-}" == "--" ]]; then shift; shift_args=("$@"); fi

# The model export's tests (model-export/tests: tiny generated models, no download; seconds).
if [[ ${#shift_args[@]} -eq 0 ]]; then
    "$FRESHET_PYTHON" -m pytest -q "$root/model-export"
fi

# The examples too: tests/tests/examples_e2e.rs runs them, also when only some tests are asked for.
cargo build --workspace --bins --examples
# The container and cluster files with the binaries just built: the images' asset stages run here
# (the ONNX Runtime from PyPI by hash, the model export, the dictionary from Debian's IPADIC),
# their runtime libraries (ldd against each image's packages), and every config file read by the
# real binaries with those assets.
if [[ ${#shift_args[@]} -eq 0 ]]; then
    "$here/validate-deploy.sh" --require-binaries --build-steps --bin-dir "$root/target/debug"
fi
cargo test --workspace --features freshet-tests/live "${shift_args[@]}"

# Retrieval quality on SciFact, zh-poetry and ja-ko through the real pipeline and query node (CI gate).
if [[ "${FRESHET_SKIP_EVAL:-0}" != 1 && ${#shift_args[@]} -eq 0 ]]; then
    "$here/eval-gate.sh"
fi
