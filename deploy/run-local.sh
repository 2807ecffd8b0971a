#!/usr/bin/env bash
# The main job on local defaults: install what is missing, start the broker, Milvus, the
# pipeline and the query node, publish the sample corpus (deploy/sample), wait until it is
# indexed, ask the query node.
# Everything stays up afterwards; stop it all with deploy/stop-all.sh.
#   deploy/run-local.sh                  English model (all-MiniLM-L6-v2 int8)
#   deploy/run-local.sh --multilingual   multilingual-e5-small int8 (Chinese, Japanese, Korean
#                                        and 90 more languages), in its own collection and index
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"

multilingual=0
case "${1:-}" in
"") ;;
--multilingual) multilingual=1 ;;
*) echo "usage: deploy/run-local.sh [--multilingual]" >&2; exit 2 ;;
esac

if ((multilingual)); then "$here/install.sh" --e5; else "$here/install.sh"; fi
# shellcheck source=lib.sh
. "$here/lib.sh"
if ((multilingual)); then
    # Another model is another vector space: its own collection and tantivy index, so that
    # switching back and forth never mixes the two (the pipeline refuses a collection of
    # another model anyway).
    export FRESHET_EMBEDDING_MODEL_DIR="$FRESHET_HOME/models/multilingual-e5-small-int8"
    export FRESHET_MILVUS_COLLECTION="${FRESHET_MILVUS_COLLECTION:-freshet_chunks_e5}"
    export FRESHET_TANTIVY_PATH="${FRESHET_TANTIVY_PATH:-$FRESHET_RUN_DIR/index/tantivy-e5}"
fi
profile="${FRESHET_PROFILE:-debug}"
if [[ "$profile" == release ]]; then cargo build --release -p freshet-cli -p freshet-query -p freshet-tools; else cargo build -p freshet-cli -p freshet-query -p freshet-tools; fi
export FRESHET_BIN="$root/target/$profile/freshet"
export FRESHET_QUERY_BIN="$root/target/$profile/freshet-query"
tools="$root/target/$profile/freshet-tools"

"$here/start-all.sh"
"$here/start-pipeline.sh"
"$here/start-query.sh"
"$FRESHET_BIN" publish --dir "$here/sample"
"$tools" status --wait-secs "${FRESHET_WAIT_SECS:-180}"
echo
listen="${FRESHET_QUERY_LISTEN:-127.0.0.1:8080}"
echo "POST http://$listen/v1/retrieve  {\"query\": \"what happens to rivers when snow melts\", \"k\": 3}"
"$FRESHET_HOME/venv/bin/python" "$here/ask.py" "http://$listen" "what happens to rivers when snow melts"
echo
echo "Everything is still running (logs in $FRESHET_RUN_DIR/logs). Stop with: deploy/stop-all.sh"
