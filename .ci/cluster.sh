#!/usr/bin/env bash
# Starts a three-master Redis Cluster (no replicas) on 127.0.0.1:7001-7003 for the gateway's
# Redis tests, unless one already answers there with cluster_state:ok (then it does nothing).
# Prints the URL to give GATEWAY_REDIS_URL (or the gateway's redis url) on stdout, last.
#
#   GATEWAY_CLUSTER_DIR   where the nodes keep their nodes-700X.conf and logs
#                         (default /tmp/gateway-cluster)
#   GATEWAY_CLUSTER_WAIT  seconds to wait for each step (default 20)
#
# The nodes save nothing (--save "" --appendonly no): a cluster that is not ok (a node died, a
# run was cut short) is started afresh, empty, with its stale nodes-700X.conf removed so that
# `--cluster create` does not refuse the nodes as "not empty".
set -euo pipefail

readonly PORTS=(7001 7002 7003)
readonly HOST=127.0.0.1
readonly DIR="${GATEWAY_CLUSTER_DIR:-/tmp/gateway-cluster}"
readonly WAIT="${GATEWAY_CLUSTER_WAIT:-20}"
readonly URL="redis-cluster://$HOST:${PORTS[0]}?node=$HOST:${PORTS[1]}&node=$HOST:${PORTS[2]}"

die() {
    echo "cluster: $*" >&2
    exit 1
}

for tool in redis-server redis-cli; do
    command -v "$tool" >/dev/null 2>&1 \
        || die "$tool is not installed (Debian/Ubuntu: apt-get install redis-server; it brings redis-cli too)"
done

# `redis-cli -p PORT ARGS…` with a bound on each call, so a hung node cannot hang the script.
cli() {
    local port=$1
    shift
    timeout 5 redis-cli -h "$HOST" -p "$port" "$@" 2>/dev/null
}

answers() { [[ "$(cli "$1" ping)" == PONG ]]; }

down() { ! answers "$1"; }

# Every node answers and the first says the cluster is ok (a node that just died is still
# counted ok by the others until the cluster's node timeout has passed).
cluster_ok() {
    local port
    for port in "${PORTS[@]}"; do answers "$port" || return 1; done
    cli "${PORTS[0]}" cluster info | tr -d '\r' | grep -qx 'cluster_state:ok'
}

# Waits up to $WAIT seconds for `$@` to succeed; fails with `what` named otherwise.
wait_for() {
    local what=$1
    shift
    local deadline=$((SECONDS + WAIT))
    until "$@"; do
        ((SECONDS < deadline)) || die "$what within ${WAIT}s (node logs: $DIR/700X.log)"
        sleep 0.2
    done
}

if cluster_ok; then
    echo "cluster: already up on $HOST:${PORTS[0]}-${PORTS[2]}" >&2
    echo "$URL"
    exit 0
fi

# Not a healthy cluster: start it afresh. A node of an earlier, broken cluster (its config file
# in $DIR) is shut down first; it holds nothing worth keeping. Anything else on a port is not
# ours to stop.
mkdir -p "$DIR"
for port in "${PORTS[@]}"; do
    answers "$port" || continue
    [[ "$(cli "$port" config get cluster-config-file | tail -n 1)" == "$DIR/nodes-$port.conf" ]] \
        || die "something other than this script's cluster node answers on $HOST:$port; stop it or free the port"
    echo "cluster: $HOST:$port is a node of a cluster that is not ok; restarting it" >&2
    cli "$port" shutdown nosave >/dev/null || true
    wait_for "$HOST:$port did not shut down" down "$port"
done
for port in "${PORTS[@]}"; do
    rm -f "$DIR/nodes-$port.conf"
    redis-server --daemonize yes --bind "$HOST" --port "$port" \
        --cluster-enabled yes --cluster-config-file "$DIR/nodes-$port.conf" \
        --dir "$DIR" --save "" --appendonly no --logfile "$DIR/$port.log" \
        || die "redis-server did not start on $HOST:$port (see $DIR/$port.log)"
done
for port in "${PORTS[@]}"; do
    wait_for "nothing answers PING on $HOST:$port" answers "$port"
done
nodes=()
for port in "${PORTS[@]}"; do nodes+=("$HOST:$port"); done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$DIR/create.log" 2>&1 \
    || die "redis-cli --cluster create failed: $(tail -n 5 "$DIR/create.log")"
wait_for "the cluster did not reach cluster_state:ok" cluster_ok

echo "cluster: up on $HOST:${PORTS[0]}-${PORTS[2]} (data in $DIR)" >&2
echo "$URL"
