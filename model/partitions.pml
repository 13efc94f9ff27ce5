/*
 * Partition ownership of the PostgreSQL store (docs/postgres.md, "Partitions and owners";
 * docs/protocol-model.md maps each step to the code), and with REDIS of the partitioned Redis
 * store (docs/redis.md, "Partitions"; below). Two partitions, one key each, two events
 * per key; R relays (store objects) that take, hand over and release partitions, claim one
 * event at a time from the partitions they own, deliver it to the sink (only before the
 * claim's delivery deadline, which passes before its row lease ends: docs/relay.md, "The lease
 * deadline") and ack it. The environment expires the leases of crashed relays; a relay may be
 * paused past its partition lease only or past every lease it holds (its partitions, and then
 * its rows, can be taken over while it still believes it owns them) and may crash at any point,
 * mid-move included (after marking a partition for hand-over, before releasing it).
 *
 * Invariants (assertions): per-key order at the sink (delivering an event, the earlier one of
 * its key was delivered and the later one not yet) and in the store (an event is acked only
 * after the earlier one of its key), no stale-fence write (an ack or release takes effect only
 * for the partition's current owner under the fence its row was claimed with), one owner per
 * partition (a partition moves only once its owner released it or its lease expired), and no
 * loss (when nothing can move, every event is acked).
 *
 * CAP: the relay's lease is capped at the partition lease (Store::max_lease), so a lease of the
 * owner that expires takes its row leases in that partition with it (idealised: in the code a
 * row lease may outlive its partition's by up to one heartbeat, which is why claims still wait
 * for live row leases). MOVECHECK asserts what that buys: a partition taken after its lease
 * expired holds no live row of the old fence, so the new owner delivers the killed or paused
 * relay's events at once (docs/relay.md, "Several relays: partitions").
 *
 * REDIS: each partition's owner is the holder of its writer lease ({prefix:pK}:lock, the fence
 * in {prefix:pK}:writer). Two differences from PostgreSQL, modelled here:
 *  - a write-back (ack, nack, release of events: ack_fn.lua, nack_fn.lua, release_fn.lua, also
 *    inside settle_body.lua and settle_many.lua) checks only that the partition's fence is still
 *    the claim's (prologue.lua fence_ok) and that the event is still leased to that claim, not
 *    that the relay still holds the partition: a relay whose lease expired, or that gave the
 *    partition up, still settles its batch as long as nobody took the partition since (a taker
 *    raises the fence). The invariant asserted is that weaker one: no write after another relay
 *    took the partition (fence unchanged, owner this relay or none).
 *  - giving a partition up is the relay's compare-and-delete of its own live lease (unlock.lua;
 *    an expired lease is not deleted, it is simply movable), also while a batch of it is still
 *    open once that batch's lease ended by the relay's clock, so its ack may come after the
 *    give-up (modelled: delivery and ack are separate steps), and the writer lease is never longer
 *    than the event lease (docs/redis.md, "Single writer, fencing"), so row leases may outlive the
 *    partition's: CAP does not hold, and a new owner's claim waits for them (only expired event
 *    leases are taken back: claim_fn.lua).
 * What REDIS verifies is what the same invariants need of that weaker check: per-key order at
 * the sink and in the store, no loss, one owner per partition, no write under a moved fence.
 *
 * Broken variants: NOFENCE (a move does not raise the fence and writes are not checked against
 * it), EARLYMOVE (a partition is taken while its owner holds a live lease), STALETAKE (the new
 * owner claims rows of an older fence at once, their row lease ignored: the old owner, only
 * paused, still delivers them), MOVECHECK without CAP (row leases outlive the partition's).
 */
#ifndef R
#define R 2
#endif
#ifndef CRASHES
#define CRASHES 1
#endif
#ifndef PAUSES
#define PAUSES 1
#endif
#ifndef HANDOVERS
#define HANDOVERS 2
#endif
#define P 2
#define E 2
#define N 4                     /* P * E events: partition p holds events p*E .. p*E+E-1 */
#define NONE 0                  /* owners are relays 1..R */

byte owner[P];                  /* <table>_partitions.owner */
byte fence[P];                  /* <table>_partitions.fence */
bool plive[P];                  /* the owner's partition lease has not expired */
bool releasing[P];              /* marked for hand-over: claims skip it */
byte est[N];                    /* 0 pending, 1 leased, 2 acked (deleted) */
byte eowner[N];                 /* lease_owner (the claiming relay) */
byte efence[N];                 /* the row's fence column */
bool elive[N];                  /* the row's lease has not expired */
bool sunk[N];                   /* delivered to the sink at least once */
bool crashed[R + 1];
byte crashes = 0;
byte pauses = 0;
byte handovers = 0;             /* bounds the search: each hand-over is a move */

#define ALLACKED (est[0] == 2 && est[1] == 2 && est[2] == 2 && est[3] == 2)
/* The key's head: its lowest unacked event (events of one key are claimed in order). */
#define HEAD(p) (est[(p) * E] != 2 -> (p) * E : (p) * E + 1)
#ifdef STALETAKE
#define CLAIMABLE(e) (est[e] == 0 || (est[e] == 1 && (!elive[e] || efence[e] != fence[(e) / E])))
#else
#define CLAIMABLE(e) (est[e] == 0 || (est[e] == 1 && !elive[e]))
#endif
/* Expire every live row lease the owner of partition p holds in it (CAP). */
#define EXPIRE_ROWS(p) \
  if :: est[(p) * E] == 1 && eowner[(p) * E] == owner[p] -> elive[(p) * E] = false :: else -> skip fi; \
  if :: est[(p) * E + 1] == 1 && eowner[(p) * E + 1] == owner[p] -> elive[(p) * E + 1] = false \
     :: else -> skip fi
#ifdef NOFENCE
#define FENCED(r, e) true
#elif defined(REDIS)
#define FENCED(r, e) (fence[(e) / E] == efence[e])
#else
#define FENCED(r, e) (owner[(e) / E] == r && fence[(e) / E] == efence[e])
#endif
/* A write-back that took effect was not stale (asserted after each). */
#ifdef REDIS
#define NOT_STALE(r, e) (fence[(e) / E] == efence[e] && (owner[(e) / E] == r || owner[(e) / E] == NONE))
#else
#define NOT_STALE(r, e) (owner[(e) / E] == r && fence[(e) / E] == efence[e])
#endif
/* Giving a partition up: PostgreSQL's release step once no claim of its relay is in it; Redis's
   compare-and-delete of a live lease once the relay's batches in it settled or their lease
   ended by its clock (redis_partitioned.cpp, beat: open_until), here once the claim's delivery
   deadline passed (sooner: a superset of what the code allows). */
#ifdef REDIS
#define RELEASABLE(r, p) (owner[p] == r && plive[p] && !(busy && ce / E == p && dl))
#else
#define RELEASABLE(r, p) (owner[p] == r && !(busy && ce / E == p))
#endif
#ifdef EARLYMOVE
#define MOVABLE(r, p) (owner[p] != r)
#else
#define MOVABLE(r, p) (owner[p] != r && (owner[p] == NONE || !plive[p]))
#endif

/* A refused write-back changes nothing; the relay gives the claim up, and its row lease, no
   longer renewed, runs out (here at once: others may take the row any time after). */
#define GIVEUP \
  if :: est[ce] == 1 && eowner[ce] == r && elive[ce] -> elive[ce] = false :: else -> skip fi

/* Take a free or expired partition: the fence goes up (the <table>_rebalance take step). */
inline take(r, p) {
  atomic {
    MOVABLE(r, p) ->
    assert(owner[p] == NONE || !plive[p]);  /* one owner per partition */
#ifdef MOVECHECK
    /* taken after expiry: the old owner's rows are claimable now (capped leases) */
    assert(owner[p] == NONE ||
           !(est[(p) * E] == 1 && elive[(p) * E] && efence[(p) * E] == fence[p]) &&
           !(est[(p) * E + 1] == 1 && elive[(p) * E + 1] && efence[(p) * E + 1] == fence[p]));
#endif
    owner[p] = r;
#ifndef NOFENCE
    fence[p]++;
#endif
    plive[p] = true;
    releasing[p] = false
  }
}

/* Release a partition marked for hand-over once none of this relay's claims is in it. */
inline release_part(r, p) {
  atomic {
    RELEASABLE(r, p) && releasing[p] ->
    owner[p] = NONE;
    plive[p] = false;
    releasing[p] = false
  }
}

/* Claim the head of a partition this relay owns under a live lease, not being handed over. */
inline claim(r, p) {
  atomic {
    !busy && owner[p] == r && plive[p] && !releasing[p] && est[HEAD(p)] != 2 &&
    CLAIMABLE(HEAD(p)) ->
    ce = HEAD(p);
    est[ce] = 1;
    eowner[ce] = r;
    efence[ce] = fence[p];
    elive[ce] = true;
    busy = true;
    dl = true
  }
}

proctype relay(byte r) {
  bool busy = false;
  byte ce = 0;      /* the event in flight */
  bool dl = false;  /* its delivery deadline (relay clock) has not passed */
  bool sent = false;  /* REDIS: delivered, not acked yet */
end_loop:
  do
  :: ALLACKED -> break
  :: atomic { crashes < CRASHES -> crashes++; crashed[r] = true }; goto dead
  :: atomic {
       /* Paused past every lease it holds: they expire (the relay does not know), its
          delivery deadline (before the row lease's end) has passed too. */
       pauses < PAUSES -> pauses++;
       if :: owner[0] == r -> plive[0] = false :: else -> skip fi;
       if :: owner[1] == r -> plive[1] = false :: else -> skip fi;
       if :: busy && est[ce] == 1 && eowner[ce] == r -> elive[ce] = false :: else -> skip fi;
       dl = false
     }
#ifndef CAP
  :: atomic {
       /* Paused past its partition leases only: its row lease (longer) is still live. */
       pauses < PAUSES -> pauses++;
       if :: owner[0] == r -> plive[0] = false :: else -> skip fi;
       if :: owner[1] == r -> plive[1] = false :: else -> skip fi
     }
#endif
  :: atomic {
       /* Paused on past its row lease after its partition lease ran out or moved: the row's
          lease expires, the delivery deadline (before it) has passed. */
       busy && est[ce] == 1 && eowner[ce] == r && elive[ce] &&
       (owner[ce / E] != r || !plive[ce / E]) -> elive[ce] = false; dl = false
     }
  :: take(r, 0)
  :: take(r, 1)
  :: atomic {
       /* hand over (a surplus partition): claims skip it from now on */
       handovers < HANDOVERS && owner[0] == r && plive[0] && !releasing[0] ->
       handovers++; releasing[0] = true
     }
  :: atomic {
       handovers < HANDOVERS && owner[1] == r && plive[1] && !releasing[1] ->
       handovers++; releasing[1] = true
     }
  /* The heartbeat after a pause: a relay still the owner renews its own expired lease. */
  :: atomic { owner[0] == r && !plive[0] -> plive[0] = true }
  :: atomic { owner[1] == r && !plive[1] -> plive[1] = true }
  :: release_part(r, 0)
  :: release_part(r, 1)
  :: claim(r, 0)
  :: claim(r, 1)
#ifdef REDIS
  :: atomic {
       /* deliver to the sink (never past the claim's delivery deadline); the ack comes later,
          maybe after the deadline, after the partition was given up or taken */
       busy && dl && !sent ->
       assert(ce % E == 0 || sunk[ce - 1]);      /* key order at the sink: earlier one first */
       assert(ce % E == E - 1 || !sunk[ce + 1]); /* and never after a later one */
       sunk[ce] = true;
       sent = true
     }
  :: atomic {
       /* ack: only while the event is leased to this claim and under the claim's fence */
       busy && sent ->
       if
       :: est[ce] == 1 && eowner[ce] == r && FENCED(r, ce) ->
          assert(NOT_STALE(r, ce));  /* no stale-fence write */
          assert(ce % E == 0 || est[ce - 1] == 2);                    /* per-key order */
          est[ce] = 2
       :: else -> GIVEUP  /* refused: nothing changes */
       fi;
       busy = false;
       sent = false
     }
#else
  :: atomic {
       /* deliver to the sink (never past the claim's delivery deadline), then ack: only
          under the row's lease and the partition's fence */
       busy && dl ->
       assert(ce % E == 0 || sunk[ce - 1]);      /* key order at the sink: earlier one first */
       assert(ce % E == E - 1 || !sunk[ce + 1]); /* and never after a later one */
       sunk[ce] = true;
       if
       :: est[ce] == 1 && eowner[ce] == r && FENCED(r, ce) ->
          assert(NOT_STALE(r, ce));  /* no stale-fence write */
          assert(ce % E == 0 || est[ce - 1] == 2);                    /* per-key order */
          est[ce] = 2
       :: else -> GIVEUP  /* refused: nothing changes */
       fi;
       busy = false
     }
#endif
  :: atomic {
       /* release the event (stopping, or the renew found the lease lost) */
       busy && !sent ->
       if
       :: est[ce] == 1 && eowner[ce] == r && FENCED(r, ce) ->
          assert(NOT_STALE(r, ce));  /* no stale-fence write */
          est[ce] = 0
       :: else -> GIVEUP
       fi;
       busy = false
     }
  od;
dead:
  skip
}

/* Time passes for the dead: a crashed relay's partition and row leases expire. */
#define ROWGONE(e) crashed[eowner[e]]
active proctype expiry() {
end:
  do
#ifdef CAP
  :: atomic { owner[0] != NONE && crashed[owner[0]] && plive[0] -> plive[0] = false; EXPIRE_ROWS(0) }
  :: atomic { owner[1] != NONE && crashed[owner[1]] && plive[1] -> plive[1] = false; EXPIRE_ROWS(1) }
#else
  :: atomic { owner[0] != NONE && crashed[owner[0]] && plive[0] -> plive[0] = false }
  :: atomic { owner[1] != NONE && crashed[owner[1]] && plive[1] -> plive[1] = false }
#endif
  :: atomic { est[0] == 1 && ROWGONE(0) && elive[0] -> elive[0] = false }
  :: atomic { est[1] == 1 && ROWGONE(1) && elive[1] -> elive[1] = false }
  :: atomic { est[2] == 1 && ROWGONE(2) && elive[2] -> elive[2] = false }
  :: atomic { est[3] == 1 && ROWGONE(3) && elive[3] -> elive[3] = false }
  od
}

/* No loss: once nothing can move, every event was acked (at most R - 1 relays crash). */
active proctype no_loss() {
  timeout -> assert(ALLACKED)
}

init {
  atomic {
    byte i = 1;
    do
    :: i <= R -> run relay(i); i++
    :: else -> break
    od
  }
}
