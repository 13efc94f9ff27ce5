#pragma once
// Partition ownership of one PostgreSQL store object (docs/postgres.md, "Partitions and owners").
// A store object becomes a member of its outbox at its first claim and then heartbeats on a
// thread of its own: the heartbeat (<table>_rebalance, one statement) renews its membership and
// its partitions' leases, computes its even share of the partitions among the live members,
// takes free or expired partitions up to that share (the fence goes up by one on every move),
// marks its surplus as handed over (claims skip them) and releases each one once none of its
// claims there is in flight. A member that has not claimed or renewed for a partition lease
// leaves; so does one being destroyed (a relay that stops hands its partitions over at once).
// A member that dies leaves its partitions to expire after the partition lease.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "outpost/event.h"
#include "stores/postgres/pg_conn.h"

namespace outpost::pg {

class Membership {
 public:
  // `rebalance_sql`: Sql::rebalance. `gained` is called (from the heartbeat thread) when the
  // member's share grew, to wake its waiting relay.
  Membership(Pool& pool, const Endpoint& ep, std::string rebalance_sql, std::string member,
             Duration lease, std::function<void()> gained);
  ~Membership();  // leaves, releasing every partition, when a member
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  const std::string& member() const { return member_; }
  // The partitions owned and not being handed over, as of the last heartbeat. Only this
  // member's heartbeats add to them (an expiry or a hand-over only takes some away), so a
  // member owning none now has nothing to claim.
  int owned() const { return owned_now_.load(std::memory_order_relaxed); }

  // Before each claim: joins at the first (one heartbeat on the caller's thread; throws when it
  // fails) and notes the member as active.
  void before_claim();
  // A renew: the member is active (a long delivery keeps its partitions).
  void touch();

  // Held by each claim from before its statement is sent until its rows are noted (claimed()):
  // a heartbeat waits for it, so a claim that committed rows in a partition is always among the
  // busy ones the heartbeat sees, and one that starts later sees the hand-over (releasing) and
  // skips the partition. Without it a heartbeat could release a partition between a claim's
  // commit and its noting the rows: the rows' fence no longer matched and they waited for their
  // lease to expire (measured: 30 s tails and duplicates with 8 relays).
  std::shared_lock<std::shared_mutex> claiming() { return std::shared_lock(gate_); }

  // In-flight claims by seq, so that a surplus partition is released only once drained. Rows
  // are forgotten when settled (whatever the outcome or count), when a renew finds them lost,
  // or at their lease's end.
  void claimed(std::span<const std::int64_t> seqs, std::span<const int> parts,
               std::span<const std::string> keys, Duration lease);
  // The keys (not empty) of this member's claims in flight, less the rows `except` (a batch
  // being settled in the same transaction as the claim that asks). An ordered claim leaves
  // them out before probing their heads (sql.h, Sql::claim_ordered).
  std::vector<std::string> busy_keys(std::span<const std::int64_t> except);
  void settled(std::span<const std::int64_t> seqs);
  void renewed(std::span<const std::int64_t> seqs, Duration lease, bool kept);

 private:
  using SteadyClock = std::chrono::steady_clock;
  struct Row {
    int part;
    std::string key;
    SteadyClock::time_point until;
  };
  // One heartbeat; returns whether the share grew. Caller holds beat_mu_.
  bool heartbeat(bool leaving);
  std::string busy_parts();
  void loop();

  Pool& pool_;
  const Endpoint& ep_;
  const std::string sql_;
  const std::string member_;
  const Duration lease_;
  const std::function<void()> gained_;

  std::mutex beat_mu_;                        // one heartbeat at a time
  bool joined_ = false;                       // guarded by beat_mu_
  int owned_ = 0;                             // guarded by beat_mu_
  bool fast_ = true;                          // guarded by beat_mu_: the share is not settled yet
  std::atomic<std::int64_t> last_active_{0};  // steady clock ticks
  std::atomic<int> owned_now_{0};             // owned_, for claims

  std::shared_mutex gate_;
  std::mutex rows_mu_;
  std::unordered_map<std::int64_t, Row> rows_;  // guarded by rows_mu_

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace outpost::pg
