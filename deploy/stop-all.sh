#!/usr/bin/env bash
# Stop the query node, the pipeline, Milvus and the tansu broker started by the start scripts.
# Tries both even if one fails; exits non-zero if any failed.
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
. "$DIR/lib.sh"

rc=0
"$DIR/stop-query.sh" || { warn "stop-query.sh failed"; rc=1; }
"$DIR/stop-pipeline.sh" || { warn "stop-pipeline.sh failed"; rc=1; }
"$DIR/stop-milvus.sh" || { warn "stop-milvus.sh failed"; rc=1; }
"$DIR/stop-broker.sh" || { warn "stop-broker.sh failed"; rc=1; }
exit $rc
