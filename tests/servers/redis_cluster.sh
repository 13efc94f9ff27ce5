#!/usr/bin/env bash
# Starts a 3-master Redis Cluster (no replicas) on free 127.0.0.1 ports.
# Prints the OUTPOST_TEST_REDIS_CLUSTER_URL export.   usage: redis_cluster.sh STATE_DIR
STATE=${1:?usage: redis_cluster.sh STATE_DIR}
source "$(dirname "$0")/common.sh"
DIR="$STATE/redis-cluster"
mkdir -p "$DIR"
PORTS=()
for i in 1 2 3; do
  # The cluster bus listens on port + 10000: keep it clear of the other servers' ports too.
  while :; do
    p=$(free_port)
    if ! grep -qx "$((p + 10000))" "$STATE/.ports" && ! port_open $((p + 10000)); then break; fi
  done
  echo $((p + 10000)) >>"$STATE/.ports"
  PORTS+=("$p")
  mkdir -p "$DIR/$p"
  spawn "redis-cluster-$p" "$DIR/$p/log" redis-server --port "$p" --bind 127.0.0.1 \
    --cluster-enabled yes --cluster-config-file "$DIR/$p/nodes.conf" --cluster-node-timeout 2000 \
    --save '' --appendonly no --dir "$DIR/$p" --daemonize no >/dev/null
done
for p in "${PORTS[@]}"; do wait_for redis-cli -h 127.0.0.1 -p "$p" ping; done
redis-cli --cluster create "127.0.0.1:${PORTS[0]}" "127.0.0.1:${PORTS[1]}" "127.0.0.1:${PORTS[2]}" \
  --cluster-yes >"$DIR/create.log" 2>&1 || { cat "$DIR/create.log" >&2; exit 1; }
cluster_ok() {
  for p in "${PORTS[@]}"; do
    redis-cli -h 127.0.0.1 -p "$p" cluster info | grep -q 'cluster_state:ok' || return 1
  done
}
wait_for cluster_ok
log "redis cluster on 127.0.0.1:${PORTS[*]}"
echo "export OUTPOST_TEST_REDIS_CLUSTER_URL=redis://127.0.0.1:${PORTS[0]},127.0.0.1:${PORTS[1]},127.0.0.1:${PORTS[2]}/0"
