# The common commands (`just` lists them; `cargo install --locked just` installs it).
# CI runs .ci/run: .ci/fast (`just check`), then deploy/test.sh (`just test`).

set shell := ["bash", "-euo", "pipefail", "-c"]

export CARGO_INCREMENTAL := "0"

# list the recipes
default:
    @just --list

# format the Rust code
fmt:
    cargo fmt --all

# formatting, ruff, shellcheck, clippy and cargo-deny, without the tests
lint:
    cargo fmt --all -- --check
    bash .ci/lint
    cargo clippy --workspace --all-targets --features freshet-tests/live -- -D warnings
    "${FRESHET_CARGO_DENY:-${FRESHET_HOME:-$HOME/.freshet}/tools/bin/cargo-deny}" --log-level error check licenses bans sources

# the unit tests (no service needed)
unit:
    cargo test --workspace --features freshet-tests/live --lib --bins

# CI's fast lane: lint, the fault-point check, the unit tests
check:
    bash .ci/fast

# every test against the real services (deploy/test.sh); `just test --test query_e2e` runs one
test *ARGS:
    if [[ -n "{{ARGS}}" ]]; then deploy/test.sh -- {{ARGS}}; else deploy/test.sh; fi

# CI as it runs: toolchain, light install, fast lane, then every test
ci:
    bash .ci/run

# the retrieval gate (SciFact, zh-poetry) against running services (deploy/test.sh runs it too)
eval *ARGS:
    deploy/eval-gate.sh {{ARGS}}

# broker, Milvus, pipeline and query node on local defaults, the sample indexed, one question
run-local:
    deploy/run-local.sh

# stop what run-local started
stop:
    deploy/stop-all.sh

# a benchmark of freshet-tools (release build), e.g. `just bench latency --requests 1000`
bench NAME *ARGS:
    cargo build --release -p freshet-tools
    target/release/freshet-tools bench-{{NAME}} {{ARGS}}

# builds and checks the workspace with the oldest compiler Cargo.toml declares (`rust-version`)
msrv:
    bash .ci/msrv
