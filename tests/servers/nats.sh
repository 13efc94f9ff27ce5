#!/usr/bin/env bash
# Starts nats-server with JetStream (file store in STATE_DIR/nats) on free 127.0.0.1 ports.
# Prints the OUTPOST_TEST_NATS_URL / OUTPOST_TEST_NATS_MON_URL exports.  usage: nats.sh STATE_DIR
STATE=${1:?usage: nats.sh STATE_DIR}
source "$(dirname "$0")/common.sh"
DIR="$STATE/nats"
mkdir -p "$DIR/js"
PORT=$(free_port)
MON=$(free_port)
spawn nats "$DIR/log" nats-server -a 127.0.0.1 -p "$PORT" -m "$MON" -js -sd "$DIR/js" >/dev/null
wait_for curl -sf "http://127.0.0.1:$MON/healthz"
log "nats on 127.0.0.1:$PORT (monitor $MON)"
echo "export OUTPOST_TEST_NATS_URL=nats://127.0.0.1:$PORT"
echo "export OUTPOST_TEST_NATS_MON_URL=http://127.0.0.1:$MON"
