// In-memory store: the reference implementation of the life cycle in store.h. One mutex guards
// everything; claims scan the live events in sequence order (bounded by the backlog, fine for
// tests and benchmarks of sinks).

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/append_check.h"
#include "core/store_params.h"
#include "core/url.h"
#include "outpost/stores/memory.h"

namespace outpost {
namespace {

struct Row {
  StoredEvent event;
  TimePoint due_at;
  std::string lease_owner;  // empty: not leased
  TimePoint lease_until;
  std::string last_error;
};

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(const StoreOptions& options) : options_(options) {}

  std::string_view backend() const override { return "memory"; }

  void append(std::span<const Event> events, TxHandle tx) override {
    if (!tx.is_none())
      throw ConfigError("the memory store takes no transaction handle (use TxHandle{})", "memory");
    auto prepared = core::prepare_for_append(events, options_, "memory");
    {
      std::lock_guard lock(mu_);
      std::unordered_set<EventId, EventIdHash> in_call;
      for (auto& e : prepared) {
        if (by_id_.contains(e.id) || dead_by_id_.contains(e.id) || !in_call.insert(e.id).second)
          throw Error(ErrorCode::conflict, "memory", "duplicate event id " + e.id.str());
      }
      TimePoint t = now();
      for (auto& e : prepared) {
        Row row;
        row.due_at = e.deliver_at && *e.deliver_at > t ? *e.deliver_at : t;
        static_cast<Event&>(row.event) = std::move(e);
        row.event.seq = ++last_seq_;
        by_id_[row.event.id] = row.event.seq;
        live_.emplace(row.event.seq, std::move(row));
      }
      ++generation_;
    }
    cv_.notify_all();
  }

  ClaimedBatch claim(std::size_t max, Duration lease, ClaimOrder order) override {
    ClaimedBatch batch;
    batch.lease.owner = "mem-" + std::to_string(++claim_counter_);
    std::lock_guard lock(mu_);
    TimePoint t = now();
    std::unordered_set<std::string> blocked_keys;
    // strict (on_dead=hold): a dead letter holds back the later events of its key until it is
    // retried or discarded (store.h).
    strict_ = order == ClaimOrder::strict;
    const auto dead_heads = strict_ ? dead_heads_locked() : DeadHeads{};
    for (auto& [seq, row] : live_) {
      if (batch.events.size() >= max) break;
      bool claimable = row.due_at <= t && (row.lease_owner.empty() || row.lease_until <= t);
      bool keyed = order != ClaimOrder::unordered && !row.event.key.empty();
      if (keyed && blocked_keys.contains(row.event.key)) continue;
      if (auto it = keyed ? dead_heads.find(row.event.key) : dead_heads.end();
          it != dead_heads.end() && it->second < seq) {
        blocked_keys.insert(row.event.key);
        continue;
      }
      if (!claimable) {
        if (keyed) blocked_keys.insert(row.event.key);
        continue;
      }
      // Still owned by an earlier claim: its lease expired with no outcome recorded. That
      // claim's attempt stays the one in flight; the expiry counts as a crash (store.h).
      if (row.lease_owner.empty())
        row.event.attempts += 1;
      else
        row.event.crashes += 1;
      row.lease_owner = batch.lease.owner;
      row.lease_until = t + lease;
      batch.events.push_back(row.event);
    }
    return batch;
  }

  std::size_t ack(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    std::lock_guard lock(mu_);
    std::size_t n = 0;
    for (const auto& id : ids) {
      Row* row = leased_row(batch, id);
      if (!row) continue;
      if (options_.archive) archive_.push_back({row->event, now()});
      by_id_.erase(id);
      live_.erase(row->event.seq);
      ++n;
    }
    prune_archive();
    return n;
  }

  std::size_t nack(const ClaimedBatch& batch, std::span<const Nack> nacks) override {
    std::size_t n = 0;
    {
      std::lock_guard lock(mu_);
      TimePoint t = now();
      for (const auto& nk : nacks) {
        Row* row = leased_row(batch, nk.id);
        if (!row) continue;
        ++n;
        if (!nk.retry_in) {
          DeadEvent d;
          static_cast<StoredEvent&>(d) = row->event;
          d.last_error = nk.error;
          d.dead_at = t;
          dead_by_id_[nk.id] = d.seq;
          dead_.emplace(d.seq, std::move(d));
          by_id_.erase(nk.id);
          live_.erase(row->event.seq);
          continue;
        }
        row->lease_owner.clear();
        row->last_error = nk.error;
        row->due_at = t + *nk.retry_in;
      }
      ++generation_;
    }
    cv_.notify_all();
    return n;
  }

  std::size_t release(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    std::size_t n = 0;
    {
      std::lock_guard lock(mu_);
      for (const auto& id : ids) {
        Row* row = leased_row(batch, id);
        if (!row) continue;
        row->lease_owner.clear();
        row->event.attempts = std::max(0, row->event.attempts - 1);
        ++n;
      }
      ++generation_;
    }
    cv_.notify_all();
    return n;
  }

  bool renew(const ClaimedBatch& batch, Duration lease) override {
    std::lock_guard lock(mu_);
    TimePoint t = now();
    bool held = true;
    for (const auto& e : batch.events) {
      auto it = by_id_.find(e.id);
      if (it == by_id_.end()) continue;  // settled already
      Row& row = live_.at(it->second);
      if (row.lease_owner == batch.lease.owner) {
        row.lease_until = t + lease;  // ours, even if it expired meanwhile: nobody took it
      } else if (!row.lease_owner.empty()) {
        held = false;  // expired and claimed by somebody else
      }
    }
    return held;
  }

  StoreStats stats() override {
    std::lock_guard lock(mu_);
    StoreStats s;
    TimePoint t = now();
    for (const auto& [seq, row] : live_) {
      if (!row.lease_owner.empty() && row.lease_until > t)
        ++s.leased;
      else if (scheduled(row, t))
        ++s.scheduled;
      else
        ++s.pending;
    }
    s.dead = static_cast<std::int64_t>(dead_.size());
    s.archived = static_cast<std::int64_t>(archive_.size());
    // The oldest undelivered event that is not scheduled (an event scheduled for tomorrow is not
    // a stuck one), as PostgreSQL counts it.
    std::optional<TimePoint> oldest;
    for (const auto& [seq, row] : live_)
      if (!scheduled(row, t) && (!oldest || row.event.occurred_at < *oldest))
        oldest = row.event.occurred_at;
    if (oldest)
      s.oldest_pending_age = std::chrono::duration_cast<Duration>(t - std::min(t, *oldest));
    return s;
  }

  std::vector<StoredEvent> list(std::size_t limit) override {
    std::lock_guard lock(mu_);
    std::vector<StoredEvent> out;
    for (const auto& [seq, row] : live_) {
      if (out.size() >= limit) break;
      out.push_back(row.event);
    }
    return out;
  }

  std::vector<EventState> blocked(std::size_t limit) override {
    std::lock_guard lock(mu_);
    TimePoint t = now();
    std::vector<EventState> out;
    std::unordered_set<std::string_view> seen;  // keys whose head was passed
    const auto dead_heads = dead_heads_locked();
    for (const auto& [seq, row] : live_) {
      if (out.size() >= limit) break;
      if (row.event.key.empty() || !seen.insert(row.event.key).second) continue;
      auto d = dead_heads.find(row.event.key);
      const bool behind_dead = d != dead_heads.end() && d->second < seq;
      if (!behind_dead && (row.event.attempts == 0 || row.last_error.empty())) continue;
      out.push_back(state_of(row, t));
      out.back().reason = behind_dead ? "dead" : "failing";  // store.h, EventState::reason
    }
    return out;
  }

  std::vector<EventState> leased(std::size_t limit) override {
    std::lock_guard lock(mu_);
    TimePoint t = now();
    std::vector<EventState> out;
    for (const auto& [seq, row] : live_) {
      if (out.size() >= limit) break;
      if (!row.lease_owner.empty() && row.lease_until > t) out.push_back(state_of(row, t));
    }
    return out;
  }

  // The archive (StoreOptions::archive, URL `archive=1`), most recently archived first, as the
  // other stores read theirs (docs/cli.md, "events archive"); empty when archiving is off.
  std::vector<ArchivedEvent> archived(std::size_t limit) override {
    std::lock_guard lock(mu_);
    prune_archive();
    std::vector<ArchivedEvent> out;
    for (auto it = archive_.rbegin(); it != archive_.rend() && out.size() < limit; ++it) {
      ArchivedEvent& a = out.emplace_back();
      static_cast<StoredEvent&>(a) = it->first;
      a.archived_at = it->second;
    }
    return out;
  }

  std::vector<DeadEvent> dead(std::size_t limit) override {
    std::lock_guard lock(mu_);
    std::vector<DeadEvent> out;
    for (const auto& [seq, d] : dead_) {
      if (out.size() >= limit) break;
      out.push_back(d);
    }
    return out;
  }

  std::size_t retry(std::span<const EventId> ids) override {
    std::size_t n = 0;
    {
      std::lock_guard lock(mu_);
      for (const auto& id : ids) n += revive(id);
      ++generation_;
    }
    cv_.notify_all();
    return n;
  }

  std::size_t retry_all() override {
    std::size_t n = 0;
    {
      std::lock_guard lock(mu_);
      std::vector<EventId> ids;
      for (const auto& [seq, d] : dead_) ids.push_back(d.id);
      for (const auto& id : ids) n += revive(id);
      ++generation_;
    }
    cv_.notify_all();
    return n;
  }

  // A discard unblocks the key of the dead letter under strict claims: it wakes the waiters.
  std::size_t discard(std::span<const EventId> ids) override {
    std::size_t n = 0;
    {
      std::lock_guard lock(mu_);
      for (const auto& id : ids) {
        auto it = dead_by_id_.find(id);
        if (it == dead_by_id_.end()) continue;
        dead_.erase(it->second);
        dead_by_id_.erase(it);
        ++n;
      }
      ++generation_;
    }
    cv_.notify_all();
    return n;
  }

  std::size_t discard_all() override {
    std::size_t n = 0;
    {
      std::lock_guard lock(mu_);
      n = dead_.size();
      dead_.clear();
      dead_by_id_.clear();
      ++generation_;
    }
    cv_.notify_all();
    return n;
  }

  void wait_for_work(Duration max) override {
    std::unique_lock lock(mu_);
    std::uint64_t seen = generation_;
    std::uint64_t interrupts = interrupts_;
    // Wake no later than the next retry or lease expiry, so due work is not left waiting.
    // Only events that could be claimed then count: one held back behind an unsettled earlier
    // event of its key (ordered mode) would make the caller wake at once and claim nothing.
    // Under strict claims (the last claim's order) an event held behind a dead letter of its
    // key is no work either, due or not, until the dead letter is retried or discarded (which
    // wakes the waiters).
    TimePoint t = now();
    TimePoint until = t + max;
    std::unordered_set<std::string> blocked_keys;
    const auto dead_heads = strict_ ? dead_heads_locked() : DeadHeads{};
    for (const auto& [seq, row] : live_) {
      bool keyed = !row.event.key.empty();
      if (keyed && blocked_keys.contains(row.event.key)) continue;
      if (auto it = keyed ? dead_heads.find(row.event.key) : dead_heads.end();
          it != dead_heads.end() && it->second < seq)
        continue;
      bool leased = !row.lease_owner.empty() && row.lease_until > t;
      TimePoint ready = leased ? row.lease_until : row.due_at;
      if (ready > t && keyed) blocked_keys.insert(row.event.key);
      if (ready < until) until = std::max(ready, t);
    }
    cv_.wait_for(lock, until - t, [&] { return generation_ != seen || interrupts_ != interrupts; });
  }

  void interrupt() override {
    {
      std::lock_guard lock(mu_);
      ++interrupts_;
    }
    cv_.notify_all();
  }

 private:
  // The live row for `id` if it is still leased under the batch's token. Caller holds mu_.
  Row* leased_row(const ClaimedBatch& batch, const EventId& id) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return nullptr;
    Row& row = live_.at(it->second);
    if (row.lease_owner != batch.lease.owner) return nullptr;
    return &row;
  }

  // Never attempted, not leased, due later: held by its deliver_at (StoreStats::scheduled).
  static bool scheduled(const Row& row, TimePoint t) {
    return row.event.attempts == 0 && row.lease_owner.empty() && row.due_at > t;
  }

  // The lowest dead seq of each key with a dead letter. Caller holds mu_.
  using DeadHeads = std::unordered_map<std::string, std::int64_t>;
  DeadHeads dead_heads_locked() const {
    DeadHeads heads;
    for (const auto& [seq, d] : dead_)
      if (!d.key.empty()) heads.emplace(d.key, seq);  // dead_ is in seq order: the first stays
    return heads;
  }

  static EventState state_of(const Row& row, TimePoint t) {
    EventState s;
    s.seq = row.event.seq;
    s.id = row.event.id;
    s.type = row.event.type;
    s.key = row.event.key;
    s.attempts = row.event.attempts;
    s.crashes = row.event.crashes;
    s.last_error = row.last_error;
    if (!row.lease_owner.empty() && row.lease_until > t) {
      s.lease_owner = row.lease_owner;
      s.lease_until = row.lease_until;
    } else {
      s.next_attempt = row.due_at;
    }
    return s;
  }

  // Dead -> pending, keeping its sequence. Caller holds mu_.
  std::size_t revive(const EventId& id) {
    auto it = dead_by_id_.find(id);
    if (it == dead_by_id_.end()) return 0;
    DeadEvent d = std::move(dead_.at(it->second));
    dead_.erase(it->second);
    dead_by_id_.erase(it);
    Row row;
    row.event = d;
    row.event.attempts = 0;
    row.event.crashes = 0;
    row.due_at = now();
    row.last_error = d.last_error;
    by_id_[row.event.id] = row.event.seq;
    live_.emplace(row.event.seq, std::move(row));
    return 1;
  }

  // Retention of the archive and of the dead letters (StoreOptions), applied on ack.
  void prune_archive() {
    if (options_.dead_retention.count() > 0) {
      TimePoint cutoff = now() - options_.dead_retention;
      for (auto it = dead_.begin(); it != dead_.end();) {
        if (it->second.dead_at < cutoff) {
          dead_by_id_.erase(it->second.id);
          it = dead_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (options_.archive_retention.count() == 0) return;
    TimePoint cutoff = now() - options_.archive_retention;
    while (!archive_.empty() && archive_.front().second < cutoff) archive_.pop_front();
  }

  const StoreOptions options_;
  std::atomic<std::uint64_t> claim_counter_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::int64_t last_seq_ = 0;                                          // guarded by mu_
  std::map<std::int64_t, Row> live_;                                   // guarded by mu_
  std::unordered_map<EventId, std::int64_t, EventIdHash> by_id_;       // guarded by mu_
  std::map<std::int64_t, DeadEvent> dead_;                             // guarded by mu_
  std::unordered_map<EventId, std::int64_t, EventIdHash> dead_by_id_;  // guarded by mu_
  std::deque<std::pair<StoredEvent, TimePoint>> archive_;              // guarded by mu_
  std::uint64_t generation_ = 0;                                       // guarded by mu_
  std::uint64_t interrupts_ = 0;                                       // guarded by mu_
  bool strict_ = false;  // guarded by mu_: the last claim was ClaimOrder::strict
};

}  // namespace

std::unique_ptr<Store> make_memory_store(const StoreOptions& options) {
  return std::make_unique<MemoryStore>(options);
}

}  // namespace outpost

namespace outpost {

std::unique_ptr<Store> open_memory_store(std::string_view url, const StoreOptions& options) {
  auto u = core::Url::parse(url);
  if (u.scheme() != "memory") throw ConfigError("not a memory: URL: '" + u.redacted() + "'");
  if (!u.path().empty() || u.hierarchical())
    throw ConfigError("bad URL '" + u.redacted() + "': memory: takes no path");
  StoreOptions o = options;
  // The archive parameters of every store (docs/configuration.md, "Store URLs"), so one URL
  // means the same on memory as on SQLite, PostgreSQL and Redis.
  if (auto archive = u.bool_param("archive")) o.archive = *archive;
  core::apply_retention_params(u, o);  // archive_retention=, dead_retention=
  u.reject_unknown();
  return make_memory_store(o);
}

}  // namespace outpost
