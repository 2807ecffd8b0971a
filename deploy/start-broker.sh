#!/usr/bin/env bash
# Start the tansu 0.6.0 Kafka broker on 127.0.0.1:${FRESHET_KAFKA_PORT:-9092} with the
# SQLite storage engine ($FRESHET_RUN_DIR/tansu/tansu.db; survives restarts), wait
# until it accepts connections, then create the topics if missing:
#   ${FRESHET_TOPIC:-documents} (${FRESHET_PARTITIONS:-4} partitions) and <topic>.dlq (1 partition).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HOST=127.0.0.1
PORT="${FRESHET_KAFKA_PORT:-9092}"
TIMEOUT="${FRESHET_KAFKA_START_TIMEOUT:-60}"
TOPIC="${FRESHET_TOPIC:-documents}"
PARTITIONS="${FRESHET_PARTITIONS:-4}"
DLQ_TOPIC="$TOPIC.dlq"
DATA="$FRESHET_RUN_DIR/tansu"
PIDFILE="$FRESHET_RUN_DIR/pids/tansu.pid"
LOGFILE="$FRESHET_RUN_DIR/logs/tansu.log"
URL="tcp://$HOST:$PORT"

[[ "$PORT" =~ ^[0-9]+$ ]] || die "FRESHET_KAFKA_PORT must be a number, got '$PORT'"
[[ "$PARTITIONS" =~ ^[1-9][0-9]*$ ]] || die "FRESHET_PARTITIONS must be a positive number, got '$PARTITIONS'"
[[ -x "$FRESHET_TANSU_BIN" ]] || die "tansu not found at $FRESHET_TANSU_BIN; run deploy/install.sh"
[[ -x "$FRESHET_PYTHON" ]] || die "python not found at $FRESHET_PYTHON; run deploy/install.sh"

if pidfile_running "$PIDFILE" tansu; then
    log "tansu already running (pid $PIDFILE_PID); log: $LOGFILE"
    wait_for_tcp "$HOST" "$PORT" "$TIMEOUT" "$PIDFILE_PID" ||
        die_with_log "$LOGFILE" "tansu (pid $PIDFILE_PID) is running but $HOST:$PORT does not accept connections"
else
    leftovers=$(pidfile_group "$PIDFILE")
    [[ -z "$leftovers" ]] ||
        die "processes from a previous tansu run are still alive ($(echo "$leftovers" | tr '\n' ' ')); run deploy/stop-broker.sh first"
    rm -f "$PIDFILE"
    if tcp_open "$HOST" "$PORT"; then
        die "port $HOST:$PORT is already in use by another process (not started by these scripts); stop it or set FRESHET_KAFKA_PORT"
    fi
    mkdir -p "$DATA"
    # tansu reads a .env file from its working directory (dotenv) and takes
    # settings from env vars (STORAGE_ENGINE, LISTENER_URL, SCHEMA_REGISTRY, ...);
    # everything that matters is passed explicitly, and these are cleared.
    t0=$SECONDS
    start_daemon tansu "$PIDFILE" "$LOGFILE" "$DATA" \
        env -u SCHEMA_REGISTRY -u OTEL_EXPORTER_OTLP_ENDPOINT -u CLUSTER_ID \
        "$FRESHET_TANSU_BIN" broker \
        --storage-engine "sqlite://tansu.db" \
        --listener-url "$URL" \
        --advertised-listener-url "$URL"
    rc=0
    wait_for_tcp "$HOST" "$PORT" "$TIMEOUT" "$DAEMON_PID" || rc=$?
    case $rc in
    0) ;;
    2) die_with_log "$LOGFILE" "tansu exited during startup" ;;
    *) die_with_log "$LOGFILE" "tansu did not accept connections on $HOST:$PORT within ${TIMEOUT}s (FRESHET_KAFKA_START_TIMEOUT); it is still running as pid $DAEMON_PID - run deploy/stop-broker.sh" ;;
    esac
    log "tansu is up on $HOST:$PORT after $((SECONDS - t0))s (pid $DAEMON_PID, data $DATA/tansu.db, log $LOGFILE)"
fi

# ---- topics -------------------------------------------------------------------------
TOPIC_LOG="$FRESHET_RUN_DIR/logs/tansu-topics.log"
# list_topics: "name partitions" per line.
list_topics() {
    local json
    json=$("$FRESHET_TANSU_BIN" topic list --broker "$URL" 2>>"$TOPIC_LOG") || return 1
    "$FRESHET_PYTHON" -c '
import json, sys
for t in json.loads(sys.stdin.read() or "[]"):
    print(t["name"], len(t.get("partitions") or []))
' <<<"$json"
}

ensure_topic() {
    local name=$1 parts=$2 have
    have=$(awk -v n="$name" '$1 == n {print $2}' <<<"$TOPICS")
    if [[ -n "$have" ]]; then
        if [[ "$have" != "$parts" ]]; then
            warn "topic $name exists with $have partitions (wanted $parts); leaving it as is"
        else
            log "topic $name exists ($have partitions)"
        fi
        return 0
    fi
    if ! "$FRESHET_TANSU_BIN" topic create --broker "$URL" --partitions "$parts" "$name" >>"$TOPIC_LOG" 2>&1; then
        # Lost a race with another creator? Then it exists now.
        TOPICS=$(list_topics) || die_with_log "$TOPIC_LOG" "could not list topics on $URL"
        awk -v n="$name" '$1 == n {f=1} END {exit !f}' <<<"$TOPICS" ||
            die_with_log "$TOPIC_LOG" "could not create topic $name on $URL"
    fi
    log "created topic $name ($parts partitions)"
}

TOPICS=''
deadline=$((SECONDS + TIMEOUT))
until TOPICS=$(list_topics); do
    ((SECONDS < deadline)) || die_with_log "$TOPIC_LOG" "could not list topics on $URL within ${TIMEOUT}s"
    sleep 1
done
ensure_topic "$TOPIC" "$PARTITIONS"
ensure_topic "$DLQ_TOPIC" 1

# ---- an index tansu's schema lacks ---------------------------------------------------
# tansu 0.6's SQLite schema keys record headers by (topition, offset_id) without an index, and
# its fetch looks up every fetched record's headers: each lookup scans the whole header table,
# so reading a topic whose records carry headers (the replicas' changelog, the DLQ) costs
# records x headers. A replica's bootstrap from a SciFact changelog (11k chunks) had not
# finished after 300 s; with this index it read 9k records in under a second (debug tansu,
# docs/replicas.md). Idempotent; tansu's own "create table if not exists" leaves it alone.
if ! "$FRESHET_PYTHON" - "$DATA/tansu.db" <<'PY' 2>>"$TOPIC_LOG"; then
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=30)
db.execute("create index if not exists freshet_header_record on header (topition, offset_id)")
db.commit()
PY
    warn "could not add the header index to $DATA/tansu.db (log: $TOPIC_LOG): reading the" \
        "changelog and the DLQ stays slow (each record's headers scan the whole table)"
fi
log "broker ready: bootstrap servers $HOST:$PORT, topics $TOPIC, $DLQ_TOPIC"
