#!/usr/bin/env bash
# Stops every server started under STATE_DIR by the start scripts (by PID, in reverse order).
STATE=${1:?usage: stop_all.sh STATE_DIR}
[ -d "$STATE/stop.d" ] || exit 0
for f in $(ls -r "$STATE/stop.d"/*.sh 2>/dev/null); do
  bash "$f" || true
  rm -f "$f"
done
