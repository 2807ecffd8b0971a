#!/usr/bin/env bash
# Installs Prometheus and promtool from Debian's `prometheus` package into
# "$FRESHET_HOME/tools/prometheus" (bin/prometheus, bin/promtool), for the monitoring checks:
# `promtool check`/`test rules` over deploy/prometheus (.ci/fast) and the scrape test
# tests/tests/prometheus_e2e.rs. `apt-get download` + `dpkg-deb -x`: no root, no system service,
# nothing outside that directory. Run by install.sh.
# Idempotent: a supported version already there is kept (--force reinstalls it). Without apt
# (another system), install Prometheus 2.42 or a later 2.x there yourself, or pass
# install.sh --no-prometheus (the monitoring checks then fail and say so).
# Environment: FRESHET_HOME (default ~/.freshet). Exit 0 ok, 1 failed, 2 bad arguments.
set -euo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The version the rules, the dashboard and the tests were checked with (Debian 12's package);
# a later 2.x (another distribution's package) is taken too.
PROMETHEUS_VERSION=2.42.0
supported() { [[ "$1" =~ version\ 2\.(4[2-9]|[5-9][0-9])\. ]]; }

force=0
for arg in "$@"; do
    case "$arg" in
    --force) force=1 ;;
    *)
        echo "install-prometheus: unknown argument: $arg (only --force)" >&2
        exit 2
        ;;
    esac
done

out="$FRESHET_HOME/tools/prometheus"
have() { "$out/bin/$1" --version 2>&1 | head -n 1; }
if [[ $force == 0 && -x "$out/bin/prometheus" && -x "$out/bin/promtool" ]] &&
    supported "$(have prometheus)" && supported "$(have promtool)"; then
    log "prometheus present: $out ($(have prometheus))"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    die "apt-get and dpkg-deb are needed to fetch Debian's prometheus package; install Prometheus $PROMETHEUS_VERSION into $out/bin yourself"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A new machine may have no package lists yet: refresh them once (as root or with sudo) and retry.
if ! (cd "$work" && apt-get download prometheus >"$work/download.log" 2>&1); then
    sudo=()
    if ((EUID != 0)) && command -v sudo >/dev/null 2>&1; then sudo=(sudo); fi
    log "apt-get download prometheus failed; refreshing the package lists and trying again"
    { "${sudo[@]}" apt-get update && (cd "$work" && apt-get download prometheus); } >>"$work/download.log" 2>&1 ||
        die "apt-get download prometheus failed: $(tail -n 3 "$work/download.log")"
fi
deb=("$work"/prometheus_*.deb)
[[ -f "${deb[0]}" ]] || die "apt-get download prometheus wrote no .deb"
dpkg-deb -x "${deb[0]}" "$work/deb"
for b in prometheus promtool; do
    [[ -x "$work/deb/usr/bin/$b" ]] || die "$(basename "${deb[0]}") holds no usr/bin/$b"
done
v=$("$work/deb/usr/bin/prometheus" --version 2>&1 | head -n 1)
supported "$v" ||
    die "the package's prometheus is '$v'; deploy/prometheus was checked with $PROMETHEUS_VERSION (2.42 to 2.x are taken): install such a release's prometheus and promtool into $out/bin yourself"
[[ "$v" == *"version $PROMETHEUS_VERSION"* ]] || warn "prometheus '$v' is not $PROMETHEUS_VERSION, the version deploy/prometheus was checked with"
rm -rf "$out.tmp"
mkdir -p "$out.tmp/bin"
cp "$work/deb/usr/bin/prometheus" "$work/deb/usr/bin/promtool" "$out.tmp/bin/"
rm -rf "$out"
mv "$out.tmp" "$out"
log "installed $(basename "${deb[0]}") into $out: $v"
