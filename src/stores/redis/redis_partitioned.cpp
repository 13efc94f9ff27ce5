// The partitioned Redis store (redis_partition.h, docs/redis.md "Partitions"): N partitions, each
// today's single-writer layout under its own hash tag {prefix:pK}, so each has its own writer
// lease and fence and a Redis Cluster spreads them over its masters. The relays of one outbox
// keep a membership record (members.lua) and each claims only from the partitions assigned to
// it (partition K goes to the live member with index K mod members, members sorted by token),
// taking a partition's writer lease once the previous owner gave it up (stop, or rebalance after
// its open batches settled) or its lease expired (a crash): at most one owner per partition,
// every settlement fenced as on an unpartitioned outbox, per-key order kept across moves.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include "core/append_check.h"
#include "stores/redis/redis_body.h"
#include "stores/redis/redis_combined_batch.h"
#include "stores/redis/redis_partition.h"
#include "stores/redis/redis_partitioned_reads.h"
#include "stores/redis/redis_scripts.h"
#include "stores/redis/redis_wake.h"

namespace outpost::redis_store {
namespace {

// A partition assigned to this relay that another relay still holds: asked again after this
// long (that relay gives it up once its open batches settled).
constexpr std::int64_t kRetryHeldMs = 100;
// The membership beat: at most this long apart (and at most a third of writer_lease_ms), so a
// joining or stopping relay moves partitions within a fraction of a second; a beat is one small
// script on the outbox's own slot.
constexpr Duration kMaxBeat{200};
// Partitions held are pruned every this many beats (at most ~1 s apart: beat).
constexpr int kPruneBeats = 5;

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class PartitionedStore final : public PartitionedReads {
 public:
  PartitionedStore(StoreConfig c, const StoreOptions& options)
      : PartitionedReads(c.partitions),
        options_(options),
        writer_lease_(c.writer_lease),
        owning_(c.writer_lease.count() > 0),
        prefix_(c.prefix),
        base_("{" + c.prefix + "}:"),
        key_(base_ + "partitions"),
        token_(instance_token()),
        meta_(c.client),
        wake_(meta_, "{" + c.prefix + ":p*}:wake", /*pattern=*/true),
        parts_(static_cast<std::size_t>(n_)) {
    auto warn_once = std::make_shared<std::once_flag>();
    for (int p = 0; p < n_; ++p)
      parts_[p].store = open_partition(c.client, c.prefix + ":p" + std::to_string(p), writer_lease_,
                                       options, token_, "p" + std::to_string(p) + ".", warn_once);
  }

  ~PartitionedStore() override {
    {
      std::lock_guard lock(beat_mu_);
      stopping_ = true;
    }
    beat_cv_.notify_all();
    if (beats_.joinable()) {
      beats_.join();
      try {  // leave at once: the others take this relay's partitions at their next beat
        meta_.eval(members_script_, key_, {base_, token_, "0"});
      } catch (const std::exception&) {  // best effort: the entry expires on its own
      }
    }
    // parts_ go next: each gives up its writer lease (compare-and-delete).
  }

  std::string_view backend() const override { return "redis"; }

  void append(std::span<const Event> events, TxHandle tx) override {
    if (events.empty()) return;
    ready();
    // Events without a key go together to one partition per call, taken in turn.
    const int empty_to = static_cast<int>(next_empty_.fetch_add(1) % static_cast<unsigned>(n_));
    auto partition = [&](const Event& e) {
      return e.key.empty() ? empty_to : static_cast<int>(fnv1a(e.key) % static_cast<unsigned>(n_));
    };
    const int first = partition(events.front());
    if (std::all_of(events.begin(), events.end(),
                    [&](const Event& e) { return partition(e) == first; })) {
      parts_[first].store->append(events, tx);
      return;
    }
    // Several partitions: checked whole first, so a bad event writes nothing anywhere (an
    // append is atomic per partition, docs/redis.md).
    std::vector<Event> prepared = core::prepare_for_append(events, options_, "redis");
    std::vector<std::vector<Event>> groups(parts_.size());
    for (auto& e : prepared) groups[partition(e)].push_back(std::move(e));
    if (!tx.is_none()) {
      for (std::size_t p = 0; p < groups.size(); ++p)
        if (!groups[p].empty()) parts_[p].store->append(groups[p], tx);
      return;
    }
    append_pipelined(groups);
  }

  // One script call on a single master, else one per partition (append_partitions); a
  // partition whose pipelined reply was an error appends again on its own store, which follows
  // redirects, reloads the script and reports any other error as usual.
  void append_pipelined(const std::vector<std::vector<Event>>& groups) {
    for (std::size_t p : append_partitions(meta_, append_many_script_, append_script_, prefix_,
                                           base_, key_, groups, one_script()))
      parts_[p].store->append(groups[p], {});
  }

  ClaimedBatch claim(std::size_t max, Duration lease, ClaimOrder order) override {
    ready();
    if (one_script()) {
      std::vector<PartBatch> none;
      SettleCounts counts;
      return settle_and_claim_in_one(none, nullptr, {}, counts, max, lease, order);
    }
    return claim_from_owned(max, lease, order);
  }

  // Each partition of `done` settles its part and the next batch comes from the owned
  // partitions: in one script on a single master (settle_and_claim_in_one), else each part
  // settles and claims in one round trip of its own while the partition is ours, and the rest
  // comes from the other owned partitions. Throws: any part may or may not be settled (store.h).
  ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& settlement,
                                SettleCounts& counts, std::size_t max, Duration lease,
                                ClaimOrder order) override {
    counts = {};
    std::vector<PartBatch> parts = split(done, n_);
    const bool whole = parts.empty();
    if (whole) {
      const int p = partition_in(done.lease.owner, n_);
      if (p < 0) return Store::settle_and_claim(done, settlement, counts, max, lease, order);
      parts.push_back({p, {}});
    }
    ready();
    if (one_script())
      return settle_and_claim_in_one(parts, whole ? &done : nullptr, settlement, counts, max, lease,
                                     order);
    std::vector<ClaimedBatch> got;
    std::vector<int> asked;
    std::exception_ptr error;
    std::size_t n = 0;
    for (auto& pb : parts) {
      const ClaimedBatch& part = whole ? done : pb.batch;
      const PartSettlement own = whole ? PartSettlement{} : settlement_of(part, settlement);
      const Settlement mine = whole ? settlement : own.view();
      const bool take_here = n < max && enter(pb.p, steady_ms());
      if (!take_here) enter(pb.p);
      Leave leave{*this, pb.p, part.lease.owner};
      SettleCounts c;
      ClaimedBatch b;
      asked.push_back(pb.p);
      try {
        b = parts_[pb.p].store->settle_and_claim(part, mine, c, take_here ? max - n : 0, lease,
                                                 order);
      } catch (const std::exception&) {  // the other parts go on (see failed)
        failed(pb.p, error);
        continue;
      }
      leave.settled =
          mine.acks.size() + mine.nacks.size() + mine.releases.size() >= part.events.size();
      counts.acked += c.acked;
      counts.nacked += c.nacked;
      counts.released += c.released;
      if (take_here && took(pb.p, b, lease)) {
        n += b.events.size();
        got.push_back(std::move(b));
      }
    }
    return claim_from_owned(max, lease, order, std::move(got), std::move(asked), error);
  }

  std::size_t ack(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    if (const int p = settling(batch); p >= 0) {
      Leave leave{*this, p, batch.lease.owner};
      const std::size_t n = parts_[p].store->ack(batch, ids);
      leave.settled = ids.size() >= batch.events.size();
      return n;
    }
    return each_part(batch, ids, [](PartitionStore& s, const ClaimedBatch& b, auto mine) {
      return s.ack(b, mine);
    });
  }
  std::size_t nack(const ClaimedBatch& batch, std::span<const Nack> nacks) override {
    if (const int p = settling(batch); p >= 0) {
      Leave leave{*this, p, batch.lease.owner};
      const std::size_t n = parts_[p].store->nack(batch, nacks);
      leave.settled = nacks.size() >= batch.events.size();
      return n;
    }
    return each_part(batch, nacks, [](PartitionStore& s, const ClaimedBatch& b, auto mine) {
      return s.nack(b, mine);
    });
  }
  std::size_t release(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    if (const int p = settling(batch); p >= 0) {
      Leave leave{*this, p, batch.lease.owner};
      const std::size_t n = parts_[p].store->release(batch, ids);
      leave.settled = ids.size() >= batch.events.size();
      return n;
    }
    return each_part(batch, ids, [](PartitionStore& s, const ClaimedBatch& b, auto mine) {
      return s.release(b, mine);
    });
  }
  // A combined batch's lease holds while every part's does. A renewed part keeps its partition
  // open as long (beat gives it up only after, or the renewed batch's settlement is fenced).
  bool renew(const ClaimedBatch& batch, Duration lease) override {
    if (const int p = partition_in(batch.lease.owner, n_); p >= 0)
      return renewed(p, parts_[p].store->renew(batch, lease), lease);
    auto parts = split(batch, n_);
    bool all = !parts.empty();
    for (auto& pb : parts)
      all = renewed(pb.p, parts_[pb.p].store->renew(pb.batch, lease), lease) && all;
    return all;
  }

  void wait_for_work(Duration max) override {
    const std::int64_t now = steady_ms();
    std::int64_t wait = max.count();
    {
      std::lock_guard lock(mu_);
      for (int p = 0; p < n_; ++p) {
        if (!assigned(p)) continue;
        if (parts_[p].retry_at > now) wait = std::min(wait, parts_[p].retry_at - now);
        if (auto h = parts_[p].store->next_hint_ms(); h >= 0) wait = std::min(wait, h);
      }
    }
    if (wait > 0) wake_.wait(std::chrono::steady_clock::now() + std::chrono::milliseconds(wait));
  }

  void interrupt() override { wake_.interrupt(); }

 private:
  PartitionStore& part(int p) override { return *parts_[p].store; }

  struct Part {
    std::unique_ptr<PartitionStore> store;
    // Guarded by mu_:
    std::int64_t retry_at = 0;    // steady ms: another relay held it; not asked before then
    std::int64_t open_until = 0;  // steady ms: our last claim's lease ends
    std::set<std::string> open;   // owners of our claimed batches not settled yet
    int busy = 0;                 // calls on it under way (enter, Leave)
  };

  // Once: the recorded partition count must be ours (partitions.lua records it when missing,
  // unless opened read-only or existing). Throws until it succeeds.
  void ready() override {
    if (ready_.load(std::memory_order_acquire)) return;
    const std::string n = std::to_string(n_);
    const bool create = options_.open == StoreOptions::Open::create;
    const std::int64_t got =
        reply_int(meta_.eval(partitions_script_, key_, {base_, n, create ? "1" : "0"}).get());
    const std::string outbox = base_.substr(0, base_.size() - 1);
    if (got < 0)
      throw ConfigError("redis: the outbox " + outbox +
                            " holds events of the unpartitioned layout: deliver or discard "
                            "them with a URL without partitions before opening it with "
                            "partitions=" +
                            n + " (docs/redis.md, Partitions: upgrade)",
                        "redis");
    if (got > 0 && got != n_)
      throw ConfigError("redis: the outbox " + outbox + " has " + std::to_string(got) +
                            " partitions, the URL says partitions=" + n + ": use partitions=" +
                            std::to_string(got) + " (docs/redis.md, Partitions)",
                        "redis");
    ready_.store(true, std::memory_order_release);
  }

  // Guarded by mu_. Without writer leases every relay claims from every partition.
  bool assigned(int p) const { return !owning_ || p % members_ == index_; }
  // A call on partition p starts: while any runs the beat gives p up to no other relay (a
  // Leave ends it). With `now`: a claim, only on a partition assigned to this relay and not
  // held by another as last seen (false: not started).
  bool enter(int p, std::int64_t now) {
    std::lock_guard lock(mu_);
    if (!assigned(p) || parts_[p].retry_at > now) return false;
    ++parts_[p].busy;
    return true;
  }
  void enter(int p) {
    std::lock_guard lock(mu_);
    ++parts_[p].busy;
  }
  // A batch stops counting as open only once a call settled all of it and returned (an
  // error, a part settled only in part: its open_until ends it).
  struct Leave {
    PartitionedStore& s;
    int p;
    std::string settles;   // the owner of the batch this call settles, or ""
    bool settled = false;  // set on normal return when the call covered the whole batch
    ~Leave() {
      std::lock_guard lock(s.mu_);
      --s.parts_[p].busy;
      if (settled && !settles.empty()) s.parts_[p].open.erase(settles);
    }
  };

  // Fills the batch from the owned partitions in turn (round robin), one claim each, until it
  // has `max` events; events of several partitions make one combined batch (combine).
  // A partition's error does not drop what the others claimed (they stay leased otherwise,
  // each counted as a crash): it is thrown only when the batch is empty (see failed).
  ClaimedBatch claim_from_owned(std::size_t max, Duration lease, ClaimOrder order,
                                std::vector<ClaimedBatch> got = {}, std::vector<int> asked = {},
                                std::exception_ptr error = nullptr) {
    ready();
    const std::int64_t now = steady_ms();
    alive_until_ms_ = now + lease.count();
    if (owning_) std::call_once(joined_, [this] { join(); });
    std::size_t n = 0;
    for (const auto& b : got) n += b.events.size();
    for (int p : candidates(now, asked)) {
      if (n >= max) break;
      if (!enter(p, now)) continue;
      Leave leave{*this, p, {}};
      ClaimedBatch b;
      try {
        b = parts_[p].store->claim(max - n, lease, order);
      } catch (const std::exception&) {
        failed(p, error);
        continue;
      }
      if (!took(p, b, lease)) continue;
      n += b.events.size();
      got.push_back(std::move(b));
    }
    if (got.empty() && error) std::rethrow_exception(error);
    if (got.empty()) return {};
    if (got.size() == 1) return std::move(got.front());
    return combine(got);
  }

  // The owned partitions to claim from, in turn from the one after the last batch's, without
  // those another relay held when last asked and those in `asked`.
  std::vector<int> candidates(std::int64_t now, const std::vector<int>& asked) {
    std::vector<int> out;
    std::lock_guard lock(mu_);
    for (int k = 0; k < n_; ++k) {
      const int p = (cursor_ + k) % n_;
      if (assigned(p) && parts_[p].retry_at <= now &&
          std::find(asked.begin(), asked.end(), p) == asked.end())
        out.push_back(p);
    }
    return out;
  }

  // On a single master (not a cluster) one script settles every part of `parts` (the batch
  // `whole` when it is one partition's) and fills the next batch from the owned partitions in
  // turn: one round trip whatever the number of partitions (run_settle_many).
  bool one_script() const { return meta_.cluster() == 0; }
  ClaimedBatch settle_and_claim_in_one(std::vector<PartBatch>& parts, const ClaimedBatch* whole,
                                       const Settlement& settlement, SettleCounts& counts,
                                       std::size_t max, Duration lease, ClaimOrder order) {
    const std::int64_t now = steady_ms();
    alive_until_ms_ = now + lease.count();
    if (owning_ && max > 0) std::call_once(joined_, [this] { join(); });
    std::deque<Leave> leaves;  // never moved: each ends its partition's call once
    std::deque<PartSettlement> owned;
    std::vector<ManySettle> settles;
    for (auto& pb : parts) {
      const ClaimedBatch& part = whole ? *whole : pb.batch;
      enter(pb.p);
      leaves.emplace_back(*this, pb.p, part.lease.owner);
      if (!whole) owned.push_back(settlement_of(part, settlement));
      settles.push_back(
          {parts_[pb.p].store.get(), &part, whole ? settlement : owned.back().view(), {}, {}});
    }
    std::vector<ManyClaim> claims;
    std::vector<int> from;
    for (int p : max > 0 ? candidates(now, {}) : std::vector<int>{}) {
      if (!enter(p, now)) continue;
      leaves.emplace_back(*this, p, std::string());
      claims.push_back({parts_[p].store.get(), {}, false, {}});
      from.push_back(p);
    }
    if (settles.empty() && claims.empty()) return {};
    run_settle_many(meta_, settle_many_script_, key_, base_, settles, claims, max, lease, order);
    std::exception_ptr error;  // thrown when the batch stays empty (see failed)
    for (std::size_t i = 0; i < settles.size(); ++i) {
      const Settlement& m = settles[i].mine;
      if (settles[i].error) {
        failed(parts[i].p, error, settles[i].error);
        continue;
      }
      counts.acked += settles[i].counts.acked;
      counts.nacked += settles[i].counts.nacked;
      counts.released += settles[i].counts.released;
      leaves[i].settled =
          m.acks.size() + m.nacks.size() + m.releases.size() >= settles[i].batch->events.size();
    }
    std::vector<ClaimedBatch> got;
    for (std::size_t j = 0; j < claims.size(); ++j)
      if (claims[j].error)
        failed(from[j], error, claims[j].error);
      else if (claims[j].asked && took(from[j], claims[j].batch, lease))
        got.push_back(std::move(claims[j].batch));
    if (got.empty() && error) std::rethrow_exception(error);
    if (got.empty()) return {};
    if (got.size() == 1) return std::move(got.front());
    return combine(got);
  }

  // Runs `op(partition, part batch, its ids)` for each partition of a combined batch, with the
  // ids of `ids` that are among that part's events; sums the results.
  template <typename Id, typename Op>
  std::size_t each_part(const ClaimedBatch& batch, std::span<const Id> ids, Op op) {
    std::size_t total = 0;
    for (auto& pb : split(batch, n_)) {
      enter(pb.p);
      Leave leave{*this, pb.p, pb.batch.lease.owner};
      std::vector<Id> mine;
      for (const auto& id : ids)
        for (const auto& e : pb.batch.events)
          if (e.id == id_of(id)) {
            mine.push_back(id);
            break;
          }
      if (!mine.empty()) total += op(*parts_[pb.p].store, pb.batch, std::span<const Id>(mine));
      leave.settled = !mine.empty() && mine.size() >= pb.batch.events.size();
    }
    return total;
  }
  static const EventId& id_of(const EventId& id) { return id; }
  static const EventId& id_of(const Nack& n) { return n.id; }

  // After a claim on partition p: a batch is noted as open (true), a partition another relay
  // holds is asked again later. Only an empty claim means lost: a batch was claimed under the
  // writer lease even if the heartbeat has lost it since (its settlement is fenced then).
  bool took(int p, ClaimedBatch& b, Duration lease) {
    if (b.empty()) {
      if (owning_ && !parts_[p].store->holds_writer_lease()) {
        const std::int64_t hint = parts_[p].store->next_hint_ms();
        std::lock_guard lock(mu_);
        parts_[p].retry_at =
            steady_ms() + std::min<std::int64_t>(kRetryHeldMs, std::max<std::int64_t>(1, hint));
      }
      return false;
    }
    std::lock_guard lock(mu_);
    with_seqs(b.events, p);
    parts_[p].open.insert(b.lease.owner);
    // Never earlier than a renewed batch's (renewed).
    parts_[p].open_until = std::max(parts_[p].open_until, steady_ms() + lease.count());
    cursor_ = (p + 1) % n_;
    return true;
  }

  bool renewed(int p, bool ok, Duration lease) {
    if (!ok) return false;
    std::lock_guard lock(mu_);
    parts_[p].open_until = std::max(parts_[p].open_until, steady_ms() + lease.count());
    return true;
  }

  // In a catch block of a call on partition p: keeps the first error (thrown if the batch
  // stays empty) and asks p again only after kRetryHeldMs.
  void failed(int p, std::exception_ptr& error, std::exception_ptr now = nullptr) {
    if (!error) error = now ? now : std::current_exception();
    std::lock_guard lock(mu_);
    parts_[p].retry_at = steady_ms() + kRetryHeldMs;
  }

  // The partition of a batch of one partition, entered for its settlement (a Leave ends it);
  // -1 for a combined batch.
  int settling(const ClaimedBatch& batch) {
    const int p = partition_in(batch.lease.owner, n_);
    if (p >= 0) enter(p);
    return p;
  }

  // The first claim: joins the membership and starts its heartbeat (every third of
  // writer_lease_ms or kMaxBeat, while the relay keeps claiming within its event lease), which also
  // gives back the partitions assigned elsewhere now.
  void join() {
    beat();
    beats_ = std::thread([this] {
      std::unique_lock lock(beat_mu_);
      while (!beat_cv_.wait_for(lock, std::min(writer_lease_ / 3, kMaxBeat),
                                [this] { return stopping_; })) {
        // A relay that stopped claiming (hung) stops beating too: its entry expires and its
        // partitions go to the others, as its writer leases do (redis_store.cpp).
        if (steady_ms() > alive_until_ms_.load()) continue;
        lock.unlock();
        try {
          beat();
        } catch (const std::exception&) {  // the next beat tries again; claims report errors
        }
        lock.lock();
      }
    });
  }

  void beat() {
    const std::string ms = std::to_string(writer_lease_.count());
    Reply r = meta_.eval(members_script_, key_, {base_, token_, ms});
    int members = 0, index = 0;
    for (std::size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i, ++members)
      if (reply_string(r->element[i]) == token_) index = members;
    std::vector<int> give_up;
    {
      std::lock_guard lock(mu_);
      members_ = std::max(1, members);
      index_ = index;
      const std::int64_t now = steady_ms();
      for (int p = 0; p < n_; ++p) {
        Part& part = parts_[p];
        // Moved elsewhere: given up once our batches of it settled (or their leases ended).
        if (assigned(p) || part.busy > 0 || !part.store->holds_writer_lease()) continue;
        if (!part.open.empty() && now < part.open_until) continue;
        part.open.clear();
        give_up.push_back(p);
      }
    }
    for (int p : give_up) parts_[p].store->give_up_writer_lease();
    // An ack prunes only its own partition: one whose keys went quiet would keep archived
    // events and dead letters past their retention. So every kPruneBeats-th beat prunes the
    // partitions this relay holds (docs/redis.md, Partitions).
    if (!prunes_ || ++beats_since_prune_ < kPruneBeats) return;
    beats_since_prune_ = 0;
    for (int p = 0; p < n_; ++p) {
      {
        std::lock_guard lock(mu_);
        if (!assigned(p) || !parts_[p].store->holds_writer_lease()) continue;
      }
      try {
        parts_[p].store->prune_retained();
      } catch (const std::exception&) {  // the next round tries again
      }
    }
  }

  const StoreOptions options_;
  const Duration writer_lease_;
  const bool owning_;  // writer leases on: each partition has one owner
  const bool prunes_ = options_.dead_retention.count() > 0 ||
                       (options_.archive && options_.archive_retention.count() > 0);
  int beats_since_prune_ = 0;  // only the beat (join) uses it
  const std::string prefix_;
  const std::string base_;  // "{prefix}:": the outbox's own key space (count, members)
  const std::string key_;
  const std::string token_;  // this relay's name in members and every partition's lease
  Client meta_;
  Script partitions_script_{"partitions", std::string(kPrologue) + kPartitions, {}, {}};
  Script members_script_{"members", std::string(kPrologue) + kMembers, {}, {}};
  Script append_script_{"append", std::string(kPrologue) + kAppendFn + kAppend, {}, {}};
  Script append_many_script_{
      "append_many", std::string(kPrologue) + kAppendFn + kAppendMany, {}, {}};
  Script settle_many_script_{
      "settle_many",
      std::string(kPrologue) + kAckFn + kNackFn + kReleaseFn + kSettleFn + kClaimFn + kSettleMany,
      {},
      {}};
  WakeListener wake_;  // after meta_: uses it
  std::vector<Part> parts_;
  std::atomic<bool> ready_{false};
  std::atomic<unsigned> next_empty_{0};
  std::atomic<std::int64_t> alive_until_ms_{0};  // steady ms: last claim + its lease
  std::once_flag joined_;
  std::mutex mu_;
  int members_ = 1;  // guarded by mu_: live members, this one's index among them
  int index_ = 0;
  int cursor_ = 0;  // guarded by mu_: where the next claim starts looking (round robin)
  std::thread beats_;
  std::mutex beat_mu_;
  std::condition_variable beat_cv_;
  bool stopping_ = false;  // guarded by beat_mu_
};

}  // namespace

std::unique_ptr<Store> open_partitioned(StoreConfig config, const StoreOptions& options) {
  return std::make_unique<PartitionedStore>(std::move(config), options);
}

}  // namespace outpost::redis_store
