#!/usr/bin/env bash
# Start a local Milvus on 127.0.0.1:${FRESHET_MILVUS_PORT:-19530} and wait until it is healthy.
# Nothing of it listens beyond this host's loopback.
#   FRESHET_MILVUS_IMPL=standalone (default): real Milvus 2.3.5 standalone from the
#       PyPI "milvus" package (venv/bin/milvus-server), data in $FRESHET_RUN_DIR/milvus. It
#       listens on every interface and cannot be told otherwise, so milvus_launch.py runs it in
#       a network namespace of its own (loopback only) and forwards the proxy port and the
#       health port from 127.0.0.1 into it. FRESHET_MILVUS_LISTEN_ALL=1 runs it in the host's
#       namespace instead, on every interface (only behind a firewall that keeps its ports
#       private); without it, a host that allows no network namespace refuses to start it.
#       knowhere starts Milvus' search threads at nice 19, below all of Milvus' other work;
#       milvus_launch.py sets them to FRESHET_MILVUS_SEARCH_NICE (default: the nice value Milvus
#       starts at; 19 leaves them), which needs CAP_SYS_NICE, else it warns in the log.
#   FRESHET_MILVUS_IMPL=lite: milvus-lite 3.2.2 gRPC server (venv-lite, see install.sh --lite),
#       data in $FRESHET_RUN_DIR/milvus-lite, listening on 127.0.0.1 only (--host)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IMPL="${FRESHET_MILVUS_IMPL:-standalone}"
HOST=127.0.0.1
PORT="${FRESHET_MILVUS_PORT:-19530}"
TIMEOUT="${FRESHET_MILVUS_START_TIMEOUT:-120}"
# Optional pause between a stop and the next start (seconds). Not needed with
# the port handling below (see README); kept as a knob.
RESTART_GAP="${FRESHET_MILVUS_RESTART_GAP:-0}"
PIDFILE="$FRESHET_RUN_DIR/pids/milvus.pid"
LOGFILE="$FRESHET_RUN_DIR/logs/milvus.log"
STOPPED_MARK="$FRESHET_RUN_DIR/pids/milvus.stopped-at"

# Components of the standalone process that have an <component>.ip setting in
# site-packages/milvus/data/config.yaml.template (indexCoord has none in 2.3: it
# runs inside dataCoord). This makes every component register/advertise
# 127.0.0.1 instead of the host's first non-loopback address. Milvus 2.3.5
# still binds its gRPC/HTTP listeners on all interfaces (*:port) of its
# network namespace, which milvus_launch.py makes one with a loopback only;
# the embedded etcd (configured below) listens on 127.0.0.1 only.
MILVUS_COMPONENTS=(rootCoord proxy queryCoord queryNode indexNode dataCoord dataNode)

[[ "$PORT" =~ ^[0-9]+$ ]] || die "FRESHET_MILVUS_PORT must be a number, got '$PORT'"

if pidfile_running "$PIDFILE" milvus; then
    log "milvus already running (pid $PIDFILE_PID: $(proc_cmdline "$PIDFILE_PID" | cut -c1-100)...); log: $LOGFILE"
    wait_for_tcp "$HOST" "$PORT" "$TIMEOUT" "$PIDFILE_PID" ||
        die_with_log "$LOGFILE" "milvus (pid $PIDFILE_PID) is running but $HOST:$PORT does not accept connections"
    exit 0
fi
# Leftover children of a previous run (leader gone, group still alive)?
leftovers=$(pidfile_group "$PIDFILE")
[[ -z "$leftovers" ]] ||
    die "processes from a previous milvus run are still alive ($(echo "$leftovers" | tr '\n' ' ')); run deploy/stop-milvus.sh first"
rm -f "$PIDFILE"

if tcp_open "$HOST" "$PORT"; then
    die "port $HOST:$PORT is already in use by another process (not started by these scripts); stop it or set FRESHET_MILVUS_PORT"
fi
mkdir -p "$FRESHET_RUN_DIR/logs" "$FRESHET_RUN_DIR/pids"

# free_ports START COUNT: print COUNT ports >= START that can be bound on
# 127.0.0.1 with SO_REUSEADDR (like Go's listeners: TIME_WAIT leftovers are
# fine, a listening socket is not).
free_ports() {
    "$FRESHET_PYTHON" - "$1" "$2" <<'PY'
import socket, sys
start, count = int(sys.argv[1]), int(sys.argv[2])
found = []
for port in range(start, start + 1000):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        found.append(port)
    except OSError:
        pass
    finally:
        s.close()
    if len(found) == count:
        break
print(" ".join(map(str, found)))
PY
}

# busy_ports PORT...: print those of the given ports that cannot be bound now.
busy_ports() {
    "$FRESHET_PYTHON" - "$@" <<'PY'
import socket, sys
busy = []
for port in sys.argv[1:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", int(port)))
    except OSError:
        busy.append(port)
    finally:
        s.close()
print(" ".join(busy))
PY
}

# prev_ports: "--flag port" lines for the internal ports the previous run on
# this data dir used (from the config the wrapper wrote then). Reusing them
# keeps the addresses registered in etcd valid; otherwise the restarted
# components wait ~60s for the stale sessions to expire.
prev_ports() {
    local cfg="$DATA/configs/milvus.yaml"
    [[ -f "$cfg" ]] || return 0
    awk '
        /^[A-Za-z]/ { sec = $1; sub(":", "", sec) }
        /^  port:/ {
            f = ""
            if (sec == "rootCoord") f = "--root-coord-port"
            if (sec == "queryCoord") f = "--query-coord-port"
            if (sec == "queryNode") f = "--query-node-port"
            if (sec == "indexNode") f = "--index-node-port"
            if (sec == "dataCoord") f = "--data-coord-port"
            if (sec == "dataNode") f = "--data-node-port"
            if (f != "" && $2 ~ /^[0-9]+$/) print f, $2
        }
        /^  internalPort:/ && sec == "proxy" && $2 ~ /^[0-9]+$/ { print "--proxy-internal-port", $2 }
    ' "$cfg"
}

# The milvus wrapper picks the health/metrics port itself (9091, or the next
# free one) and hands it to the milvus binary as METRICS_PORT.
HEALTH_PORT=''
MILVUS_CHILD=''
find_child() {
    local p env
    for p in $(pidfile_group "$PIDFILE"); do
        [[ "$(proc_cmdline "$p")" == *"bin/milvus run standalone"* ]] || continue
        MILVUS_CHILD=$p
        env=$(tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | sed -n 's/^METRICS_PORT=//p')
        [[ -n "$env" ]] && HEALTH_PORT=$env
        return 0
    done
    return 1
}

health_standalone() {
    if [[ -z "$MILVUS_CHILD" ]]; then
        find_child || return 1
    elif ! proc_alive "$MILVUS_CHILD"; then
        fail "the milvus binary (pid $MILVUS_CHILD) exited during startup"
    fi
    [[ -n "$HEALTH_PORT" ]] || return 1
    "$FRESHET_PYTHON" - "$HEALTH_PORT" <<'PY' >/dev/null 2>&1
import sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/healthz", timeout=3) as r:
    sys.exit(0 if b"OK" in r.read() else 1)
PY
}

health_lite() {
    "$FRESHET_LITE_VENV/bin/python" - "$HOST" "$PORT" <<'PY' >/dev/null 2>&1
import sys
from pymilvus import MilvusClient
c = MilvusClient(uri=f"http://{sys.argv[1]}:{sys.argv[2]}", timeout=5)
c.list_collections()
c.close()
PY
}

EXTRA_LOGS=()
fail() {
    local f
    for f in "${EXTRA_LOGS[@]}"; do show_log_tail "$f" 20; done
    die_with_log "$LOGFILE" "$*"
}

case "$IMPL" in
standalone)
    [[ -x "$FRESHET_MILVUS_BIN" ]] || die "milvus-server not found at $FRESHET_MILVUS_BIN; run deploy/install.sh"
    [[ -x "$FRESHET_PYTHON" ]] || die "python not found at $FRESHET_PYTHON; run deploy/install.sh"
    DATA="$FRESHET_RUN_DIR/milvus"
    EXTRA_LOGS=("$DATA/logs/milvus-stderr.log" "$DATA/logs/milvus-stdout.log")
    if [[ -f "$STOPPED_MARK" ]] && ((RESTART_GAP > 0)); then
        last=$(cat "$STOPPED_MARK" 2>/dev/null || echo 0)
        wait_s=$((last + RESTART_GAP - $(date +%s)))
        if ((wait_s > 0)); then
            log "milvus was stopped $((RESTART_GAP - wait_s))s ago; waiting ${wait_s}s (FRESHET_MILVUS_RESTART_GAP=$RESTART_GAP)"
            sleep "$wait_s"
        fi
    fi
    mkdir -p "$DATA"
    # Reuse the internal ports of the previous run on this data dir.
    PORT_ARGS=()
    while read -r flag p; do
        [[ -n "$flag" ]] && PORT_ARGS+=("$flag" "$p")
    done < <(prev_ports)
    # On a proxy port other than 19530, every other port (health, embedded etcd, the
    # components) is the first free one above the proxy port, never a default: the wrapper's
    # defaults (9091, 2379, 19529, 19531, 53100, ...) belong to the Milvus on 19530, and the
    # next free one it would move to can be 9092 (Kafka's default) or one that Milvus needs
    # once it restarts. Two instances on proxy ports 20 or more apart never share a port.
    HEALTH_PORT_START=9091
    if [[ "$PORT" != 19530 ]]; then
        read -r -a near <<<"$(free_ports $((PORT + 1)) 11)"
        ((${#near[@]} == 11)) || die "could not find 11 free TCP ports above $PORT for milvus"
        HEALTH_PORT_START=${near[0]}
        if ((${#PORT_ARGS[@]} == 0)); then
            PORT_ARGS=(--root-coord-port "${near[3]}" --proxy-internal-port "${near[4]}"
                --query-coord-port "${near[5]}" --query-node-port "${near[6]}"
                --index-coord-port "${near[7]}" --index-node-port "${near[8]}"
                --data-coord-port "${near[9]}" --data-node-port "${near[10]}")
        fi
    fi
    # Embedded etcd: its ports are fixed (2379/2380) unless it gets its own
    # config file, which Milvus reads from etcd.config.path (env
    # ETCD_CONFIG_PATH; the wrapper's template has no such key). Reuse the
    # previous ports of this data dir if free, else pick free ones, so that
    # several instances (e.g. parallel tests) can coexist.
    ETCD_CONF="$DATA/freshet-etcd.yaml"
    ETCD_CLIENT_PORT='' ETCD_PEER_PORT=''
    if [[ -f "$ETCD_CONF" ]]; then
        ETCD_CLIENT_PORT=$(sed -n 's|^listen-client-urls: http://127.0.0.1:\([0-9]*\)$|\1|p' "$ETCD_CONF")
        ETCD_PEER_PORT=$(sed -n 's|^listen-peer-urls: http://127.0.0.1:\([0-9]*\)$|\1|p' "$ETCD_CONF")
    fi
    if [[ -z "$ETCD_CLIENT_PORT" || -z "$ETCD_PEER_PORT" ]] ||
        [[ -n "$(busy_ports "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT")" ]]; then
        if [[ "$PORT" != 19530 ]]; then
            ETCD_CLIENT_PORT=${near[1]} ETCD_PEER_PORT=${near[2]}
        else
            read -r ETCD_CLIENT_PORT ETCD_PEER_PORT <<<"$(free_ports 2379 2)"
        fi
        [[ -n "${ETCD_PEER_PORT:-}" ]] || die "could not find two free TCP ports for the embedded etcd"
    fi
    cat >"$ETCD_CONF" <<EOF
# written by freshet deploy/start-milvus.sh; embedded etcd, loopback only
name: default
listen-client-urls: http://127.0.0.1:$ETCD_CLIENT_PORT
advertise-client-urls: http://127.0.0.1:$ETCD_CLIENT_PORT
listen-peer-urls: http://127.0.0.1:$ETCD_PEER_PORT
initial-advertise-peer-urls: http://127.0.0.1:$ETCD_PEER_PORT
initial-cluster: default=http://127.0.0.1:$ETCD_PEER_PORT
EOF
    # milvus_launch.py == milvus-server (same arguments) with fixed port probing.
    CMD=(env "ETCD_CONFIG_PATH=$ETCD_CONF" "FRESHET_MILVUS_AVOID_PORTS=9092,${FRESHET_KAFKA_PORT:-9092}"
        "FRESHET_MILVUS_HEALTH_PORT=$HEALTH_PORT_START"
        "$FRESHET_PYTHON" "$FRESHET_DEPLOY_DIR/milvus_launch.py"
        --data "$DATA" --proxy-port "$PORT" --etcd-port "$ETCD_CLIENT_PORT" "${PORT_ARGS[@]}")
    for c in "${MILVUS_COMPONENTS[@]}"; do CMD+=(--extra-config "$c.ip=$HOST"); done
    # Search not-yet-sealed (growing) segments exactly. Milvus 2.3 answers them through an
    # "interim" IVF index (nlist 128, nprobe 16) by default: approximate, and trained anew for
    # every segment, so identical ingests scored SciFact vector nDCG@10 anywhere from 0.63 to
    # 0.66. A pipeline that keeps the collection fresh keeps much of it in growing segments.
    CMD+=(--extra-config queryNode.segcore.interimIndex.enableIndex=false)
    # Writes become searchable when the query node consumes the time tick that follows them;
    # Milvus ticks every 200 ms by default, which alone added ~100 ms to the vector route's
    # freshness. With the pipeline's writes at 20 updates/s, each update followed through the
    # node (bench-freshness), both routes showed an update at p50 54-55 ms at a 15 ms tick,
    # 47-51 at 10 and 47-48 at 5 (the vector route ~15, ~11 and ~7 ms behind BM25), for an idle
    # Milvus at 11-17%, 19-29% and 22-31% of a core; a SciFact ingest took 11-20% longer on two
    # cores at 5 than at 15 (set 15 for a bulk load there). 5 keeps the default install at the
    # freshness goal, p50 <= 50 ms (docs/benchmarks.md, "Freshness budget").
    CMD+=(--extra-config "proxy.timeTickInterval=${FRESHET_MILVUS_TIME_TICK_MS:-5}")
    # Any other Milvus setting: FRESHET_MILVUS_EXTRA_CONFIG="section.key=value section.key=value".
    for kv in ${FRESHET_MILVUS_EXTRA_CONFIG:-}; do CMD+=(--extra-config "$kv"); done
    HEALTH=health_standalone
    ;;
lite)
    [[ -x "$FRESHET_MILVUS_LITE_BIN" ]] || die "milvus-lite not found at $FRESHET_MILVUS_LITE_BIN; run deploy/install.sh --lite"
    DATA="$FRESHET_RUN_DIR/milvus-lite"
    mkdir -p "$DATA"
    CMD=("$FRESHET_MILVUS_LITE_BIN" server --data-dir "$DATA" --host "$HOST" --port "$PORT")
    HEALTH=health_lite
    ;;
*) die "FRESHET_MILVUS_IMPL must be 'standalone' or 'lite', got '$IMPL'" ;;
esac

t0=$SECONDS
start_daemon "milvus ($IMPL)" "$PIDFILE" "$LOGFILE" "$DATA" "${CMD[@]}"
PID=$DAEMON_PID
log "waiting up to ${TIMEOUT}s for milvus ($IMPL) on $HOST:$PORT (data: $DATA)"
deadline=$((SECONDS + TIMEOUT))
healthy=0
while ((SECONDS < deadline)); do
    proc_alive "$PID" || fail "milvus ($IMPL) exited during startup"
    if tcp_open "$HOST" "$PORT" && "$HEALTH"; then
        healthy=1
        break
    fi
    sleep 1
done
((healthy)) ||
    fail "milvus ($IMPL) did not become healthy within ${TIMEOUT}s (FRESHET_MILVUS_START_TIMEOUT); it is still running as pid $PID - run deploy/stop-milvus.sh"
rm -f "$STOPPED_MARK"
if [[ "$IMPL" == standalone ]]; then
    # The wrapper moves the proxy silently if $PORT got taken between our check and its bind.
    cfg_port=$(awk '/^proxy:/{p=1;next} /^[^ #]/{p=0} p && /^  port:/{print $2; exit}' "$DATA/configs/milvus.yaml" 2>/dev/null || true)
    [[ "$cfg_port" == "$PORT" ]] ||
        fail "milvus proxy was configured on port '${cfg_port}' instead of $PORT (port taken?); stop it with deploy/stop-milvus.sh"
    log "milvus health endpoint: http://127.0.0.1:$HEALTH_PORT/healthz; embedded etcd on 127.0.0.1:$ETCD_CLIENT_PORT/$ETCD_PEER_PORT"
fi
log "milvus ($IMPL) is healthy on $HOST:$PORT after $((SECONDS - t0))s (pid $PID, data $DATA, log $LOGFILE)"
