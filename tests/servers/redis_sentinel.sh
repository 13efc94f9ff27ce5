#!/usr/bin/env bash
# Starts a Redis Sentinel group on free 127.0.0.1 ports: one master, one replica and three
# sentinels watching them as `mymaster` (quorum 2, down after 1 s, so SENTINEL FAILOVER and a
# killed master fail over within seconds).
# Prints the OUTPOST_TEST_REDIS_SENTINEL_URL export.   usage: redis_sentinel.sh STATE_DIR
STATE=${1:?usage: redis_sentinel.sh STATE_DIR}
source "$(dirname "$0")/common.sh"
DIR="$STATE/redis-sentinel"
mkdir -p "$DIR"
MASTER=$(free_port)
REPLICA=$(free_port)
for p in "$MASTER" "$REPLICA"; do
  mkdir -p "$DIR/$p"
  extra=()
  [ "$p" = "$REPLICA" ] && extra=(--replicaof 127.0.0.1 "$MASTER")
  spawn "redis-sentinel-node-$p" "$DIR/$p/log" redis-server --port "$p" --bind 127.0.0.1 \
    --save '' --appendonly no --repl-diskless-sync-delay 0 --dir "$DIR/$p" --daemonize no \
    "${extra[@]}" >/dev/null
done
for p in "$MASTER" "$REPLICA"; do wait_for redis-cli -h 127.0.0.1 -p "$p" ping; done
replica_synced() {
  redis-cli -h 127.0.0.1 -p "$REPLICA" info replication | grep -q 'master_link_status:up'
}
wait_for replica_synced
SENTINELS=()
for i in 1 2 3; do
  s=$(free_port)
  SENTINELS+=("$s")
  mkdir -p "$DIR/s$s"
  # A sentinel rewrites its config file: each gets its own.
  cat >"$DIR/s$s/sentinel.conf" <<EOC
port $s
bind 127.0.0.1
dir $DIR/s$s
sentinel monitor mymaster 127.0.0.1 $MASTER 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 5000
sentinel parallel-syncs mymaster 1
EOC
  spawn "redis-sentinel-$s" "$DIR/s$s/log" redis-server "$DIR/s$s/sentinel.conf" --sentinel \
    --daemonize no >/dev/null
done
# Ready when every sentinel knows the master, its replica and the two other sentinels.
sentinels_ready() {
  local s
  for s in "${SENTINELS[@]}"; do
    redis-cli -h 127.0.0.1 -p "$s" sentinel master mymaster >"$DIR/probe" 2>/dev/null || return 1
    grep -A1 -x 'num-slaves' "$DIR/probe" | tail -1 | grep -qx 1 || return 1
    grep -A1 -x 'num-other-sentinels' "$DIR/probe" | tail -1 | grep -qx 2 || return 1
  done
}
WAIT_SECONDS=60 wait_for sentinels_ready
log "redis sentinel: master 127.0.0.1:$MASTER, replica $REPLICA, sentinels ${SENTINELS[*]}"
echo "export OUTPOST_TEST_REDIS_SENTINEL_URL=redis-sentinel://127.0.0.1:${SENTINELS[0]},127.0.0.1:${SENTINELS[1]},127.0.0.1:${SENTINELS[2]}/mymaster"
