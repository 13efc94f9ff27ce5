#!/usr/bin/env bash
# Starts the project's Kafka mock cluster process (target outpost_kafka_mock, built from
# tests/servers/kafka_mock.cpp) and waits for its "BOOTSTRAP=<list>" line. Its stdin is kept
# open (it reads commands there) by a sleeping writer in the same process group.
# Prints the OUTPOST_TEST_KAFKA_BOOTSTRAP export.   usage: kafka_mock.sh STATE_DIR MOCK_BINARY
STATE=${1:?usage: kafka_mock.sh STATE_DIR MOCK_BINARY}
MOCK=${2:?usage: kafka_mock.sh STATE_DIR MOCK_BINARY}
source "$(dirname "$0")/common.sh"
DIR="$STATE/kafka"
mkdir -p "$DIR"
[ -x "$MOCK" ] || { log "kafka mock binary $MOCK not found"; exit 1; }
spawn kafka "$DIR/log" bash -c 'sleep 2147483647 | exec "$0"' "$MOCK" >/dev/null
has_bootstrap() { grep -q '^BOOTSTRAP=' "$DIR/log"; }
wait_for has_bootstrap
BOOTSTRAP=$(grep -m1 '^BOOTSTRAP=' "$DIR/log" | cut -d= -f2- | tr -d '\r')
log "kafka mock cluster at $BOOTSTRAP"
echo "export OUTPOST_TEST_KAFKA_BOOTSTRAP=$BOOTSTRAP"
