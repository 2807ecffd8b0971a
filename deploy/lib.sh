# shellcheck shell=bash
# Shared helpers for the freshet deploy scripts. Source it, do not run it:
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Layout:
#   FRESHET_HOME     (default $HOME/.freshet)   installed things: tools/bin/tansu,
#                                                venv/, venv-lite/, venv-llama/, venv-pathway/, models/, logs/, env.sh
#   FRESHET_RUN_DIR  (default $FRESHET_HOME/run) runtime state: tansu/, milvus/, logs/, pids/

if [[ -z "${BASH_VERSION:-}" ]]; then
    echo "freshet deploy: lib.sh needs bash" >&2
    exit 1
fi

FRESHET_DEPLOY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${FRESHET_HOME:-}" ]]; then
    [[ -n "${HOME:-}" ]] || { echo "freshet deploy: neither FRESHET_HOME nor HOME is set" >&2; exit 1; }
    FRESHET_HOME="$HOME/.freshet"
fi

# Load "$FRESHET_HOME/env.sh" (written by install.sh) if present. Variables
# already set in the caller's environment win over the file.
if [[ -f "$FRESHET_HOME/env.sh" ]]; then
    _freshet_saved=()
    for _v in FRESHET_HOME FRESHET_RUN_DIR FRESHET_TANSU_BIN FRESHET_MILVUS_BIN FRESHET_MILVUS_LITE_BIN \
        FRESHET_PYTHON FRESHET_LLAMA_PYTHON FRESHET_PATHWAY_PYTHON ORT_DYLIB_PATH; do
        if [[ -n "${!_v:-}" ]]; then _freshet_saved+=("$_v=${!_v}"); fi
    done
    # shellcheck disable=SC1091 # written by install.sh at run time, not a file of the repository
    . "$FRESHET_HOME/env.sh"
    for _v in "${_freshet_saved[@]}"; do export "${_v?}"; done
    unset _v _freshet_saved
fi
FRESHET_RUN_DIR="${FRESHET_RUN_DIR:-$FRESHET_HOME/run}"
export FRESHET_HOME FRESHET_RUN_DIR FRESHET_DEPLOY_DIR

FRESHET_TANSU_BIN="${FRESHET_TANSU_BIN:-$FRESHET_HOME/tools/bin/tansu}"
FRESHET_VENV="${FRESHET_VENV:-$FRESHET_HOME/venv}"
FRESHET_LITE_VENV="${FRESHET_LITE_VENV:-$FRESHET_HOME/venv-lite}"
FRESHET_LLAMA_VENV="${FRESHET_LLAMA_VENV:-$FRESHET_HOME/venv-llama}"
FRESHET_PATHWAY_VENV="${FRESHET_PATHWAY_VENV:-$FRESHET_HOME/venv-pathway}"
FRESHET_PYTHON="${FRESHET_PYTHON:-$FRESHET_VENV/bin/python}"
FRESHET_MILVUS_BIN="${FRESHET_MILVUS_BIN:-$FRESHET_VENV/bin/milvus-server}"
FRESHET_MILVUS_LITE_BIN="${FRESHET_MILVUS_LITE_BIN:-$FRESHET_LITE_VENV/bin/milvus-lite}"
FRESHET_LLAMA_PYTHON="${FRESHET_LLAMA_PYTHON:-$FRESHET_LLAMA_VENV/bin/python}"
FRESHET_PATHWAY_PYTHON="${FRESHET_PATHWAY_PYTHON:-$FRESHET_PATHWAY_VENV/bin/python}"

FRESHET_LOG_TAG="${FRESHET_LOG_TAG:-$(basename "${0:-freshet}" .sh)}"

log() { printf '[%s %s] %s\n' "$FRESHET_LOG_TAG" "$(date +%H:%M:%S)" "$*" >&2; }
warn() { log "WARNING: $*"; }
die() {
    log "ERROR: $*"
    exit 1
}

# Print the last lines of a log file (to stderr), framed, if it exists.
show_log_tail() {
    local file=$1 lines=${2:-40}
    if [[ -s "$file" ]]; then
        printf -- '----- last %s lines of %s -----\n' "$lines" "$file" >&2
        tail -n "$lines" "$file" | cut -c1-300 >&2 || true
        printf -- '----- end of %s -----\n' "$file" >&2
    else
        printf -- '(log %s is empty or missing)\n' "$file" >&2
    fi
}

# die, but first show the tail of a log file.
die_with_log() {
    local file=$1
    shift
    show_log_tail "$file"
    die "$* (full log: $file)"
}

require_cmd() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || die "required command '$c' not found in PATH"
    done
}

# tcp_open HOST PORT: succeed if something accepts TCP connections there.
tcp_open() {
    local host=$1 port=$2
    # shellcheck disable=SC2016 # $1 and $2 are the inner shell's arguments, expanded there
    timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$host" "$port" >/dev/null 2>&1
}

# wait_for_tcp HOST PORT TIMEOUT_SECONDS [PID]: wait until the port accepts
# connections. If PID is given, give up early when that process dies.
wait_for_tcp() {
    local host=$1 port=$2 timeout_s=$3 pid=${4:-}
    local deadline=$((SECONDS + timeout_s))
    while ((SECONDS < deadline)); do
        if tcp_open "$host" "$port"; then
            return 0
        fi
        if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
            return 2
        fi
        sleep 0.5
    done
    return 1
}

# wait_for_ready URL TIMEOUT_SECONDS [PID]: wait until GET URL answers 200 (a /readyz
# endpoint), logging what the service says it waits for every 10 s. Gives up early when PID
# dies. Uses bash's /dev/tcp (no curl needed); URL is http://HOST:PORT/PATH.
wait_for_ready() {
    local url=$1 timeout_s=$2 pid=${3:-}
    local rest=${url#http://}
    local hostport=${rest%%/*} path="/${rest#*/}"
    local host=${hostport%:*} port=${hostport##*:}
    local deadline=$((SECONDS + timeout_s)) next_log=$((SECONDS + 10)) answer=""
    while ((SECONDS < deadline)); do
        # shellcheck disable=SC2016 # $1..$3 are the inner shell's arguments, expanded there
        answer=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2" || exit 1
            printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$3" "$1" >&3; cat <&3' \
            _ "$host" "$port" "$path" 2>/dev/null || true)
        if [[ "$answer" == "HTTP/1."*" 200 "* ]]; then
            return 0
        fi
        if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
            return 2
        fi
        if ((SECONDS >= next_log)); then
            log "waiting for $url: ${answer##*$'\n'}"
            next_log=$((SECONDS + 10))
        fi
        sleep 0.5
    done
    return 1
}

# ---------------------------------------------------------------------------
# /proc helpers. /proc/PID/stat is "pid (comm) state ppid pgrp session ...";
# comm may contain spaces and parentheses, so split after the last ')'.
# Fields after comm: [0]=state [1]=ppid [2]=pgrp [3]=session ... [19]=starttime
_proc_stat_fields() {
    local pid=$1 stat
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    printf '%s\n' "$stat"
}

proc_starttime() {
    local -a f
    read -r -a f <<<"$(_proc_stat_fields "$1")" && ((${#f[@]} > 19)) || return 1
    printf '%s\n' "${f[19]}"
}

proc_pgid() {
    local -a f
    read -r -a f <<<"$(_proc_stat_fields "$1")" && ((${#f[@]} > 2)) || return 1
    printf '%s\n' "${f[2]}"
}

proc_state() {
    local -a f
    read -r -a f <<<"$(_proc_stat_fields "$1")" && ((${#f[@]} > 0)) || return 1
    printf '%s\n' "${f[0]}"
}

proc_cmdline() {
    local pid=$1
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline"
}

# proc_alive PID: exists and is not a zombie.
proc_alive() {
    local st
    st=$(proc_state "$1") || return 1
    [[ "$st" != Z && "$st" != X ]]
}

# group_members PGID [MIN_STARTTIME]: pids (one per line) of live processes in
# process group PGID that started at or after MIN_STARTTIME. One cat + awk
# over /proc/*/stat (cheap enough to poll); fields are counted after the last
# ") " because comm may contain spaces and parentheses.
group_members() {
    local pgid=$1 min_start=${2:-0}
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v pg="$pgid" -v ms="$min_start" '{
        pid = $1; rest = $0
        sub(/.*\) /, "", rest)
        n = split(rest, f, " ")
        if (n >= 20 && f[3] == pg && f[1] != "Z" && f[1] != "X" && f[20] + 0 >= ms + 0) print pid
    }'
    return 0
}

# ---------------------------------------------------------------------------
# pid files. Format: "PID STARTTIME" on one line. The process is always
# started as the leader of a new session/process group (setsid), so its PGID
# equals PID and its whole tree can be signalled without touching anything
# else.

# pidfile_read FILE -> sets PIDFILE_PID and PIDFILE_START, fails if unreadable.
pidfile_read() {
    local file=$1 line
    PIDFILE_PID='' PIDFILE_START=''
    [[ -f "$file" ]] || return 1
    read -r line <"$file" || [[ -n "$line" ]] || return 1
    PIDFILE_PID=${line%% *}
    PIDFILE_START=${line#* }
    [[ "$PIDFILE_PID" =~ ^[0-9]+$ && "$PIDFILE_START" =~ ^[0-9]+$ ]] || return 1
}

# pidfile_running FILE PATTERN: the recorded process is alive, is the same
# process (same start time) and its command line contains PATTERN.
pidfile_running() {
    local file=$1 pattern=$2 start cmd
    pidfile_read "$file" || return 1
    proc_alive "$PIDFILE_PID" || return 1
    start=$(proc_starttime "$PIDFILE_PID") || return 1
    [[ "$start" == "$PIDFILE_START" ]] || return 1
    cmd=$(proc_cmdline "$PIDFILE_PID") || return 1
    [[ "$cmd" == *"$pattern"* ]]
}

# pidfile_group FILE: print live members of the recorded process group.
# Safe even when the leader already died: the kernel does not reuse a PID
# while it is still some process group's id, so processes whose pgid is the
# recorded PID (and started no earlier than it) belong to the group we made.
pidfile_group() {
    local file=$1 cur
    pidfile_read "$file" || return 0
    if [[ -e "/proc/$PIDFILE_PID" ]]; then
        cur=$(proc_starttime "$PIDFILE_PID" 2>/dev/null) || cur=''
        # PID reused by an unrelated process => our group is gone.
        if [[ -n "$cur" && "$cur" != "$PIDFILE_START" ]]; then
            return 0
        fi
    fi
    group_members "$PIDFILE_PID" "$PIDFILE_START"
}

# start_daemon NAME PIDFILE LOGFILE WORKDIR CMD...: start CMD in WORKDIR as a
# new session leader, stdout+stderr appended to LOGFILE, and record its pid.
# Sets DAEMON_PID.
start_daemon() {
    local name=$1 pidfile=$2 logfile=$3 workdir=$4
    shift 4
    mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")" "$workdir"
    {
        printf '\n===== %s: starting %s =====\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$name"
        printf 'cwd: %s\ncmd:' "$workdir"
        printf ' %q' "$@"
        printf '\n'
    } >>"$logfile"
    # Without job control a background job is not a group leader, so setsid
    # calls setsid(2) in place and execs CMD: $! is CMD's pid == its pgid.
    (cd "$workdir" && exec setsid "$@" </dev/null >>"$logfile" 2>&1) &
    DAEMON_PID=$!
    local start=""
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        start=$(proc_starttime "$DAEMON_PID" 2>/dev/null) && break
        sleep 0.1
    done
    [[ -n "$start" ]] || die_with_log "$logfile" "$name exited immediately after start"
    printf '%s %s\n' "$DAEMON_PID" "$start" >"$pidfile.tmp"
    mv -f "$pidfile.tmp" "$pidfile"
    # The job must not be reaped/waited by this shell when it exits.
    disown "$DAEMON_PID" 2>/dev/null || true
    log "started $name: pid $DAEMON_PID, log $logfile"
}

# tansu_build_file BIN: where install.sh records how the tansu at BIN was compiled
# (tools/bin/tansu -> tools/tansu.build).
tansu_build_file() { printf '%s/tansu.build' "$(dirname "$(dirname "$1")")"; }

# tansu_build_of BIN: debug, optimised or release as install.sh recorded it; "debug" where
# nothing is recorded (a broker built before the record, or by hand).
tansu_build_of() {
    local f b
    f=$(tansu_build_file "$1")
    b=$(cat "$f" 2>/dev/null || true)
    case "$b" in debug | optimised | release) printf '%s' "$b" ;; *) printf debug ;; esac
}

# tansu_build_wanted: FRESHET_TANSU_BUILD (debug, optimised or release; default optimised).
tansu_build_wanted() {
    local b="${FRESHET_TANSU_BUILD:-optimised}"
    case "$b" in
    debug | optimised | release) printf '%s' "$b" ;;
    *) die "FRESHET_TANSU_BUILD must be debug, optimised or release (got '$b')" ;;
    esac
}

# local_broker_fetch_settings: the consumer settings for the local tansu broker, exported as
# FRESHET_KAFKA_CONSUMER_PROPERTIES unless the brokers are others or the variable is set.
# tansu 0.6 holds every fetch for fetch.wait.max.ms: it reads the log when the fetch arrives,
# sleeps the rest of the wait and answers (tansu-storage's service/fetch.rs). With librdkafka's
# fetch.min.bytes=1 it answers with what it read when the fetch arrived, so a record waited 1.5
# fetch waits on average; with a large fetch.min.bytes it reads again at the end of the wait and
# answers with that, so a record waits half a wait on average, at the same number of fetches.
# Apache Kafka answers as soon as fetch.min.bytes are there, so this is set for the local broker
# only. The wait is the trade between a record's wait and the broker's CPU, which grows with the
# fetch rate and with an unoptimised build: the debug build, idle with the pipeline's two
# workers fetching, took 14% of a core at 50 ms and 32% at 20 ms; the optimised build 8% at
# 50 ms, 16% at 20 and 24% at 10 (docs/benchmarks.md, "Freshness budget"). So 20 ms for the
# optimised and release builds (freshness p50 at 20 updates/s 95 against 112 ms for the debug
# build at 50), 50 ms for a debug build. The pipeline's workers and query replicas (which read
# the changelog) use it.
local_broker_fetch_settings() {
    local local_broker="127.0.0.1:${FRESHET_KAFKA_PORT:-9092}" wait=20
    if [[ "${FRESHET_KAFKA_BROKERS:-$local_broker}" == "$local_broker" && -z "${FRESHET_KAFKA_CONSUMER_PROPERTIES:-}" ]]; then
        [[ "$(tansu_build_of "$FRESHET_TANSU_BIN")" == debug ]] && wait=50
        export FRESHET_KAFKA_CONSUMER_PROPERTIES="{\"fetch.min.bytes\" = \"1048576\", \"fetch.wait.max.ms\" = \"$wait\"}"
    fi
}

# query_node_name: the name of the query node start-query.sh / stop-query.sh act on
# ($FRESHET_QUERY_NAME, default "query"): its pid file and log are named after it.
query_node_name() {
    local name="${FRESHET_QUERY_NAME:-query}"
    [[ "$name" =~ ^[A-Za-z0-9_-]+$ ]] || die "FRESHET_QUERY_NAME must be letters, digits, - or _ (got '$name')"
    printf '%s' "$name"
}

# start_http_service NAME BINARY PREFIX DEFAULT_LISTEN DEFAULT_TIMEOUT_S WHAT ROUTES: start a
# freshet HTTP service (the query node, the ingest service) in the background with a pid file
# and a log under $FRESHET_RUN_DIR, and wait until it listens. The binary is $<PREFIX>_BIN, else
# target/{debug,release}/BINARY; it listens on $<PREFIX>_LISTEN (default DEFAULT_LISTEN) and
# must be up within $<PREFIX>_START_TIMEOUT seconds. WHAT names it in messages, ROUTES ends the
# line saying it is up. FRESHET_CONFIG and FRESHET_<SECTION>_<KEY> pass through.
start_http_service() {
    local name=$1 binary=$2 prefix=$3 default_listen=$4 default_timeout=$5 what=$6 routes=$7
    local root bin_var="${prefix}_BIN" listen_var="${prefix}_LISTEN" timeout_var="${prefix}_START_TIMEOUT"
    root="$(dirname "$FRESHET_DEPLOY_DIR")"
    local bin="${!bin_var:-$root/target/${FRESHET_PROFILE:-debug}/$binary}"
    [[ -x "$bin" ]] || die "no $binary binary at $bin: build it with 'cargo build -p $binary' (or set $bin_var)"
    local pidfile="$FRESHET_RUN_DIR/pids/$name.pid" logfile="$FRESHET_RUN_DIR/logs/$name.log"
    local listen="${!listen_var:-$default_listen}" timeout="${!timeout_var:-$default_timeout}"
    if pidfile_running "$pidfile" "$binary"; then
        log "$what already running (pid $PIDFILE_PID); log: $logfile"
        return 0
    fi
    export "$listen_var=$listen"
    start_daemon "$name" "$pidfile" "$logfile" "$root" "$bin"
    wait_for_tcp "${listen%:*}" "${listen##*:}" "$timeout" "$DAEMON_PID" ||
        die_with_log "$logfile" "the $what did not come up within ${timeout}s"
    log "$what up: http://$listen ($routes)"
}

# stop_daemon NAME PIDFILE PATTERN [TIMEOUT_S]: SIGTERM the recorded process
# group, wait for every member to exit, SIGKILL after TIMEOUT_S. Only ever
# signals the group created by start_daemon.
stop_daemon() {
    local name=$1 pidfile=$2 pattern=$3 timeout_s=${4:-30}
    local members pid
    if [[ ! -f "$pidfile" ]]; then
        log "$name: not running (no pid file $pidfile)"
        return 0
    fi
    if ! pidfile_read "$pidfile"; then
        warn "$name: pid file $pidfile is unreadable; removing it"
        rm -f "$pidfile"
        return 0
    fi
    pid=$PIDFILE_PID
    if pidfile_running "$pidfile" "$pattern"; then
        [[ "$(proc_pgid "$pid")" == "$pid" ]] ||
            die "$name: pid $pid is not a process group leader; refusing to signal its group"
    elif [[ -e "/proc/$pid" ]] && proc_alive "$pid" &&
        [[ "$(proc_starttime "$pid" 2>/dev/null)" == "$PIDFILE_START" ]]; then
        die "$name: pid $pid (from $pidfile) is alive but its command line does not contain '$pattern': $(proc_cmdline "$pid"); not touching it"
    fi
    members=$(pidfile_group "$pidfile")
    if [[ -z "$members" ]]; then
        log "$name: not running (stale pid file: pid $pid is gone or now belongs to another process); removing $pidfile"
        rm -f "$pidfile"
        return 0
    fi
    log "$name: stopping process group $pid (members: $(echo "$members" | tr '\n' ' '))"
    kill -TERM -- "-$pid" 2>/dev/null || true
    local deadline=$((SECONDS + timeout_s))
    while ((SECONDS < deadline)); do
        members=$(pidfile_group "$pidfile")
        [[ -z "$members" ]] && break
        sleep 0.5
    done
    if [[ -n "$members" ]]; then
        warn "$name: still running after ${timeout_s}s (pids: $(echo "$members" | tr '\n' ' ')); sending SIGKILL"
        kill -KILL -- "-$pid" 2>/dev/null || true
        deadline=$((SECONDS + 10))
        while ((SECONDS < deadline)); do
            members=$(pidfile_group "$pidfile")
            [[ -z "$members" ]] && break
            sleep 0.2
        done
        [[ -z "$members" ]] || die "$name: processes $(echo "$members" | tr '\n' ' ') survived SIGKILL"
    fi
    rm -f "$pidfile"
    log "$name: stopped"
}
