#!/usr/bin/env bash
# Installs examples/node's packages (package-lock.json) into DEST/node_modules for the Node.js
# emit examples (tests/examples/CMakeLists.txt: the fixture of example_emit_node_*), so nothing
# is written into the source tree. Offline from GitHub: better-sqlite3 is built from source with
# the system's Node.js headers (Debian: libnode-dev, pulled in by npm via node-gyp) instead of
# downloading a prebuilt binary. Skips the install when DEST already holds this lock file's
# packages. Exit 77 (skipped) without node and npm, also under OUTPOST_TEST_REQUIRE_ALL:
# scripts/packages cannot list Debian's npm (docs/emit-contract.md, "Node.js"), so a machine
# set up by it alone may have neither; with them, every failure is one.
#   npm_ci.sh SRC DEST
set -euo pipefail
SRC=$1 DEST=$2
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "SKIP: node or npm missing (Debian: apt-get install nodejs npm)" >&2
  exit 77
fi
mkdir -p "$DEST"
stamp="$DEST/node_modules/.outpost-installed"
if [ -f "$stamp" ] && cmp -s "$SRC/package-lock.json" "$stamp" &&
  [ "$(cat "$DEST/node_modules/.outpost-node" 2>/dev/null)" = "$(node --version)" ]; then
  echo "node_modules up to date ($(node --version))"
  exit 0
fi
cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/"
cd "$DEST"
export npm_config_build_from_source=true  # no prebuilt binary from GitHub
# The headers of the running Node.js (node-gyp would otherwise download them from nodejs.org).
if [ -f /usr/include/node/common.gypi ]; then export npm_config_nodedir=/usr; fi
npm ci --no-audit --no-fund --loglevel=warn
node -e "require('better-sqlite3'); require('pg'); require('ioredis')"
cp package-lock.json "$stamp"
node --version >node_modules/.outpost-node
echo "installed for node $(node --version), npm $(npm --version)"
