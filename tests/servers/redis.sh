#!/usr/bin/env bash
# Starts a standalone redis-server on 127.0.0.1:<free port>, no persistence.
# Prints the OUTPOST_TEST_REDIS_URL export.   usage: redis.sh STATE_DIR
STATE=${1:?usage: redis.sh STATE_DIR}
source "$(dirname "$0")/common.sh"
DIR="$STATE/redis"
mkdir -p "$DIR"
PORT=$(free_port)
spawn redis "$DIR/log" redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$DIR" --daemonize no >/dev/null
wait_for redis-cli -h 127.0.0.1 -p "$PORT" ping
log "redis on 127.0.0.1:$PORT"
echo "export OUTPOST_TEST_REDIS_URL=redis://127.0.0.1:$PORT/0"
