#!/usr/bin/env bash
# Start `freshet run` in the background (pid file, log under $FRESHET_RUN_DIR) and wait until it
# is ready (GET /readyz: the Milvus collection is loaded and every worker reads its partitions;
# loading a large collection after a Milvus restart can take a minute or more). The binary:
# $FRESHET_BIN, else target/{debug,release}/freshet.
#   FRESHET_CONFIG=path.toml and FRESHET_<SECTION>_<KEY> settings pass through.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

root="$(dirname "$FRESHET_DEPLOY_DIR")"
BIN="${FRESHET_BIN:-$root/target/${FRESHET_PROFILE:-debug}/freshet}"
[[ -x "$BIN" ]] || die "no freshet binary at $BIN: build it with 'cargo build -p freshet-cli' (or set FRESHET_BIN)"
PIDFILE="$FRESHET_RUN_DIR/pids/pipeline.pid"
LOGFILE="$FRESHET_RUN_DIR/logs/pipeline.log"
LISTEN="${FRESHET_METRICS_LISTEN:-127.0.0.1:9464}"
TIMEOUT="${FRESHET_PIPELINE_START_TIMEOUT:-300}"

if pidfile_running "$PIDFILE" freshet; then
    log "pipeline already running (pid $PIDFILE_PID); log: $LOGFILE"
    exit 0
fi
export FRESHET_PIPELINE_EMBEDDING_CACHE_PATH="${FRESHET_PIPELINE_EMBEDDING_CACHE_PATH:-$FRESHET_HOME/cache/embeddings.log}"
# The local tansu broker answers every fetch only after fetch.wait.max.ms (100 ms), with what it
# read when the fetch arrived: with librdkafka's fetch.min.bytes=1 a record waited 1.5 fetch
# waits on average (p50 157 ms produce -> consume). With a large fetch.min.bytes tansu reads
# again at the end of the wait (p50 65 ms), at the same number of fetches. Apache Kafka answers
# as soon as fetch.min.bytes are there, so this is set for the local broker only. The wait is
# halved to 50 ms here: Kafka -> worker 72 -> 48 ms mean and freshness p99 at 20 updates/s
# 488-521 -> 380-415 ms (int8 model, 60 s runs), for 8% more of a core in the idle broker.
# Shorter waits cost the default (debug) broker more than they save: with two workers idle it
# took 19-21% of a core at 50 ms, 44-51% at 10 ms and 57% at 5 ms, and on a busy 2-core machine
# freshness got worse, not better (docs/benchmarks.md, "Freshness budget").
local_broker="127.0.0.1:${FRESHET_KAFKA_PORT:-9092}"
if [[ "${FRESHET_KAFKA_BROKERS:-$local_broker}" == "$local_broker" && -z "${FRESHET_KAFKA_CONSUMER_PROPERTIES:-}" ]]; then
    export FRESHET_KAFKA_CONSUMER_PROPERTIES='{"fetch.min.bytes" = "1048576", "fetch.wait.max.ms" = "50"}'
fi
start_daemon pipeline "$PIDFILE" "$LOGFILE" "$root" "$BIN" run
wait_for_ready "http://$LISTEN/readyz" "$TIMEOUT" "$DAEMON_PID" ||
    die_with_log "$LOGFILE" "the pipeline was not ready within ${TIMEOUT}s (http://$LISTEN/readyz)"
log "pipeline ready: http://$LISTEN/metrics, /healthz, /readyz"
