/*
 * outpost's relay protocol as a Promela model (spin). docs/protocol-model.md maps every step
 * to the code; model/check.sh runs the checks.
 *
 * One store, NR relays, NE events. Events 0 and 1 share key A (0 before 1 in the store's
 * sequence), event 2 has key B. Each relay claims batches of up to MAXB events under a fresh
 * lease token, may claim the next batch ahead while delivering (pipelining), delivers in order,
 * checks that its lease was not reported lost, and settles (ack / nack / release), alone or
 * together with the next claim (settle_and_claim). A lease keeper renews the batches a relay
 * holds. The environment expires leases, crashes and restarts relays and fails store calls
 * (a store restart: the call took effect but the reply was lost, or it never took effect and
 * the relay gave up).
 *
 * Time is not modelled, only its order: each relay knows the deadline of each lease it holds on
 * its own monotonic clock (claim time + lease - margin, extended by each renewal); dl[t] says
 * it passed. The margin makes that deadline come before the store's expiry, so the store expires
 * a lease that a running relay holds only after the relay's deadline for it passed. A deadline
 * passes when renewals stall (a stalled keeper, a slow store: one lease, costs one of STALLS) or
 * when the whole relay process is paused (SIGSTOP, a GC or VM pause: every lease it holds, costs
 * one of PAUSES); the pause itself is any interleaving in which the relay takes no step. The
 * lease of a crashed relay or of an orphaned claim expires freely (that is the failover).
 * A relay hands an event to the sink only before its deadline (the check and the hand-off are
 * one step: the margin covers the time between them); past it, it releases the rest of the
 * batch, unless its keeper renewed first and found every event of the batch still leased to it.
 *
 * Invariants (assertions; the checks fail on the first violation):
 *   order     when the sink gets event e, every earlier event of e's key was delivered before,
 *             is dead, or used up its attempts or crashes (it will be dead-lettered unseen)
 *   deadline  no delivery starts after the lease deadline: when the sink gets e from a relay,
 *             the relay's deadline for e's batch has not passed, and e is still leased to that
 *             batch's token under an unexpired lease
 *   fresh     no stale delivery: the sink never gets an event from a batch after a newer event
 *             of its key was delivered from another batch while this batch held the event (the
 *             other batch re-claimed it, or it re-claimed the other's)
 *   exclusive no key has unexpired leases under two tokens (no key in flight in two relays)
 *   no loss   an event is acked (deleted) only after the sink got it
 *   fencing   an ack / nack / release changes an event only under the token that leases it now
 *   progress  (LIVENESS) every event is eventually acked or dead, under weak fairness, once the
 *             fault budgets are spent
 *
 * Broken variants (each must produce a counterexample): -DNOFENCE (settle calls ignore the lease
 * owner), -DNOHEAD (the ordered claim skips the head-of-key check), -DACKFIRST (the relay acks
 * before it delivers), -DNODEADLINE (the relay delivers after its deadline passed, as a relay
 * resumed from a pause did), -DLOOSERENEW (a renewal past the deadline re-arms it when no event
 * of the batch is leased to another relay, although the relay that took them over may have
 * settled them meanwhile); and for the progress check -DNOEXPIRY (the lease of a crashed relay
 * never runs out), which must produce a non-progress cycle. -DNODEADLINEASSERT leaves out the
 * deadline assertion, so that -DNODEADLINE shows its consequence: a stale delivery.
 *
 * Crash counting: a claim that takes an event whose lease expired (no outcome was recorded)
 * counts a crash, not an attempt; an event is dead-lettered after MAXATT recorded failures or
 * MAXCRASH expiries. A release (the relay gave the event back: the sink was unavailable, the
 * deadline passed, a key failed before it) counts neither.
 */

#ifndef NR
#define NR 2 /* relays */
#endif
#ifndef MAXB
#define MAXB 2 /* batch size */
#endif
#ifndef STALLS
#define STALLS 1 /* expiries of leases still held by a running relay */
#endif
#ifndef CRASHES
#define CRASHES 1 /* relay crashes (the relay restarts as a new instance) */
#endif
#ifndef FAULTS
#define FAULTS 1 /* store calls failed by a store restart */
#endif

#ifndef PAUSES
#define PAUSES 1 /* relay processes paused past the deadlines of every lease they hold */
#endif
#ifndef SINKFAILS
#define SINKFAILS 1 /* deliveries the sink fails (refused) or cannot take (unavailable) */
#endif

#define NE 3
#define MAXATT 2 /* max_attempts */
#ifndef MAXCRASH
#define MAXCRASH 2 /* max_crashes */
#endif
#define NTOK (2 * NR + NE + 1) /* token ids 1..NTOK-1 (0 = none): enough for every holder */

#define KEY(e) ((e) == 2 -> 1 : 0)
#define BIT(m, e) (((m) >> (e)) & 1)

#define PENDING 0
#define LEASED 1
#define DONE 2 /* acked: deleted or archived */
#define DEAD 3
#define BACKOFF 4 /* nacked: pending, but due only after its backoff */

/* ---- the store ------------------------------------------------------------------------- */
byte st[NE];        /* life-cycle state */
byte own[NE];       /* lease token of a LEASED event (0: none) */
byte att[NE];       /* attempts (claims counted, re-claims after an expiry not), <= MAXATT + 1 */
byte crs[NE];       /* crashes: claims of the event after its lease expired, <= MAXCRASH */
bool live[NTOK];    /* the token's lease has not expired */
byte tbatch[NTOK];  /* events claimed under the token (bit mask) */

/* ---- relays and environment ------------------------------------------------------------ */
bool held[NTOK];    /* a running relay knows the token (it holds the batch) */
bool kept[NTOK];    /* its relay's lease keeper renews it */
bool lost[NTOK];    /* a renewal reported the lease lost */
bool dl[NTOK];      /* the holding relay's deadline for the lease passed (its own clock) */
byte hr[NTOK];      /* the relay that holds the token (0 when none holds it) */
bool stale[NTOK];   /* e1 reached the sink from another batch while this one held e0 */
bool ever[NE];      /* the sink got the event at least once */
byte stalls, pauses, crashes, faults, sink_fails;
byte crash_req = NR; /* a relay asked to crash (NR: none) */

#define NEXT_IN_BATCH \
  e = (e <= 0 && BIT(cur, 0) -> 0 : (e <= 1 && BIT(cur, 1) -> 1 : (e <= 2 && BIT(cur, 2) -> 2 : 3)))
#define SETTLED(e) (st[e] == DONE || st[e] == DEAD)
#define ALL_SETTLED (SETTLED(0) && SETTLED(1) && SETTLED(2))
#define CLAIMABLE(e) (st[e] == PENDING || (st[e] == LEASED && !live[own[e]]))
#define IN_USE(t) (held[t] || own[0] == t || own[1] == t || own[2] == t)
#define RESOLVED(e) (ever[e] || st[e] == DEAD || att[e] > MAXATT || crs[e] >= MAXCRASH)

/* Only key A has two events: its leased events must not live under two tokens. */
#define EXCLUSIVE \
  !(st[0] == LEASED && st[1] == LEASED && own[0] != own[1] && live[own[0]] && live[own[1]])

/* Store::claim (ordered). One atomic store call: a fresh token, then in sequence order every
 * claimable event whose earlier events of its key are all settled or taken by this claim. */
inline claim(b, t, cdl, clast) {
  d_step {
    t = 1;
    do
    :: t < NTOK && IN_USE(t) -> t++
    :: else -> break
    od;
    assert(t < NTOK);
    b = 0; cdl = 0; clast = 0; n = 0; e = 0;
    do
    :: e < NE && n < MAXB ->
      ok = CLAIMABLE(e);
#ifndef NOHEAD
      e2 = 0;
      do
      :: e2 < e ->
        if
        :: KEY(e2) == KEY(e) && !SETTLED(e2) && !BIT(b, e2) -> ok = 0
        :: else
        fi;
        e2++
      :: else -> break
      od;
#endif
      if
      :: ok ->
        if
        :: st[e] == LEASED -> /* its lease expired with no outcome recorded: a crash */
          if
          :: crs[e] < MAXCRASH -> crs[e]++
          :: else
          fi
        :: else ->
          if
          :: att[e] <= MAXATT -> att[e]++
          :: else
          fi
        fi;
        st[e] = LEASED; own[e] = t;
        b = b | (1 << e); n++;
        if
        :: att[e] > MAXATT || crs[e] >= MAXCRASH ->
          cdl = cdl | (1 << e) /* prepare(): dead-lettered unseen */
        :: else ->
          if
          :: att[e] == MAXATT -> clast = clast | (1 << e)
          :: else
          fi
        fi
      :: else
      fi;
      e++
    :: else -> break
    od;
    tbatch[t] = b; live[t] = (b != 0); held[t] = (b != 0); lost[t] = 0; dl[t] = 0; stale[t] = 0;
    hr[t] = (b != 0 -> r : 0);
    if
    :: b != 0 -> printf("MSC: relay %d claims %d under token %d\n", r, b, t)
    :: else
    fi;
    assert(EXCLUSIVE);
    e = 0; e2 = 0; n = 0; ok = 0;
    if
    :: b == 0 -> t = 0
    :: else
    fi
  }
}

/* A claim that took effect while its reply was lost (the store restarted): the relay sees an
 * error, backs off and claims again; the events stay leased under a token nobody holds. */
inline claim_reply_lost(b, t, cdl, clast) {
  if
  :: b != 0 && faults < FAULTS ->
    d_step { faults++; held[t] = 0; hr[t] = 0; b = 0; t = 0; cdl = 0; clast = 0 }
  :: true
  fi
}

#ifdef NOFENCE
#define OWNED(e, t) (st[e] == LEASED)
#else
#define OWNED(e, t) (own[e] == t && st[e] == LEASED)
#endif

/* Store::ack + nack + release of one batch (each fenced by the token). */
inline apply_settlement() {
  d_step {
    e = 0;
    do
    :: e < NE ->
      if
      :: BIT(cur, e) && OWNED(e, ct) ->
        assert(own[e] == ct); /* fencing: no stale token changes an event */
        if
        :: BIT(acks, e) -> assert(ever[e]); st[e] = DONE /* no loss: acked after delivery */
        :: BIT(dead, e) -> st[e] = DEAD
        :: BIT(retry, e) -> st[e] = BACKOFF
        :: BIT(rels, e) -> st[e] = PENDING; att[e] = att[e] - 1 /* the attempt does not count */
        :: else -> assert(0)
        fi;
        own[e] = 0
      :: else
      fi;
      e++
    :: else -> break
    od;
    e = 0
  }
}

/* Relay::settle: a store restart may fail the call; the relay retries (a retry of a call that
 * did take effect is fenced) or, when the store stays down past its retries, gives up and
 * leaves the events to the lease expiry. */
inline settle() {
  if
  :: faults < FAULTS -> faults++ /* never took effect; given up */
  :: faults < FAULTS -> faults++; apply_settlement(); apply_settlement() /* reply lost, retried */
  :: apply_settlement()
  fi
}

#ifdef NODEADLINE
#define BEFORE_DEADLINE(t) true /* broken: delivers whatever its deadline says */
#else
#define BEFORE_DEADLINE(t) (!dl[t])
#endif

/* From e on: what was dead-lettered unseen stays dead, the rest is released. */
#define RELEASE_REST \
  do \
  :: e < NE -> \
    if \
    :: BIT(cdl, e) -> dead = dead | (1 << e) \
    :: !BIT(cdl, e) && BIT(cur, e) -> rels = rels | (1 << e) \
    :: else \
    fi; \
    e++ \
  :: else -> break \
  od; \
  e = NE /* (a statement after the loop: spin mis-compiles a d_step ending in od) */

/* e1 reaches the sink: every other batch that holds e0 must not deliver it from now on. */
#define MARK_STALE \
  e2 = 1; \
  do \
  :: e2 < NTOK -> \
    if \
    :: e2 != ct && held[e2] && BIT(tbatch[e2], 0) -> stale[e2] = 1 \
    :: else \
    fi; \
    e2++ \
  :: else -> break \
  od; \
  e2 = 0

proctype relay(byte r) {
  byte cur, ct, cdl, clast;     /* the batch being delivered: events, token, dead unseen, last try */
  byte nx, nt, ndl, nlast;      /* the batch claimed ahead */
  byte acks, retry, dead, rels, failed_keys;
  byte e, e2, n;
  bool ok;

restart:
  {
    do
    :: ALL_SETTLED -> break
    :: !ALL_SETTLED && cur == 0 ->
      claim(cur, ct, cdl, clast);
      claim_reply_lost(cur, ct, cdl, clast);
      if
      :: cur != 0 -> kept[ct] = 1 /* LeaseKeeper::arm */
      :: else
      fi
    :: !ALL_SETTLED && cur != 0 ->
      /* Pipelined: claim the next batch while this one is delivered. */
      if
      :: nx == 0 ->
        claim(nx, nt, ndl, nlast);
        claim_reply_lost(nx, nt, ndl, nlast);
        if
        :: nx != 0 -> kept[nt] = 1
        :: else
        fi
      :: true
      fi;
#ifdef ACKFIRST
      d_step { acks = cur & ~cdl; dead = 0; retry = 0; rels = 0; apply_settlement(); acks = 0 }
#endif
      /* Deliver in sequence order (Sink::deliver, then Relay::decide); each step also moves
       * e to the batch's next event. */
      d_step { e = 0; NEXT_IN_BATCH }
      do
      :: e < NE && BIT(cdl, e) -> d_step { dead = dead | (1 << e); e++; NEXT_IN_BATCH }
      :: e < NE && !BIT(cdl, e) && BIT(failed_keys, KEY(e)) ->
        /* skipped behind a failed event of its key (hold_back_failed_keys): released */
        d_step { rels = rels | (1 << e); e++; NEXT_IN_BATCH }
      :: e < NE && !BIT(cdl, e) && !BIT(failed_keys, KEY(e)) ->
        /* Each option checks the deadline in the step that hands e to the sink. */
        if
#ifndef NODEADLINE
        :: d_step {
            /* The lease deadline passed: hand nothing more to the sink; release the rest. */
            dl[ct] -> RELEASE_REST
          }
#endif
        :: d_step {
            BEFORE_DEADLINE(ct) ->
            /* order: the sink gets e only after every earlier event of its key */
            assert(e != 1 || RESOLVED(0));
#ifndef NODEADLINEASSERT
            /* deadline: no delivery starts after the lease deadline; so e is still ours */
            assert(!dl[ct] && live[ct] && own[e] == ct && st[e] == LEASED);
#endif
            /* fresh: no newer event of e's key reached the sink from another batch since
             * this batch claimed e */
            assert(e != 0 || !stale[ct]);
            if
            :: e == 1 -> MARK_STALE
            :: else
            fi;
            printf("MSC: relay %d delivers e%d (token %d)\n", r, e, ct);
            ever[e] = 1; acks = acks | (1 << e); e++; NEXT_IN_BATCH
          }
        :: d_step {
            BEFORE_DEADLINE(ct) && sink_fails < SINKFAILS ->
            /* refused: an attempt; later events of the key are held back */
            sink_fails++;
            failed_keys = failed_keys | (1 << KEY(e));
            if
            :: BIT(clast, e) -> dead = dead | (1 << e)
            :: else -> retry = retry | (1 << e)
            fi;
            e++; NEXT_IN_BATCH
          }
        :: d_step {
            BEFORE_DEADLINE(ct) && sink_fails < SINKFAILS ->
            /* unavailable: the sink is paused; the rest is released, no attempt counted */
            sink_fails++;
            RELEASE_REST
          }
        fi
      :: e == NE -> break
      od;
#ifdef ACKFIRST
      acks = 0;
#endif
      /* Relay::still_leased: LeaseKeeper::disarm, false when a renewal found the lease lost. */
      kept[ct] = 0;
      if
      :: lost[ct] -> skip /* abandoned: settle nothing; the new owner delivers it */
      :: else ->
        if
        :: nx == 0 -> atomic { settle(); claim(nx, nt, ndl, nlast) } /* settle_and_claim */
        :: true -> settle()
        fi;
        if
        :: nx != 0 -> kept[nt] = 1
        :: else
        fi
      fi;
      d_step {
        held[ct] = 0; dl[ct] = 0; stale[ct] = 0; hr[ct] = 0;
        cur = nx; ct = nt; cdl = ndl; clast = nlast;
        nx = 0; nt = 0; ndl = 0; nlast = 0;
        acks = 0; retry = 0; dead = 0; rels = 0; failed_keys = 0; e = 0
      }
    od
  } unless {
    crash_req == r ->
    d_step {
      /* kill -9: the relay and its keeper stop; its leases run out on their own */
      crash_req = NR;
      held[ct] = 0; kept[ct] = 0; held[nt] = 0; kept[nt] = 0;
      dl[ct] = 0; stale[ct] = 0; hr[ct] = 0; dl[nt] = 0; stale[nt] = 0; hr[nt] = 0;
      cur = 0; ct = 0; cdl = 0; clast = 0; nx = 0; nt = 0; ndl = 0; nlast = 0;
      acks = 0; retry = 0; dead = 0; rels = 0; failed_keys = 0; e = 0; e2 = 0; n = 0; ok = 0
    }
  };
  if
  :: !ALL_SETTLED -> goto restart /* restarted by its supervisor as a new instance */
  :: else
  fi
}

/* The relays' lease keepers (LeaseKeeper::run -> Store::renew): a renewal reports the lease
 * lost when another token took one of its events. Before the relay's deadline a renewal changes
 * nothing the model sees (the store's lease cannot have expired yet). After it, a renewal
 * re-arms the deadline (and the store's lease) only if every event of the batch is still leased
 * under the token: nobody took any of them, so nobody delivered one. Only renewals that change
 * something. */
#define STOLEN(t) \
  ((BIT(tbatch[t], 0) && own[0] != t && own[0] != 0) || \
   (BIT(tbatch[t], 1) && own[1] != t && own[1] != 0) || \
   (BIT(tbatch[t], 2) && own[2] != t && own[2] != 0))
#define OWNS(t) ((BIT(tbatch[t], 0) && own[0] == t) || (BIT(tbatch[t], 1) && own[1] == t) || \
                 (BIT(tbatch[t], 2) && own[2] == t))
#define OWNS_ALL(t) ((!BIT(tbatch[t], 0) || own[0] == t) && (!BIT(tbatch[t], 1) || own[1] == t) && \
                     (!BIT(tbatch[t], 2) || own[2] == t))
#ifdef LOOSERENEW
/* broken: re-armed as the stores' renew answers today: held unless another owner has an event */
#define REARMS(t) (!STOLEN(t))
#else
#define REARMS(t) OWNS_ALL(t)
#endif
#define RENEW(t) \
  :: d_step { \
    t < NTOK && kept[t] && !lost[t] && ((dl[t] && REARMS(t)) || STOLEN(t)) -> \
    if \
    :: STOLEN(t) -> lost[t] = 1 \
    :: else -> dl[t] = 0; live[t] = OWNS(t); printf("MSC: token %d renewed, deadline re-armed\n", t) \
    fi; \
    assert(EXCLUSIVE) \
  }

active proctype keeper() {
end:
  do
  RENEW(1) RENEW(2) RENEW(3) RENEW(4) RENEW(5) RENEW(6) RENEW(7) RENEW(8) RENEW(9) RENEW(10)
  od
}

/* Time: the store's clock expires leases (lease_until passes; a lease a running relay holds
 * only after that relay's deadline for it passed) and ends backoffs (due_at passes); a relay's
 * deadline passes for one lease (renewals stall) or for all it holds (the process is paused). */
#define EXPIRE(t) \
  :: d_step { \
    t < NTOK && live[t] && (held[t] -> dl[t] : ORPHAN_EXPIRES) -> \
    live[t] = 0; printf("MSC: the lease of token %d expires\n", t) \
  }
#define DEADLINE(t) \
  :: d_step { t < NTOK && held[t] && !dl[t] && stalls < STALLS -> stalls++; dl[t] = 1 }
#define HOLDS(r) \
  (held[1] && hr[1] == r && !dl[1] || held[2] && hr[2] == r && !dl[2] || \
   held[3] && hr[3] == r && !dl[3] || held[4] && hr[4] == r && !dl[4] || \
   held[5] && hr[5] == r && !dl[5] || held[6] && hr[6] == r && !dl[6] || \
   NTOK > 7 && held[7] && hr[7] == r && !dl[7] || NTOK > 8 && held[8] && hr[8] == r && !dl[8] || \
   NTOK > 9 && held[9] && hr[9] == r && !dl[9] || NTOK > 10 && held[10] && hr[10] == r && !dl[10])
#define PAUSE(r) \
  :: d_step { \
    pauses < PAUSES && HOLDS(r) -> \
    pauses++; \
    printf("MSC: relay %d paused past its deadlines\n", r); \
    i = 1; \
    do \
    :: i < NTOK -> \
      if \
      :: held[i] && hr[i] == r -> dl[i] = 1 \
      :: else \
      fi; \
      i++ \
    :: else -> break \
    od; \
    i = 0 \
  }

#ifdef NOEXPIRY
#define ORPHAN_EXPIRES false /* broken: a lease nobody renews never runs out */
#else
#define ORPHAN_EXPIRES true
#endif

active proctype clock() {
  byte i;
end:
  do
  EXPIRE(1) EXPIRE(2) EXPIRE(3) EXPIRE(4) EXPIRE(5) EXPIRE(6) EXPIRE(7) EXPIRE(8) EXPIRE(9)
  EXPIRE(10)
  DEADLINE(1) DEADLINE(2) DEADLINE(3) DEADLINE(4) DEADLINE(5) DEADLINE(6) DEADLINE(7)
  DEADLINE(8) DEADLINE(9) DEADLINE(10)
  PAUSE(0) PAUSE(1)
#if NR > 2
  PAUSE(2)
#endif
  :: d_step { st[0] == BACKOFF -> st[0] = PENDING }
  :: d_step { st[1] == BACKOFF -> st[1] = PENDING }
  :: d_step { st[2] == BACKOFF -> st[2] = PENDING }
  od
}

/* kill -9 of a relay at any point (Promela's unless: between any two of its steps). */
active proctype crasher() {
  byte r;
end:
  do
  :: atomic { crashes < CRASHES && crash_req == NR && !ALL_SETTLED ->
      crashes++;
      if
      :: r = 0
      :: r = 1
#if NR > 2
      :: r = 2
#endif
      fi;
      crash_req = r; r = 0 }
  od
}

init {
  byte i;
  atomic {
    for (i : 0 .. NR - 1) { run relay(i) }
  }
}

#ifdef LIVENESS
ltl progress { <> ALL_SETTLED }
#endif
