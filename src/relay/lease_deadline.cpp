// The lease deadline (lease_deadline.h, docs/relay.md, "The lease deadline").

#include "lease_deadline.h"

#include <algorithm>

namespace outpost::relay_detail {
namespace {

// No delivery starts within this margin of the end of its batch's lease: min(lease / 10, 1 s).
constexpr Duration kLeaseMarginMax{1'000};

}  // namespace

LeaseDeadlines::LeaseDeadlines(DeliveryControl& control, Duration lease, Duration deliver_timeout)
    : control_(control),
      lease_(lease),
      deliver_timeout_(deliver_timeout),
      control_timeout_(std::min<Duration>(deliver_timeout, std::chrono::hours(24 * 365))),
      margin_(std::min(kLeaseMarginMax, lease / 10)) {}

void LeaseDeadlines::claimed(Batch& b, SteadyClock::time_point claim_started) {
  std::lock_guard lock(mu_);
  b.lease_deadline = b.empty() ? SteadyClock::time_point::max() : claim_started + lease_ - margin_;
}

LeaseDeadlines::SteadyClock::time_point LeaseDeadlines::begin_delivery(
    Batch& b, SteadyClock::time_point now) {
  SteadyClock::time_point call_deadline;
  std::lock_guard lock(mu_);
  if (now >= b.lease_deadline) {
    b.lease_ran_out = true;
  } else {
    control_.begin(deliver_timeout_, now);
    call_deadline = control_.deadline();  // max(): no deadline
    delivering_now_ = &b;
    delivering_deadline_ = call_deadline;
    bound_control(b);
  }
  return call_deadline;
}

void LeaseDeadlines::end_delivery() {
  std::lock_guard lock(mu_);
  delivering_now_ = nullptr;
}

void LeaseDeadlines::renewed(std::span<Batch> slots, const ClaimedBatch& batch,
                             SteadyClock::time_point started, Duration lease) {
  // Called once the store answered: `now` is after the store renewed (or counted as held).
  const auto answered = SteadyClock::now();
  std::lock_guard lock(mu_);
  for (Batch& s : slots) {
    if (&s.claimed != &batch || std::max(started, answered) >= s.lease_deadline) continue;
    s.lease_deadline = std::max(s.lease_deadline, started + lease - margin_);
    if (delivering_now_ == &s) bound_control(s);
  }
}

// mu_ held: the control's deadline is the earlier of the call's own and the lease deadline of the
// batch being delivered. DeliveryControl has no setter for a point in time: begin(timeout, at)
// with at = point - timeout gives that point and keeps the timeout's text.
void LeaseDeadlines::bound_control(const Batch& b) {
  if (b.lease_deadline >= delivering_deadline_) {
    if (control_.deadline() != delivering_deadline_) set_control_deadline(delivering_deadline_);
    return;
  }
  set_control_deadline(b.lease_deadline);
}

void LeaseDeadlines::set_control_deadline(SteadyClock::time_point at) {
  if (at == SteadyClock::time_point::max()) {
    control_.begin(Duration{0});  // no deadline
    return;
  }
  const Duration t = control_timeout_;
  control_.begin(t, at - t);
}

}  // namespace outpost::relay_detail
