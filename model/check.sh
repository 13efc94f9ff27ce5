#!/usr/bin/env bash
# Model-checks the relay protocol (model/relay.pml) and the PostgreSQL and Redis stores' partition
# ownership (model/partitions.pml) with spin (docs/protocol-model.md).
#  - The correct model must verify under each fault class: every assertion (order, exclusive
#    keys, no loss, fencing) and no deadlock over the whole bounded state space, and progress
#    (<> every event acked or dead) under weak fairness.
#  - Each broken variant must produce a counterexample (the model can fail); `fail:TEXT` also
#    requires the violated assertion to contain TEXT (the invariant the variant is meant to break).
# Exits 1 if the correct model reports an error or an incomplete search, or a broken variant
# does not. Needs spin and a C compiler (Debian: spin, build-essential). About 1-2 minutes and
# under 1 GiB of memory per run on one core. Knobs: MODEL_KEEP=DIR keeps the work files.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WORK=${MODEL_KEEP:-$(mktemp -d /tmp/outpost-model.XXXXXX)}
mkdir -p "$WORK"
[ -n "${MODEL_KEEP:-}" ] || trap 'rm -rf "$WORK"' EXIT
CC=${CC:-cc}
command -v spin >/dev/null || { echo "model/check.sh: spin is not installed (apt-get install spin)" >&2; exit 1; }

failures=0
START=$SECONDS
MODEL=relay.pml  # the model the next checks run

# check NAME EXPECT(pass|fail|fail:TEXT) MODE(safety|progress) SPIN_DEFINES...
check() {
  local name=$1 expect=$2 mode=$3 want=""
  shift 3
  if [[ $expect == fail:* ]]; then
    want=${expect#fail:}
    expect=fail
  fi
  local dir=$WORK/$name t0=$SECONDS
  mkdir -p "$dir"
  cp "$HERE/$MODEL" "$dir/"
  # -O1: -O2 compiles pan.c twice as slowly and runs it no faster.
  local cflags=(-O1 -w -DCOLLAPSE -DMEMLIM=1024) run=(-m100000)
  if [ "$mode" = safety ]; then
    cflags+=(-DSAFETY)
  else
    set -- "$@" -DLIVENESS
    cflags+=(-DNFAIR=3)
    run+=(-a -f)
  fi
  (cd "$dir" && spin "$@" -a "$MODEL" >spin.log 2>&1 && "$CC" "${cflags[@]}" -o pan pan.c &&
    ./pan "${run[@]}" >pan.log 2>&1) || true
  local errors incomplete=""
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$dir/pan.log" | head -1)
  grep -qE "reached -DMEMLIM bound|max search depth too small" "$dir/pan.log" && incomplete=" (search incomplete)"
  local states what
  states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$dir/pan.log" | head -1)
  what=$(grep -m1 "^pan:1: " "$dir/pan.log" || true)
  local verdict
  if [ -z "$errors" ]; then
    verdict="FAILED (spin or pan did not run)"
    cat "$dir/spin.log" "$dir/pan.log" 2>/dev/null | tail -20
  elif [ "$expect" = pass ] && [ "$errors" = 0 ] && [ -z "$incomplete" ]; then
    verdict="ok: verified"
  elif [ "$expect" = fail ] && [ "$errors" != 0 ] && [[ $what == *"$want"* ]]; then
    verdict="ok: counterexample: ${what#pan:1: }"
  else
    verdict="FAILED: errors $errors$incomplete ${what#pan:1: }"
    if [ -f "$dir/$MODEL.trail" ]; then
      echo "--- trail of $name (spin -t):"
      (cd "$dir" && spin "$@" -t -p -g "$MODEL" 2>&1 | tail -60)
    fi
  fi
  [[ $verdict == ok* ]] || failures=$((failures + 1))
  printf '%-30s %-8s %-9s %10s states %4ss  %s\n' "$name" "$expect" "$mode" "${states:-?}" \
    "$((SECONDS - t0))" "$verdict"
}

echo "model/check.sh: spin $(spin -V | awk '{print $3}'), work files in $WORK"
# The correct protocol, one fault class at a time (together they exceed the time budget);
# each with one sink failure (refused or unavailable), two relays, batches of two, unless
# named otherwise.
none=(-DSTALLS=0 -DPAUSES=0 -DCRASHES=0 -DFAULTS=0)
check sink-failure pass safety "${none[@]}"
check stalled-keeper pass safety "${none[@]}" -DSTALLS=1
check relay-pause pass safety "${none[@]}" -DSINKFAILS=0 -DPAUSES=1
check relay-crash pass safety "${none[@]}" -DCRASHES=1
check crash-limit pass safety "${none[@]}" -DCRASHES=1 -DMAXCRASH=1
check store-restart pass safety "${none[@]}" -DFAULTS=1
check three-relays pass safety "${none[@]}" -DNR=3
check progress-sink-failure pass progress "${none[@]}"
check progress-stall pass progress "${none[@]}" -DSINKFAILS=0 -DSTALLS=1
check progress-pause pass progress "${none[@]}" -DSINKFAILS=0 -DPAUSES=1
check progress-crash pass progress "${none[@]}" -DSINKFAILS=0 -DCRASHES=1
check progress-store-restart pass progress "${none[@]}" -DSINKFAILS=0 -DFAULTS=1
# Broken variants: each must fail (with the assertion named after fail:, where given).
check broken-no-fencing fail safety "${none[@]}" -DNOFENCE -DSTALLS=1
check broken-no-head-check fail safety "${none[@]}" -DNOHEAD
check broken-ack-first fail safety "${none[@]}" -DACKFIRST -DCRASHES=1
check broken-deliver-after-deadline 'fail:!(dl[ct])' safety "${none[@]}" -DNODEADLINE \
  -DSINKFAILS=0 -DPAUSES=1
check broken-stale-delivery 'fail:stale[ct]' safety "${none[@]}" -DNODEADLINE -DNODEADLINEASSERT \
  -DSINKFAILS=0 -DPAUSES=1
check broken-loose-renew 'fail:!(dl[ct])' safety "${none[@]}" -DLOOSERENEW -DSINKFAILS=0 -DPAUSES=1
check broken-no-expiry fail progress "${none[@]}" -DNOEXPIRY -DSINKFAILS=0 -DCRASHES=1

# Partition ownership (model/partitions.pml, issue 19): two relays take, hand over and release
# two partitions while one of them may be paused past its leases and one may crash mid-move.
# Capped: the relay's lease is at most the partition lease (Store::max_lease), and then a move at
# a partition's expiry finds the old owner's rows expired. Uncapped, or taking rows of an older
# fence at once (their lease ignored) instead, breaks that or key order at the sink.
MODEL=partitions.pml
check partitions pass safety
check partitions-capped pass safety -DCAP -DMOVECHECK
check broken-partitions-no-fence 'fail:fence[' safety -DNOFENCE
check broken-partitions-early-move 'fail:plive[' safety -DEARLYMOVE
check broken-partitions-stale-take 'fail:sunk[' safety -DSTALETAKE
check broken-partitions-uncapped-move 'fail:elive[' safety -DMOVECHECK
# The Redis store's partitions (REDIS): a write-back checks the partition's fence only (not that
# the relay still holds the partition), a give-up deletes only a live lease, maybe with a batch
# still open whose ack then comes late, and row leases may outlive the partition's (no CAP). The
# same invariants hold; the same breaks still break them. Both faults with two hand-overs exceed
# the memory bound: each fault with two, both with one.
check partitions-redis-pause pass safety -DREDIS -DCRASHES=0
check partitions-redis-crash pass safety -DREDIS -DPAUSES=0
check partitions-redis-pause-crash pass safety -DREDIS -DHANDOVERS=1
check broken-partitions-redis-no-fence 'fail:fence[' safety -DREDIS -DNOFENCE
check broken-partitions-redis-early-move 'fail:plive[' safety -DREDIS -DEARLYMOVE
check broken-partitions-redis-stale-take 'fail:sunk[' safety -DREDIS -DSTALETAKE

echo "model/check.sh: $failures failed, $((SECONDS - START))s"
[ "$failures" = 0 ]
