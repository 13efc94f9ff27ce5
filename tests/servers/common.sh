# Shared helpers for the server start scripts (sourced, not run).
# Every server binds 127.0.0.1 on a port picked at run time, keeps its files under the state
# directory given to the start script, and leaves a stop script in $STATE/stop.d/ that stops it
# by PID (never by name), so scripts/test can stop everything in a trap.

set -euo pipefail

log() { echo "[servers] $*" >&2; }

# A TCP port on 127.0.0.1 with no listener a moment ago. Ports are drawn at random from
# 10000-21999: below the kernel's ephemeral range (32768 and up), so a client connection's local
# port cannot take a server's port (or a Redis Cluster node's bus port, port + 10000) between
# this check and the server's bind; a connect that fails means nobody listens there.
free_port() {
  local p i
  for i in $(seq 1 200); do
    p=$((10000 + RANDOM % 12000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      # Also skip ports handed out earlier in this run (the server may not listen yet).
      if ! grep -qx "$p" "${STATE:-/tmp}/.ports" 2>/dev/null; then
        echo "$p" >>"${STATE:-/tmp}/.ports"
        echo "$p"
        return 0
      fi
    fi
  done
  log "no free port found"
  return 1
}

# wait_for CMD... : retries CMD every 0.1 s for up to ${WAIT_SECONDS:-30} s.
wait_for() {
  local deadline=$((SECONDS + ${WAIT_SECONDS:-30}))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out waiting for: $*"
      return 1
    fi
    sleep 0.1
  done
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# register_stop NAME SCRIPT_TEXT: stop.d/NAME.sh is run by stop_all.sh.
register_stop() {
  mkdir -p "$STATE/stop.d"
  printf '%s\n' "$2" >"$STATE/stop.d/$1.sh"
}

# A stop script body for a process group led by PID: TERM, wait up to 5 s, then KILL.
stop_pid_text() {
  local pid=$1
  cat <<EOS
if kill -0 $pid 2>/dev/null; then
  kill -TERM -- -$pid 2>/dev/null || kill -TERM $pid 2>/dev/null || true
  for _ in \$(seq 1 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- -$pid 2>/dev/null || kill -KILL $pid 2>/dev/null || true
fi
EOS
}

# spawn NAME LOG CMD...: starts CMD in its own session (so its whole group can be stopped),
# prints its PID.
spawn() {
  local name=$1 logf=$2
  shift 2
  setsid "$@" >"$logf" 2>&1 </dev/null &
  local pid=$!
  register_stop "$name" "$(stop_pid_text "$pid")"
  echo "$pid"
}
