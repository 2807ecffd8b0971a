#!/usr/bin/env bash
# The main job on local defaults: install what is missing, start the broker, Milvus and the
# pipeline, publish the sample corpus (deploy/sample), wait until it is indexed, run a query.
# Everything stays up afterwards; stop it all with deploy/stop-all.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"

"$here/install.sh"
# shellcheck source=lib.sh
. "$here/lib.sh"
profile="${FRESHET_PROFILE:-debug}"
if [[ "$profile" == release ]]; then cargo build --release -p freshet-pipeline; else cargo build -p freshet-pipeline; fi
export FRESHET_BIN="$root/target/$profile/freshet"
export FRESHET_TANTIVY_PATH="${FRESHET_TANTIVY_PATH:-$FRESHET_RUN_DIR/index/tantivy}"

"$here/start-all.sh"
"$here/start-pipeline.sh"
"$FRESHET_BIN" publish --dir "$here/sample"
"$FRESHET_BIN" status --wait-secs "${FRESHET_WAIT_SECS:-180}"
echo
echo "Query: 'what happens to rivers when snow melts'"
"$FRESHET_BIN" search "what happens to rivers when snow melts"
echo
echo "Everything is still running (logs in $FRESHET_RUN_DIR/logs). Stop with: deploy/stop-all.sh"
