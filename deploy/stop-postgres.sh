#!/usr/bin/env bash
# Stop the PostgreSQL started by deploy/start-postgres.sh (pg_ctl stop, fast mode). Touches
# nothing else. Data stays in $FRESHET_RUN_DIR/postgres.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PG_BIN="${FRESHET_POSTGRES_BIN:-/usr/lib/postgresql/15/bin}"
# Resolved: start-postgres.sh may have placed the cluster outside the run directory.
DATA=$(readlink -f "$FRESHET_RUN_DIR/postgres" || echo "$FRESHET_RUN_DIR/postgres")
if [[ ! -f "$DATA/postmaster.pid" ]]; then
    log "postgres: not running (no $DATA/postmaster.pid)"
    exit 0
fi
as_pg=()
if [[ "$(id -u)" == 0 ]]; then as_pg=(runuser -u postgres --); fi
"${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
log "postgres stopped (data stays in $DATA)"
