#!/usr/bin/env bash
# Start a throwaway PostgreSQL (Debian's postgresql-15 package, with wal2json) for the CDC tests:
# a cluster in $FRESHET_RUN_DIR/postgres (created by initdb on first start, trust authentication,
# wal_level=logical) listening on 127.0.0.1:${FRESHET_POSTGRES_PORT:-5433}, socket in the data
# directory. Run as root, the server runs as the `postgres` user (PostgreSQL refuses root).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HOST=127.0.0.1
PORT="${FRESHET_POSTGRES_PORT:-5433}"
TIMEOUT="${FRESHET_POSTGRES_START_TIMEOUT:-60}"
PG_BIN="${FRESHET_POSTGRES_BIN:-/usr/lib/postgresql/15/bin}"
DATA="$FRESHET_RUN_DIR/postgres"
LOGFILE="$FRESHET_RUN_DIR/logs/postgres.log"

[[ "$PORT" =~ ^[0-9]+$ ]] || die "FRESHET_POSTGRES_PORT must be a number, got '$PORT'"
[[ -x "$PG_BIN/initdb" && -x "$PG_BIN/pg_ctl" ]] ||
    die "PostgreSQL not found in $PG_BIN; run deploy/install.sh (it installs postgresql-15 and postgresql-15-wal2json)"
[[ -f "$(dirname "$PG_BIN")/lib/wal2json.so" ]] ||
    die "wal2json not found beside $PG_BIN; run deploy/install.sh"

as_pg=()
if [[ "$(id -u)" == 0 ]]; then
    id postgres >/dev/null 2>&1 || die "running as root needs the 'postgres' user (Debian's postgresql package creates it)"
    as_pg=(runuser -u postgres --)
fi

mkdir -p "$(dirname "$LOGFILE")"
# The postgres user must reach the data directory and the log; under root's home (mode 700) it
# cannot. Then both live under /tmp, one cluster per run directory and port, linked from
# $FRESHET_RUN_DIR (a fresh run directory gets a fresh cluster).
if ((${#as_pg[@]})) && [[ ! -e "$DATA" ]] && ! "${as_pg[@]}" test -x "$FRESHET_RUN_DIR" 2>/dev/null; then
    key=$(printf '%s' "$FRESHET_RUN_DIR" | cksum | cut -d' ' -f1)
    outside="${TMPDIR:-/tmp}/freshet-postgres-$PORT-$key"
    rm -rf "$outside"
    mkdir -p "$outside/data"
    touch "$outside/postgres.log"
    ln -s "$outside/data" "$DATA"
    ln -sf "$outside/postgres.log" "$LOGFILE"
    log "the postgres user cannot reach $FRESHET_RUN_DIR: cluster in $outside (linked from it)"
fi
mkdir -p "$DATA"
touch "$LOGFILE"
# The server is given the resolved paths: it cannot follow links through root's home.
DATA=$(readlink -f "$DATA")
SERVER_LOG=$(readlink -f "$LOGFILE")
if ((${#as_pg[@]})); then chown postgres "$DATA" "$SERVER_LOG"; fi
chmod 700 "$DATA"

if "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    log "postgres already running on $HOST:$PORT (data $DATA)"
    exit 0
fi
if tcp_open "$HOST" "$PORT"; then
    die "port $HOST:$PORT is already in use by another process; stop it or set FRESHET_POSTGRES_PORT"
fi
if [[ ! -f "$DATA/PG_VERSION" ]]; then
    log "initdb $DATA"
    "${as_pg[@]}" "$PG_BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
        >>"$LOGFILE" 2>&1 || die_with_log "$LOGFILE" "initdb failed"
fi
t0=$SECONDS
"${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$DATA" -l "$SERVER_LOG" -w -t "$TIMEOUT" \
    -o "-c listen_addresses=$HOST -p $PORT -k $DATA -c wal_level=logical -c max_replication_slots=32 -c max_wal_senders=4" \
    start >/dev/null || die_with_log "$LOGFILE" "postgres did not start within ${TIMEOUT}s"
wait_for_tcp "$HOST" "$PORT" "$TIMEOUT" || die_with_log "$LOGFILE" "postgres does not accept connections on $HOST:$PORT"
log "postgres ready on $HOST:$PORT in $((SECONDS - t0))s (data $DATA, log $LOGFILE)"
