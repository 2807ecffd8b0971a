#!/usr/bin/env bash
# The retrieval-quality gate: SciFact (BEIR test split) through the real pipeline and query node,
# configurations bm25, vector, hybrid (RRF) and hybrid-weighted (the node's default fusion); fails if any
# nDCG@10 is more than 0.01 below the committed baseline (tests/eval/scifact-baseline.json). Needs the broker and Milvus up (deploy/test.sh
# starts them and calls this); starts and stops its own pipeline and query node.
#   deploy/eval-gate.sh             run the gate
#   deploy/eval-gate.sh --update    run and rewrite the baseline (commit it with the change that
#                                   legitimately moved it)
# The pipeline uses the persistent embedding cache ($FRESHET_HOME/cache/embeddings.log): the
# first run on a machine embeds the 5,183 abstracts (~15-20 min on 2 cores), later runs do not.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root="$(dirname "$FRESHET_DEPLOY_DIR")"
# The dataset: $FRESHET_EVAL_DATASET, else shared/datasets/scifact beside the checkout or beside
# one of its parent folders (../shared/datasets/scifact for a checkout next to shared/).
dataset="${FRESHET_EVAL_DATASET:-}"
if [[ -z "$dataset" ]]; then
    dir="$root"
    while [[ "$dir" != / && -z "$dataset" ]]; do
        dir="$(dirname "$dir")"
        [[ -f "$dir/shared/datasets/scifact/corpus.jsonl" ]] && dataset="$dir/shared/datasets/scifact"
    done
fi
baseline="$root/tests/eval/scifact-baseline.json"
[[ -n "$dataset" && -f "$dataset/corpus.jsonl" ]] ||
    die "no BEIR SciFact dataset found (looked for shared/datasets/scifact beside $root and its parent folders); set FRESHET_EVAL_DATASET"

run="$FRESHET_RUN_DIR/eval"
rm -rf "$run"
mkdir -p "$run"
export FRESHET_KAFKA_TOPIC="eval-scifact-$$"
export FRESHET_KAFKA_DLQ_TOPIC="eval-scifact-$$.dlq"
export FRESHET_KAFKA_GROUP_ID="freshet-eval-$$"
export FRESHET_MILVUS_COLLECTION="eval_scifact_$$"
export FRESHET_TANTIVY_PATH="$run/tantivy"
export FRESHET_METRICS_LISTEN="127.0.0.1:${FRESHET_EVAL_METRICS_PORT:-19464}"
export FRESHET_QUERY_LISTEN="127.0.0.1:${FRESHET_EVAL_QUERY_PORT:-18080}"
trap '"$FRESHET_DEPLOY_DIR/stop-query.sh" || true; "$FRESHET_DEPLOY_DIR/stop-pipeline.sh" || true' EXIT
"$FRESHET_DEPLOY_DIR/start-pipeline.sh"
"$FRESHET_DEPLOY_DIR/start-query.sh"

bin="${FRESHET_TOOLS_BIN:-$root/target/${FRESHET_PROFILE:-debug}/freshet-tools}"
args=(eval --dataset "$dataset" --url "http://$FRESHET_QUERY_LISTEN" --configs "bm25,vector,hybrid,hybrid-weighted"
      --json "$run/report.json" --wait-secs "${FRESHET_EVAL_WAIT_SECS:-3000}")
if [[ "${1:-}" == "--update" ]]; then
    "$bin" "${args[@]}"
    cp "$run/report.json" "$baseline"
    log "baseline rewritten: $baseline"
else
    "$bin" "${args[@]}" --baseline "$baseline" --gate bm25,vector,hybrid,hybrid-weighted --tolerance 0.01 ||
        die "retrieval quality gate failed (report: $run/report.json, baseline: $baseline)"
    log "retrieval quality gate passed"
fi
