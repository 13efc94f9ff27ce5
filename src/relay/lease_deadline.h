#pragma once
// The lease deadline (docs/relay.md, "The lease deadline"): no delivery starts within a margin of
// the end of its batch's lease (min(lease / 10, 1 s)), and the deliver() call in progress is cut
// off there too. The deadline is set at the claim and moved on by each renewal of the lease
// keeper (on its thread) that the store answered before it; this class keeps the batches'
// deadlines, the batch being delivered and the DeliveryControl's deadline consistent under one
// mutex.

#include <chrono>
#include <mutex>
#include <span>

#include "batch.h"
#include "outpost/sink.h"

namespace outpost::relay_detail {

class LeaseDeadlines {
 public:
  using SteadyClock = std::chrono::steady_clock;

  // `control` bounds the deliver() calls (it must outlive this); `deliver_timeout`: a call's own
  // deadline (never 0: the relay passes the lease then).
  LeaseDeadlines(DeliveryControl& control, Duration lease, Duration deliver_timeout);

  // After a claim that started at `claim_started`: the batch's lease deadline (none when empty).
  void claimed(Batch& b, SteadyClock::time_point claim_started);

  // Before delivering `b` at `now`: when its lease deadline has passed, sets b.lease_ran_out
  // (nothing may be delivered); otherwise starts the control's call with the deliver timeout,
  // bounded by the lease deadline, and returns the call's own deadline (max(): none).
  SteadyClock::time_point begin_delivery(Batch& b, SteadyClock::time_point now);
  // The delivery of the batch given to begin_delivery() returned.
  void end_delivery();

  // The lease keeper renewed `batch` (one of `slots`): its lease deadline moves on (and the
  // running call's), to the renewal's start + `lease` - the margin. Only a renewal the store
  // answered before the deadline does: the store then renewed while the lease it had was still
  // live (the deadline is a margin before the store's expiry), so no other relay can have taken
  // the events. One answered later (after a pause, or waiting on a store lock while another
  // relay claimed) cannot show the lease held throughout, as stores also count events another
  // relay took and settled meanwhile as held (they are gone), and so must not let a stale batch
  // be delivered.
  void renewed(std::span<Batch> slots, const ClaimedBatch& batch, SteadyClock::time_point started,
               Duration lease);

 private:
  void bound_control(const Batch& b);
  void set_control_deadline(SteadyClock::time_point at);

  DeliveryControl& control_;
  const Duration lease_;
  const Duration deliver_timeout_;
  // What set_control_deadline() passes as the timeout (its text names it): the deliver timeout,
  // or a year when that is "none" to DeliveryControl::begin.
  const Duration control_timeout_;
  const Duration margin_;
  // Guards the slots' lease deadlines (the keeper's thread moves them on), the batch being
  // delivered and its call's own deadline, and the control's deadline set from them.
  std::mutex mu_;
  Batch* delivering_now_ = nullptr;
  SteadyClock::time_point delivering_deadline_;
};

}  // namespace outpost::relay_detail
