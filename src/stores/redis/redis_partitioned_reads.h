#pragma once
// The partitioned Redis store's reads and admin across its partitions (redis_partitioned.cpp,
// docs/redis.md "Partitions": Inspection and admin): each partition is asked and the answers
// merged; seqs are made unique across the outbox as in claims (with_seqs).

#include <algorithm>
#include <iterator>
#include <span>
#include <vector>

#include "outpost/store.h"
#include "stores/redis/redis_partition.h"

namespace outpost::redis_store {

class PartitionedReads : public Store {
 public:
  StoreStats stats() override {
    ready();
    StoreStats s;
    for (int p = 0; p < n_; ++p) {
      StoreStats one = part(p).stats();
      s.pending += one.pending;
      s.scheduled += one.scheduled;
      s.leased += one.leased;
      s.dead += one.dead;
      s.archived += one.archived;
      s.oldest_pending_age = std::max(s.oldest_pending_age, one.oldest_pending_age);
    }
    return s;
  }

  // Across partitions in emit time (then each partition's sequence); seqs made unique as in
  // claims (with_seqs).
  std::vector<StoredEvent> list(std::size_t limit) override {
    return merged(gather([&](PartitionStore& s) { return s.list(limit); }), limit, by_time);
  }
  std::vector<DeadEvent> dead(std::size_t limit) override {
    return merged(gather([&](PartitionStore& s) { return s.dead(limit); }), limit, by_time);
  }
  std::vector<ArchivedEvent> archived(std::size_t limit) override {
    return merged(gather([&](PartitionStore& s) { return s.archived(limit); }), limit,
                  [](const ArchivedEvent& a, const ArchivedEvent& b) {
                    return a.archived_at > b.archived_at;
                  });
  }
  std::vector<EventState> blocked(std::size_t limit) override {
    return merged(gather([&](PartitionStore& s) { return s.blocked(limit); }), limit, by_seq);
  }
  std::vector<EventState> leased(std::size_t limit) override {
    return merged(gather([&](PartitionStore& s) { return s.leased(limit); }), limit, by_seq);
  }

  // An id does not name its partition: each asks every partition.
  std::size_t retry(std::span<const EventId> ids) override {
    return sum([&](PartitionStore& s) { return s.retry(ids); });
  }
  std::size_t retry_all() override {
    return sum([](PartitionStore& s) { return s.retry_all(); });
  }
  std::size_t discard(std::span<const EventId> ids) override {
    return sum([&](PartitionStore& s) { return s.discard(ids); });
  }
  std::size_t discard_all() override {
    return sum([](PartitionStore& s) { return s.discard_all(); });
  }

 protected:
  explicit PartitionedReads(int partitions) : n_(partitions) {}
  virtual PartitionStore& part(int p) = 0;
  // Once: checks the recorded partition count (throws until it succeeds).
  virtual void ready() = 0;

  // A partition's own sequence K becomes K * partitions + partition: unique across the
  // outbox and still increasing within each partition (a key's events are in one).
  template <typename T>
  void with_seqs(std::vector<T>& events, int p) const {
    for (auto& e : events) e.seq = e.seq * n_ + p;
  }

  const int n_;

 private:
  template <typename T, typename Less>
  static std::vector<T> merged(std::vector<T> all, std::size_t limit, Less less) {
    std::stable_sort(all.begin(), all.end(), less);
    if (all.size() > limit) all.resize(limit);
    return all;
  }
  static bool by_time(const StoredEvent& a, const StoredEvent& b) {
    return a.occurred_at != b.occurred_at ? a.occurred_at < b.occurred_at : a.seq < b.seq;
  }
  static bool by_seq(const EventState& a, const EventState& b) { return a.seq < b.seq; }

  template <typename Read>
  auto gather(Read read) -> decltype(read(std::declval<PartitionStore&>())) {
    ready();
    decltype(read(part(0))) all;
    for (int p = 0; p < n_; ++p) {
      auto one = read(part(p));
      if constexpr (requires { one[0].seq; }) with_seqs(one, p);
      std::move(one.begin(), one.end(), std::back_inserter(all));
    }
    return all;
  }

  template <typename Op>
  std::size_t sum(Op op) {
    ready();
    std::size_t total = 0;
    for (int p = 0; p < n_; ++p) total += op(part(p));
    return total;
  }
};

}  // namespace outpost::redis_store
