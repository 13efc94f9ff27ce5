#include "stores/postgres/membership.h"

#include <algorithm>
#include <set>

namespace outpost::pg {

Membership::Membership(Pool& pool, const Endpoint& ep, std::string rebalance_sql,
                       std::string member, Duration lease, std::function<void()> gained)
    : pool_(pool),
      ep_(ep),
      sql_(std::move(rebalance_sql)),
      member_(std::move(member)),
      lease_(lease),
      gained_(std::move(gained)) {}

Membership::~Membership() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard beat(beat_mu_);
  if (!joined_) return;
  try {
    heartbeat(true);
  } catch (...) {
    // The partitions' leases expire instead (the server is gone or the statement failed).
  }
}

void Membership::before_claim() {
  last_active_ = SteadyClock::now().time_since_epoch().count();
  {
    std::lock_guard beat(beat_mu_);
    if (joined_) return;
    heartbeat(false);
    joined_ = true;
  }
  std::lock_guard lock(mu_);
  if (!thread_.joinable() && !stop_) thread_ = std::thread([this] { loop(); });
}

void Membership::touch() {
  last_active_ = SteadyClock::now().time_since_epoch().count();
}

void Membership::claimed(std::span<const std::int64_t> seqs, std::span<const int> parts,
                         std::span<const std::string> keys, Duration lease) {
  auto until = SteadyClock::now() + lease;
  std::lock_guard lock(rows_mu_);
  for (std::size_t i = 0; i < seqs.size() && i < parts.size() && i < keys.size(); ++i)
    rows_[seqs[i]] = Row{parts[i], keys[i], until};
}

std::vector<std::string> Membership::busy_keys(std::span<const std::int64_t> except) {
  std::set<std::string> keys;
  auto now = SteadyClock::now();
  {
    std::lock_guard lock(rows_mu_);
    for (const auto& [seq, row] : rows_) {
      if (row.until <= now || row.key.empty()) continue;
      if (std::find(except.begin(), except.end(), seq) != except.end()) continue;
      keys.insert(row.key);
    }
  }
  return {keys.begin(), keys.end()};
}

void Membership::settled(std::span<const std::int64_t> seqs) {
  std::lock_guard lock(rows_mu_);
  for (auto s : seqs) rows_.erase(s);
}

void Membership::renewed(std::span<const std::int64_t> seqs, Duration lease, bool kept) {
  auto until = SteadyClock::now() + lease;
  std::lock_guard lock(rows_mu_);
  for (auto s : seqs) {
    if (!kept) {
      rows_.erase(s);
    } else if (auto it = rows_.find(s); it != rows_.end()) {
      it->second.until = until;
    }
  }
}

// The partitions with a claim of this member still in flight, as an array literal.
std::string Membership::busy_parts() {
  std::set<int> parts;
  auto now = SteadyClock::now();
  {
    std::lock_guard lock(rows_mu_);
    for (auto it = rows_.begin(); it != rows_.end();) {
      if (it->second.until <= now) {
        it = rows_.erase(it);
      } else {
        parts.insert(it->second.part);
        ++it;
      }
    }
  }
  std::string out = "{";
  for (int p : parts) out += (out.size() > 1 ? "," : "") + std::to_string(p);
  return out + "}";
}

bool Membership::heartbeat(bool leaving) {
  std::unique_lock gate(gate_);  // no claim between its commit and claimed() (claiming())
  Params p;
  p.text(member_);
  p.text(std::to_string(lease_.count()));
  p.text(busy_parts());
  p.text(leaving ? "true" : "false");
  auto c = pool_.get();
  auto r = exec_prepared(ep_, *c, "rebalance", sql_, p, "partition heartbeat");
  const int owned = get_i32(r.get(), 0, 0);
  const int wanted = get_i32(r.get(), 0, 1);
  const int moving = get_i32(r.get(), 0, 3);
  const bool grew = owned > owned_;
  owned_ = owned;
  owned_now_ = owned;
  fast_ = owned != wanted || moving > 0;
  if (leaving) joined_ = false;
  return grew;
}

void Membership::loop() {
  // Settled: a beat every 250 ms (at most a fifth of the lease), so a member notices a join
  // or a leave soon. While partitions move: every 50 ms (at most a tenth of the lease), so a
  // hand-over (mark, drain, release, take) completes within a few hundred ms.
  const auto slow = std::chrono::duration_cast<SteadyClock::duration>(
      std::min<Duration>(Duration(250), lease_ / 5));
  const auto quick = std::chrono::duration_cast<SteadyClock::duration>(
      std::min<Duration>(Duration(50), lease_ / 10));
  for (;;) {
    bool fast;
    {
      std::lock_guard beat(beat_mu_);
      fast = fast_;
    }
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, fast ? quick : slow, [this] { return stop_; });
      if (stop_) return;
    }
    bool grew = false;
    {
      std::lock_guard beat(beat_mu_);
      if (!joined_) continue;
      auto idle =
          SteadyClock::now() - SteadyClock::time_point(SteadyClock::duration(last_active_.load()));
      try {
        // Not claiming any more (the relay stopped, the store object lives on): leave, so the
        // others take the partitions; the next claim joins again.
        grew = heartbeat(idle > lease_);
      } catch (...) {
        fast_ = true;  // try again soon; the partitions' leases bound what a failure costs
      }
    }
    if (grew && gained_) gained_();
  }
}

}  // namespace outpost::pg
