#pragma once
// Relay::Impl, the relay loop's state and steps (include/outpost/relay.h is the public side),
// private to src/relay. Its members are defined by responsibility:
//   relay.cpp         construction, reporting, waiting, run/stop and the counters;
//   relay_loop.cpp    the loops: claim, deliver, decide (sequential, pipelined, the probe);
//   relay_settle.cpp  settling: acks, nacks and releases, retried, held while the store refuses.
// Thread safety: as Relay's (relay.h); members marked "relay thread only" are not shared.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "batch.h"
#include "delivery_thread.h"
#include "guarded.h"
#include "lease_deadline.h"
#include "lease_keeper.h"
#include "outpost/relay.h"
#include "pipeline_mode.h"
#include "sink_pause.h"

namespace outpost {

struct Relay::Impl {
  using Batch = relay_detail::Batch;
  using SteadyClock = std::chrono::steady_clock;

  Impl(Store& s, Sink& k, RelayOptions o);

  // ---- reporting -------------------------------------------------------------------------
  void report(const std::string& message);

  void store_error(const std::string& message);

  // A store call failed with `f` while doing `what` ("claim failed"). When retrying cannot cure
  // it (Failure::fatal: a row the store cannot read), reports it, keeps it for run() to throw
  // and stops the relay as stop() does (what is in flight drains): true. Else false, nothing
  // done (the caller retries as it does for an outage). docs/emit-contract.md; docs/operations.md,
  // "The daemon".
  bool stop_if_fatal(const std::string& what, const relay_detail::Failure& f);

  // A claim, wait or settle call failed (an outage: retried) / a claim answered. The first claim
  // answered after failures says once that the store works again (on_notice), as the sink's
  // pause says it is back. Only a claim ends an outage: it is the call every cycle makes, so a
  // settle that happens to pass between failing claims does not split one outage into two, nor
  // does a claim that passed make a settle failing after it look like the store's return.
  void store_failed();
  void store_answered();

  void delivery_error(const std::string& message, const StoredEvent& e);

  // ---- waiting ---------------------------------------------------------------------------
  // Sleeps up to `d`; returns early when stop() is called.
  void sleep_for(Duration d);

  Duration next_error_backoff();

  // Waits for work up to poll_interval, in chunks, so a stop() that raced past the store's
  // interrupt is noticed within one chunk. Returns early when the store signals work.
  // Returns true when it returned before poll_interval because the store signalled.
  bool idle_wait();

  // ---- settling --------------------------------------------------------------------------
  // Runs a settle call with a few bounded retries. nullopt: gave up (reported); the lease
  // expiry will redeliver those events (a bounded duplicate). While stopping, a store that
  // hangs would make every try cost a whole store timeout (PostgreSQL/Redis timeout_ms, then
  // connect_timeout per reconnect), and a stop settles up to three batches: so fewer tries, and
  // once a settle call gave up, the later ones of this stop are not tried at all.
  // `tries`: 0 for the usual few (fewer while stopping); a held settlement is tried once a round.
  template <typename F>
  std::optional<std::size_t> settle_call(const char* what, std::size_t count, F&& call,
                                         bool& retried, int tries = 0);

  // ---- one batch (the pure rules are in batch.{h,cpp}) ------------------------------------
  // After a claim that started at `claim_started`: counts it, dead-letters events that crashed
  // relays too often (relay_detail::prepare) and sets the batch's lease deadline.
  void prepare(Batch& b, SteadyClock::time_point claim_started);

  // Runs the sink on the batch's events (on whichever thread calls it), bounded by the
  // deliver timeout and the stop; never throws.
  // A batch whose lease deadline passed before its delivery could start (the process was
  // paused, e.g. SIGSTOP, a VM pause, swapping) is not delivered at all: another relay may hold
  // its events now (docs/relay.md, "The lease deadline").
  void deliver(Batch& b);

  // After the delivery of `b` (started == a delivery ran): unless its lease was lost meanwhile,
  // turns the sink's results into acks, nacks and releases (relay_detail::decide).
  // Then notes what the results say about the sink (note_sink_state).
  void finish_delivery(Batch& b, bool started);

  // ---- the sink's pause (docs/relay.md, "Pauses"; the decisions are in sink_pause.{h,cpp}) -----
  bool sink_is_down() const { return pause.down(); }

  // After a delivered batch: the sink went down or came back (SinkPause::on_batch) is reported.
  void note_sink_state(const Batch& b);

  void sink_state(const std::string& message, bool down);

  // While the sink is down: waits out the probe backoff (stop() cuts it short), then delivers one
  // event (cycle(1)), which brings the sink back or sets the next wait. false: run() returns
  // (until_empty and nothing left).
  bool probe();

  // The one claim -> deliver -> decide path after a claim (the caller settles): delivers on this
  // thread unless every event was dead-lettered unseen.
  void deliver_and_decide(Batch& b);

  // After delivery: false when the lease was lost meanwhile (the batch is abandoned; its new
  // owner delivers it, and our acks would be fenced anyway).
  bool still_leased(Batch& slot);

  void note_fenced(const Batch& slot);

  void count_settled(const Batch& slot, bool fenced);

  // Settles with the separate calls, each retried a few times. Each kind is counted and cleared
  // once recorded; what the store still refuses is left in the batch: true when nothing is.
  bool settle_parts(Batch& slot, int tries = 0);

  // Settles `slot`. What the store refuses even after the retries (a full disk, a database that
  // is down) is kept and retried with backoff before anything new is claimed (drain_held), not
  // dropped: dropping it would deliver those events again after their lease, once per lease, for
  // as long as the store refuses writes (docs/relay.md, "Crash counting"). While stopping it is
  // given up: the lease expiry redelivers those events.
  void settle(Batch& slot);

  // Retries the held settlements, one try each per round with the error backoff between rounds,
  // until all are recorded or the relay stops.
  void drain_held();
  void retry_held(int tries);

  // Settles `done` and claims the next batch into `next` in one store call. If that call
  // fails, settles with the separate (retried) calls and leaves `next` empty; the caller's
  // next plain claim backs off if the store is still failing.
  void settle_and_claim(Batch& done, Batch& next);

  // ---- one cycle, no pipelining (run_once) --------------------------------------------------
  // Claims at most `max` events (the probe of a sink that is down: 1). A settlement the store
  // refused before is tried once first; while it is still refused nothing is claimed (0).
  std::size_t cycle(std::size_t max);
  std::size_t run_once();

  // ---- the pipelined loop -----------------------------------------------------------------
  // Steady state, with batches x (delivered), y (being delivered) and z (claimed):
  //   relay thread:    wait for y ... | settle x + claim z | wait for y | ...
  //   delivery thread: deliver y .................................... | deliver z ...
  // So the store's round trips overlap the sink's. Per-key order holds: z is claimed while y is
  // still leased, so z holds no key of y (ordered claims skip keys in flight), and x is settled
  // before anything after it of its keys can be claimed.
  // Hands `slot` (claimed, its lease already kept) to the delivery thread. Returns whether a
  // delivery was started (not when every event was dead-lettered unseen).
  bool start_delivery(Batch& slot);

  // Claims into `slot` and keeps its lease; a failing claim is reported, the slot left empty.
  // Claims nothing while a settlement the store refused is held.
  void prefetch(Batch& slot);

  // Gives a claimed batch that will not be delivered (the relay is stopping) back to the store
  // without counting the attempt.
  void give_back(Batch& slot);

  // Runs a step that claims; if it throws, reports it and backs off. false: it failed.
  template <typename F>
  bool claim_or_back_off(F&& step);

  void pipelined_run();

  // Stopping with settlements the store refused: one more (stopping) try each, then they are
  // given up; the lease expiry redelivers those events.
  void abandon_held();

  // Idle: returns false when run() should return (until_empty and nothing left).
  bool wait_when_idle();
  bool all_pending_held_by_dead_letters(const StoreStats& stats);
  SteadyClock::time_point next_held_check{};  // relay thread only: see the function

  void sequential_run();

  void run();

  void stop(bool now);

  RelayCounters snapshot() const;

  Store& store;
  Sink& sink;
  const RelayOptions options;
  // A deliver() call's deadline: deliver_timeout, or when 0 the lease the user asked for, not the
  // store's cap (Store::max_lease). The cap shortens each lease, not the delivery: renewals every
  // lease/3 keep a slow but healthy destination's batch (docs/relay.md, "The lease deadline").
  const Duration deliver_timeout;

  std::atomic<bool> stopping{false};
  std::mutex sleep_mu;
  std::condition_variable sleep_cv;
  std::string sink_closed;    // guarded by sleep_mu: Sink::closed() once it said so
  std::exception_ptr fatal;   // guarded by sleep_mu: the first fatal store error (stop_if_fatal)
  Duration error_backoff{0};  // relay thread only
  // Relay thread only: failed claims and waits since the store last answered, and since when.
  std::uint64_t store_failures_in_row = 0;
  SteadyClock::time_point store_failing_since{};
  int futile_wakeups = 0;  // relay thread only: early wake-ups in a row that found nothing
  bool store_failed_while_stopping = false;  // relay thread only: see settle_call
  relay_detail::PipelineMode mode;           // relay thread only
  DeliveryControl control;                   // bounds the deliver() call in progress; set by stop()
  // The batches' lease deadlines and the control's deadline set from them.
  relay_detail::LeaseDeadlines deadlines{control, options.lease, deliver_timeout};
  // Settlements the store refused (settle); relay thread only.
  std::vector<Batch> held;
  // The sink's pause; its counters are read by counters().
  relay_detail::SinkPause pause{options.backoff_max};

  // Relay thread only (the delivery thread touches the one it was handed); reused across batches
  // so the hot path does not allocate per batch.
  Batch slots[3];

  std::atomic<std::uint64_t> batches{0}, claimed{0}, delivered{0}, failed{0}, dead{0}, released{0},
      lease_lost{0}, store_errors{0}, lease_expired_undelivered{0};

  relay_detail::LeaseKeeper keeper;  // its thread reports through the members above
  // Last: destroyed (joined) first.
  relay_detail::DeliveryThread delivery{[this](Batch& b) { deliver(b); }};
};

}  // namespace outpost
