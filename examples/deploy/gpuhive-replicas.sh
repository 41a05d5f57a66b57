#!/bin/bash
# gpuhive replicas without systemd: what gpuhive@.service does, as a plain shell loop
# (docs/how-to/replicas.md, "Without systemd").
#
#   gpuhive-replicas.sh PORT:HEALTH_PORT ...      e.g. gpuhive-replicas.sh 10101:10111 10102:10112
#
# Starts one replica per PORT:HEALTH_PORT pair (the addresses of haproxy.cfg's `server`
# lines) with the environment of /etc/gpuhive/replica.env and /etc/gpuhive/service-token.env,
# restarts each 2 s after it exits, and on SIGTERM or Ctrl-C stops them all (SIGTERM: each
# gives up the leader lock) and exits. Run it as the Hub's account, beside the Hub.
# Copy to /opt/jupyterhub/bin/gpuhive-replicas (or anywhere) and make it executable.
set -u

ETC=/etc/gpuhive
PYTHON=/opt/jupyterhub/bin/python

if [ $# -eq 0 ]; then
    echo "Usage: $0 PORT:HEALTH_PORT ...  (e.g. 10101:10111 10102:10112)" >&2
    exit 2
fi
for pair in "$@"; do
    case "$pair" in
        [0-9]*:[0-9]*) ;;
        *) echo "$0: '$pair' is not PORT:HEALTH_PORT" >&2; exit 2 ;;
    esac
done
# The same files as the unit's EnvironmentFile= lines (plain NAME=value lines).
set -a
. "$ETC/replica.env" || exit 1
. "$ETC/service-token.env" || exit 1
set +a

# One replica, restarted 2 s after it exits, until this loop is told to stop.
replica() {
    local port=${1%%:*} health=${1##*:} child=""
    trap 'kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; exit 0' TERM INT
    while :; do
        JUPYTERHUB_SERVICE_URL="http://127.0.0.1:$port" "$PYTHON" -m jupyter_gpuhive.hub \
            --config "$ETC/gpuhive_config.py" --GpuHiveService.health_port="$health" &
        child=$!
        wait "$child"
        echo "gpuhive-replicas: the replica on port $port exited ($?); restarting in 2 s" >&2
        sleep 2 &
        wait $!
    done
}

loops=()
for pair in "$@"; do
    replica "$pair" &
    loops+=("$!")
done
trap 'kill -TERM "${loops[@]}" 2>/dev/null; wait; exit 0' TERM INT
wait
