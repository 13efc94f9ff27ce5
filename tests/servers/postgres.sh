#!/usr/bin/env bash
# Starts a throwaway PostgreSQL 15 cluster: initdb as the postgres user in STATE_DIR/pg,
# listening on 127.0.0.1:<free port>, socket in the data dir. Prints the OUTPOST_TEST_PG_*
# exports on stdout.   usage: postgres.sh STATE_DIR
STATE=${1:?usage: postgres.sh STATE_DIR}
source "$(dirname "$0")/common.sh"
PG_BIN=${OUTPOST_TEST_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
[ -x "$PG_BIN/initdb" ] || { log "PostgreSQL binaries not found"; exit 1; }
DATA="$STATE/pg/data"
mkdir -p "$DATA"
chmod 755 "$STATE" "$STATE/pg"
AS_PG=()
if [ "$(id -u)" = 0 ]; then
  chown -R postgres:postgres "$STATE/pg"
  AS_PG=(runuser -u postgres --)
fi
PORT=$(free_port)
"${AS_PG[@]}" "$PG_BIN/initdb" -D "$DATA" -A trust -U postgres --no-sync >"$STATE/pg/initdb.log" 2>&1 ||
  { cat "$STATE/pg/initdb.log" >&2; exit 1; }
# The port and address go into the config so that a test's plain `pg_ctl restart` keeps them.
cat >>"$DATA/postgresql.conf" <<EOC
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DATA'
fsync = on
max_connections = 200
EOC
"${AS_PG[@]}" "$PG_BIN/pg_ctl" -D "$DATA" -l "$STATE/pg/log" -w -t 60 start >&2 ||
  { cat "$STATE/pg/log" >&2; exit 1; }
register_stop postgres "$(cat <<EOS
${AS_PG[*]} $PG_BIN/pg_ctl -D $DATA -m immediate -w -t 10 stop >/dev/null 2>&1 || {
  pid=\$(head -1 $DATA/postmaster.pid 2>/dev/null); [ -n "\$pid" ] && kill -KILL \$pid 2>/dev/null; true; }
EOS
)"
wait_for "$PG_BIN/pg_isready" -h 127.0.0.1 -p "$PORT"
log "postgresql on 127.0.0.1:$PORT ($DATA)"
echo "export OUTPOST_TEST_PG_URL=postgresql://postgres@127.0.0.1:$PORT/postgres"
echo "export OUTPOST_TEST_PG_DATA=$DATA"
echo "export OUTPOST_TEST_PG_BIN=$PG_BIN"
