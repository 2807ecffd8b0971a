#!/usr/bin/env bash
# The main job on local defaults: install what is missing, start the broker, Milvus, the
# pipeline and the query node, publish the sample corpus (deploy/sample), wait until it is
# indexed, ask the query node.
# Everything stays up afterwards; stop it all with deploy/stop-all.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"

"$here/install.sh"
# shellcheck source=lib.sh
. "$here/lib.sh"
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
