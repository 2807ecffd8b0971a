#!/usr/bin/env bash
# The images' HEALTHCHECK: GET http://127.0.0.1:PORT/PATH must answer 200. The runtime images
# have no curl or wget; bash's /dev/tcp speaks the one HTTP/1.0 request this needs. A service
# configured for TLS on that port fails it: check such a one from outside instead.
#   freshet-healthcheck PORT [PATH]     (PATH default /healthz; exit 0 healthy, 1 not)
set -euo pipefail
port=${1:?usage: freshet-healthcheck PORT [PATH]}
path=${2:-/healthz}
exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' "$path" "$port" >&3
IFS= read -r -t 5 status <&3 || exit 1
exec 3<&-
if [[ "$status" =~ ^HTTP/1\.[01]\ 200 ]]; then exit 0; fi
echo "freshet-healthcheck: GET $path on port $port: ${status%$'\r'}" >&2
exit 1
