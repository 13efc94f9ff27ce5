#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan, OUTPOST_FUZZ=ON: the core library and fuzz/
# only) and runs each for a bounded time on its seed corpus (fuzz/corpus/<target>). Exits 1 when
# a target crashes or breaks a property; the input that did it is kept and its path printed.
#   fuzz/run.sh [BUILD_DIR]        default <repo>/build-fuzz
#   FUZZ_RUNS=N FUZZ_SEED=S        inputs per target (default 200000) from a fixed seed (default
#                                  1): the same inputs on every machine, so a run does not pass or
#                                  fail with the machine's speed (capped at 300 s per target)
#   FUZZ_SECONDS=N                 time per target instead (a longer exploratory run; random seed)
#   FUZZ_TARGETS="url cloudevents" a subset
# Needs clang-14 and libclang-rt-14-dev (Debian).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build-fuzz}
if [ -n "${FUZZ_SECONDS:-}" ]; then
  budget=(-max_total_time="$FUZZ_SECONDS")
else
  budget=(-runs="${FUZZ_RUNS:-200000}" -seed="${FUZZ_SEED:-1}" -max_total_time=300)
fi
TARGETS=${FUZZ_TARGETS:-url event_json redis_body cloudevents config}
CXX_FUZZ=${CXX_FUZZ:-clang++-14}
CC_FUZZ=${CC_FUZZ:-clang-14}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)

t0=$SECONDS
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DOUTPOST_FUZZ=ON -DOUTPOST_INSTALL=OFF -DOUTPOST_WERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_COMPILER="$CXX_FUZZ" \
  -DCMAKE_C_COMPILER="$CC_FUZZ" "${launcher[@]}" >"$BUILD.configure.log" 2>&1 ||
  { cat "$BUILD.configure.log"; exit 1; }
cmake --build "$BUILD" -j "${OUTPOST_TEST_BUILD_JOBS:-$(nproc)}"
echo "[fuzz] built in $((SECONDS - t0))s"

WORK=$(mktemp -d /tmp/outpost-fuzz.XXXXXX)
failed=0
for t in $TARGETS; do
  mkdir -p "$WORK/$t/corpus" "$WORK/$t/artifacts"
  t1=$SECONDS
  # New inputs go to the scratch corpus (the first directory); the seeds in the repo are read only.
  if "$BUILD/fuzz/fuzz_$t" "${budget[@]}" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$WORK/$t/artifacts/" \
    "$WORK/$t/corpus" "$ROOT/fuzz/corpus/$t" >"$WORK/$t/log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/$t/log")
    echo "[fuzz] $t: ok, ${runs:-?} inputs in $((SECONDS - t1))s"
  else
    failed=1
    tail -40 "$WORK/$t/log"
    echo "[fuzz] $t: FAILED; reproduce with $BUILD/fuzz/fuzz_$t $(ls "$WORK/$t/artifacts"/* 2>/dev/null | head -1)"
  fi
done
if [ "$failed" = 0 ]; then rm -rf "$WORK"; else echo "[fuzz] inputs kept in $WORK"; fi
echo "[fuzz] $((SECONDS - t0))s"
exit "$failed"
