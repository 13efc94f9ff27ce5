// The Redis store (include/outpost/stores/redis.h): the life cycle of store.h as Lua scripts over
// a hash per event and sorted sets, all under the hash tag {prefix}. Layout in redis_scripts.h.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <initializer_list>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "core/append_check.h"
#include "outpost/stores/redis.h"
#include "stores/redis/redis_body.h"
#include "stores/redis/redis_client.h"
#include "stores/redis/redis_durability.h"
#include "stores/redis/redis_partition.h"
#include "stores/redis/redis_reads.h"
#include "stores/redis/redis_scripts.h"
#include "stores/redis/redis_url.h"
#include "stores/redis/redis_wake.h"

namespace outpost {
namespace redis_store {
namespace {

constexpr std::string_view kBackend = "redis";
constexpr std::size_t kBulkChunk = 1000;  // ids per retry_all/discard_all script call

std::string with_prologue(const char* body) {
  return std::string(kPrologue) + body;
}

// The prologue, the given function definitions (redis_scripts.h) and a body calling them.
std::string with_functions(std::initializer_list<const char*> functions, const char* body) {
  std::string text(kPrologue);
  for (const char* f : functions) text += f;
  return text + body;
}

std::string str(const redisReply* r) {
  return reply_string(r);
}

}  // namespace

std::string instance_token() {
  std::random_device rd;
  std::mt19937_64 rng((static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<std::uint64_t>(::getpid()));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return std::string(buf) + "-" + std::to_string(::getpid());
}

namespace {

struct Scripts {
  Script append{"append", with_functions({kAppendFn}, kAppend), {}, {}};
  Script claim{"claim", with_functions({kClaimFn}, kClaimBody), {}, {}};
  Script ack{"ack", with_functions({kAckFn}, kAckBody), {}, {}};
  Script nack{"nack", with_functions({kNackFn}, kNackBody), {}, {}};
  Script release{"release", with_functions({kReleaseFn}, kReleaseBody), {}, {}};
  Script settle{"settle_and_claim",
                with_functions({kAckFn, kNackFn, kReleaseFn, kSettleFn, kClaimFn}, kSettleBody),
                {},
                {}};
  Script renew{"renew", with_prologue(kRenew), {}, {}};
  Script heartbeat{"heartbeat", with_prologue(kHeartbeat), {}, {}};
  Script prune{"prune", with_prologue(kPrune), {}, {}};
  Script unlock{"unlock", with_prologue(kUnlock), {}, {}};
  Script stats{"stats", with_prologue(kStats), {}, {}};
  Script list{"list", with_prologue(kList), {}, {}};
  Script inspect{"inspect", with_prologue(kInspect), {}, {}};
  Script retry{"retry", with_prologue(kRetry), {}, {}};
  Script discard{"discard", with_prologue(kDiscard), {}, {}};
};

class RedisStore final : public PartitionStore {
 public:
  // `writer_lease` zero: no writer lease (several relays claim at once). `token`, `owner_tag`:
  // as open_partition's (redis_partition.h).
  RedisStore(ClientOptions client_options, std::string prefix, Duration writer_lease,
             const StoreOptions& options, std::string token = {}, std::string owner_tag = {},
             std::shared_ptr<std::once_flag> durability_once = {})
      : options_(options),
        base_("{" + prefix + "}:"),
        key_(base_ + "pending"),
        token_(writer_lease.count() <= 0 ? std::string()
               : token.empty()           ? instance_token()
                                         : std::move(token)),
        owner_tag_(std::move(owner_tag)),
        writer_lease_(writer_lease),
        client_(std::move(client_options)),
        durability_checked_(durability_once ? std::move(durability_once)
                                            : std::make_shared<std::once_flag>()),
        wake_(client_, base_ + "wake") {}

  ~RedisStore() override {
    {
      std::lock_guard lock(heartbeat_mu_);
      stopping_ = true;
    }
    heartbeat_cv_.notify_all();
    if (heartbeat_.joinable()) heartbeat_.join();
    // Compare-and-delete of the writer lease so a standby relay takes over at once.
    if (held_.load()) give_up_writer_lease();
  }

  bool holds_writer_lease() const override { return held_.load(); }
  void prune_retained() override {
    client_.eval(scripts_.prune, key_, {base_, options_.archive ? "1" : "0", retention_arg()});
  }
  std::int64_t next_hint_ms() const override { return next_hint_ms_.load(); }

  void give_up_writer_lease() override {
    if (token_.empty()) return;
    held_ = false;
    try {
      client_.eval(scripts_.unlock, key_, {base_, token_});
    } catch (const std::exception&) {  // best effort: the lease expires on its own
    }
  }

  std::string_view backend() const override { return kBackend; }

  void append(std::span<const Event> events, TxHandle tx) override {
    auto prepared = core::prepare_for_append(events, options_, kBackend);
    if (prepared.empty()) return;
    AppendArgv a;
    append_argv(prepared, base_, a);
    const auto& argv = a.argv;
    if (tx.is_none()) {
      client_.eval(scripts_.append, key_, argv, /*idempotent=*/false);
      return;
    }
    if (tx.kind() != TxHandle::Kind::redis || !tx.native())
      throw ConfigError("redis: append takes TxHandle::redis_multi(ctx) or TxHandle{}", "redis");
    append_in_multi(static_cast<redisContext*>(tx.native()), argv);
  }

  ClaimedBatch claim(std::size_t max, Duration lease, ClaimOrder order) override {
    ClaimedBatch batch;
    if (max == 0) return batch;
    ClaimArgs c = claim_args(batch, max, lease, order);
    Reply r = client_.eval(
        scripts_.claim, key_,
        {base_, token_, c.max, c.lease, c.ordered, batch.lease.owner, c.scan, c.writer_ms});
    read_claim(batch, r.get(), 0);
    return batch;
  }

  // Settles `done` and claims the next batch in one script (one round trip): the settle part
  // is fenced exactly like ack/nack/release, and the claim sees the settled keys' next heads.
  ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& settlement,
                                SettleCounts& counts, std::size_t max, Duration lease,
                                ClaimOrder order) override {
    counts = {};
    if (max == 0) return Store::settle_and_claim(done, settlement, counts, max, lease, order);
    ClaimedBatch batch;
    ClaimArgs c = claim_args(batch, max, lease, order);
    // settle_body.lua's ARGV: the settle arguments' head, the claim's, then the settle items.
    const std::vector<std::string> settle = settle_call(done, settlement);
    constexpr std::size_t kHead = 9;
    std::vector<std::string_view> argv(settle.begin(), settle.begin() + kHead);
    argv.insert(argv.end(),
                {token_, c.max, c.lease, c.ordered, batch.lease.owner, c.scan, c.writer_ms});
    argv.insert(argv.end(), settle.begin() + kHead, settle.end());
    Reply r = client_.eval(scripts_.settle, key_, argv);
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 5)
      throw Error(ErrorCode::backend, "redis", "settle_and_claim: unexpected reply");
    auto count = [&](std::size_t i) {
      auto n = reply_int(r->element[i]);
      return n < 0 ? std::size_t{0} : static_cast<std::size_t>(n);
    };
    counts.acked = count(0);
    counts.nacked = count(1);
    counts.released = count(2);
    read_claim(batch, r.get(), 3);
    return batch;
  }

  std::size_t ack(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    if (ids.empty()) return 0;
    std::vector<std::string> owned = ack_strings(batch, ids);
    const std::string fence = std::to_string(batch.lease.fence);
    const std::string retention = retention_arg();
    const std::string n_ids = std::to_string(ids.size());
    std::vector<std::string_view> argv{
        base_, fence, batch.lease.owner, options_.archive ? "1" : "0", retention, n_ids};
    argv.insert(argv.end(), owned.begin(), owned.end());
    return settled(client_.eval(scripts_.ack, key_, argv));
  }

  std::size_t nack(const ClaimedBatch& batch, std::span<const Nack> nacks) override {
    if (nacks.empty()) return 0;
    std::vector<std::string> owned;
    owned.reserve(nacks.size() * 2);
    const std::string fence = std::to_string(batch.lease.fence);
    std::vector<std::string_view> argv{base_, fence, batch.lease.owner};
    for (const auto& nk : nacks) {
      owned.push_back(nk.id.str());
      owned.push_back(nk.retry_in ? std::to_string(std::max<std::int64_t>(0, nk.retry_in->count()))
                                  : std::string("-1"));
    }
    for (std::size_t i = 0; i < nacks.size(); ++i)
      argv.insert(argv.end(), {owned[i * 2], nacks[i].error, owned[i * 2 + 1]});
    return settled(client_.eval(scripts_.nack, key_, argv));
  }

  std::size_t release(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    if (ids.empty()) return 0;
    std::vector<std::string> owned = id_strings(ids);
    const std::string fence = std::to_string(batch.lease.fence);
    std::vector<std::string_view> argv{base_, fence, batch.lease.owner};
    argv.insert(argv.end(), owned.begin(), owned.end());
    return settled(client_.eval(scripts_.release, key_, argv));
  }

  bool renew(const ClaimedBatch& batch, Duration lease) override {
    std::vector<std::string> owned;
    owned.reserve(batch.events.size());
    for (const auto& e : batch.events) owned.push_back(e.id.str());
    const std::string fence = std::to_string(batch.lease.fence);
    const std::string lease_s = std::to_string(std::max<std::int64_t>(1, lease.count()));
    const std::string writer_ms = writer_ms_while_alive(lease);
    std::vector<std::string_view> argv{base_, token_, fence, batch.lease.owner, lease_s, writer_ms};
    argv.insert(argv.end(), owned.begin(), owned.end());
    return reply_int(client_.eval(scripts_.renew, key_, argv).get()) == 1;
  }

  std::vector<std::string> claim_call(ClaimedBatch& batch, std::size_t max, Duration lease,
                                      ClaimOrder order) override {
    ClaimArgs c = claim_args(batch, max, lease, order);
    return {base_, token_, c.max, c.lease, c.ordered, batch.lease.owner, c.scan, c.writer_ms};
  }

  void claim_reply(ClaimedBatch& batch, const redisReply* reply) override {
    read_claim(batch, reply, 0);
  }

  // B, fence, owner, archive, retention, n_acks, n_ack_keys, n_nacks, n_releases, then the acked
  // ids and their keys (ack_strings), nack triples (id, error, retry ms) and released ids.
  std::vector<std::string> settle_call(const ClaimedBatch& done,
                                       const Settlement& settlement) override {
    std::vector<std::string> acks = ack_strings(done, settlement.acks);
    std::vector<std::string> a{base_,
                               std::to_string(done.lease.fence),
                               done.lease.owner,
                               options_.archive ? "1" : "0",
                               retention_arg(),
                               std::to_string(settlement.acks.size()),
                               std::to_string(acks.size() - settlement.acks.size()),
                               std::to_string(settlement.nacks.size()),
                               std::to_string(settlement.releases.size())};
    a.reserve(a.size() + acks.size() + settlement.nacks.size() * 3 + settlement.releases.size());
    std::move(acks.begin(), acks.end(), std::back_inserter(a));
    for (const auto& nk : settlement.nacks) {
      a.push_back(nk.id.str());
      a.push_back(nk.error);
      a.push_back(nk.retry_in ? std::to_string(std::max<std::int64_t>(0, nk.retry_in->count()))
                              : std::string("-1"));
    }
    for (const auto& id : settlement.releases) a.push_back(id.str());
    return a;
  }

  StoreStats stats() override {
    Reply r = client_.eval(scripts_.stats, key_, {base_});
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 7)
      throw Error(ErrorCode::backend, "redis", "stats: unexpected reply");
    StoreStats s;
    s.pending = reply_int(r->element[0]);
    s.leased = reply_int(r->element[1]);
    s.dead = reply_int(r->element[2]);
    s.archived = reply_int(r->element[3]);
    if (r->elements >= 8) s.scheduled = reply_int(r->element[7]);
    Event oldest;
    if (unpack_body(str(r->element[6]), oldest)) {
      std::int64_t now_us = text_int(str(r->element[4])) * 1'000'000 + text_int(str(r->element[5]));
      std::int64_t age_us =
          std::max<std::int64_t>(0, now_us - oldest.occurred_at.time_since_epoch().count());
      s.oldest_pending_age = Duration(age_us / 1000);
    }
    return s;
  }

  std::vector<StoredEvent> list(std::size_t limit) override {
    std::vector<StoredEvent> out;
    for (auto& d : read_list(client_, scripts_.list, key_, base_, "live", limit))
      out.push_back(std::move(d));
    return out;
  }

  std::vector<DeadEvent> dead(std::size_t limit) override {
    return read_list(client_, scripts_.list, key_, base_, "dead", limit);
  }

  std::vector<ArchivedEvent> archived(std::size_t limit) override {
    return read_archived(client_, base_, limit);
  }

  std::vector<EventState> blocked(std::size_t limit) override {
    return read_inspect(client_, scripts_.inspect, key_, base_, "blocked", limit);
  }
  std::vector<EventState> leased(std::size_t limit) override {
    return read_inspect(client_, scripts_.inspect, key_, base_, "leased", limit);
  }

  std::size_t retry(std::span<const EventId> ids) override { return bulk(scripts_.retry, ids); }
  std::size_t retry_all() override { return bulk_all(scripts_.retry); }
  std::size_t discard(std::span<const EventId> ids) override { return bulk(scripts_.discard, ids); }
  std::size_t discard_all() override { return bulk_all(scripts_.discard); }

  void wait_for_work(Duration max) override {
    std::int64_t hint = next_hint_ms_.load();
    Duration wait = max;
    if (hint >= 0 && Duration(hint) < wait) wait = Duration(hint);
    if (wait.count() > 0) wake_.wait(std::chrono::steady_clock::now() + wait);
  }

  void interrupt() override { wake_.interrupt(); }

 private:
  struct ClaimArgs {
    std::string max, lease, ordered, scan, writer_ms;
  };

  // The ack's retention argument (ack_fn.lua): "<archive_retention_ms>[,<dead_retention_ms>]".
  std::string retention_arg() const {
    std::string r = std::to_string(options_.archive_retention.count());
    if (options_.dead_retention.count() > 0)
      r += "," + std::to_string(options_.dead_retention.count());
    return r;
  }

  // Arguments of the claim function; sets the new batch's lease owner.

  ClaimArgs claim_args(ClaimedBatch& batch, std::size_t max, Duration lease, ClaimOrder order) {
    std::call_once(*durability_checked_, [this] { warn_about_durability(); });
    batch.lease.owner = token_.empty() ? instance_owner_ : token_;
    batch.lease.owner += "#" + owner_tag_ + std::to_string(++claims_);
    return {std::to_string(max), std::to_string(std::max<std::int64_t>(1, lease.count())),
            order == ClaimOrder::strict    ? "2"
            : order == ClaimOrder::ordered ? "1"
                                           : "0",
            std::to_string(std::max<std::size_t>(1000, max * 20)), writer_ms_while_alive(lease)};
  }

  // Reads the claim function's reply {fence, hint, events...} starting at element `at`
  // (claim_fn.lua).
  void read_claim(ClaimedBatch& batch, const redisReply* r, std::size_t at) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements < at + 2)
      throw Error(ErrorCode::backend, "redis", "claim: unexpected reply");
    std::int64_t fence = reply_int(r->element[at]);
    std::int64_t hint = reply_int(r->element[at + 1]);
    if (fence < 0) {  // another relay holds the writer lease: stand by until it may expire
      held_ = false;
      next_hint_ms_ = std::max<std::int64_t>(hint, 1);
      return;
    }
    if (!token_.empty()) hold_writer_lease(fence);
    batch.lease.fence = fence;
    constexpr std::size_t kFields = 6;  // id, body, seq, attempts, crashes, deliver_at
    const std::size_t n = (r->elements - at - 2) / kFields;
    next_hint_ms_ = n == 0 ? hint : 0;
    batch.events.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      redisReply** f = r->element + at + 2 + i * kFields;
      StoredEvent e;
      fill(e, f, base_);
      e.attempts = static_cast<int>(reply_int(f[3]));
      e.crashes = static_cast<int>(reply_int(f[4]));
      if (std::int64_t at = reply_int(f[5]); at > 0)
        e.deliver_at = TimePoint(std::chrono::milliseconds(at));
      batch.events.push_back(std::move(e));
    }
    std::sort(batch.events.begin(), batch.events.end(),
              [](const StoredEvent& a, const StoredEvent& b) { return a.seq < b.seq; });
  }

  // Once, at the relay's first claim rather than at open: an `outpost emit` or `events` command
  // does not repeat it, and a server that is down at open delays nothing (docs/redis.md,
  // Durability). CONFIG refused (managed Redis) or any failure: nothing is said.
  void warn_about_durability() {
    try {
      std::string node;
      const std::string problems = durability_problems([&](const char* name) {
        Reply r = client_.command({"CONFIG", "GET", name}, true, &node);
        std::optional<std::string> v;
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2) v = str(r->element[1]);
        return v;
      });
      const std::string line = durability_warning(
          "redis store " + base_.substr(0, base_.size() - 1) + " at " + node, problems);
      if (!line.empty()) std::fputs(line.c_str(), stderr);
    } catch (const std::exception&) {  // the claim reports a server that cannot be reached
    }
  }

  // The writer lease ends at the earlier of two deadlines: writer_lease_ms after the holder's
  // last heartbeat (a crash: the standby takes over soon, whatever the event lease), and one
  // event lease after its relay last claimed or renewed (a hung relay, as without heartbeats).
  // Each claim and renew starts a new event lease; one ending sooner (an empty claim after a
  // renew) does not shorten a batch's still held (its settlement would be fenced). Returns the
  // writer lease's length (ms) to set with it.
  std::string writer_ms_while_alive(Duration lease) {
    const std::int64_t until = steady_ms() + lease.count();
    std::int64_t was = alive_until_ms_.load();
    while (was < until && !alive_until_ms_.compare_exchange_weak(was, until)) {
    }
    return std::to_string(std::max<std::int64_t>(1, std::min(writer_lease_, lease).count()));
  }

  static std::int64_t steady_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Called after each claim that holds the writer lease under `fence`: from the first one on, a
  // thread renews the lease every third of writer_lease_ms.
  void hold_writer_lease(std::int64_t fence) {
    fence_ = fence;
    held_ = true;
    std::call_once(heartbeat_started_, [this] { heartbeat_ = std::thread([this] { beat(); }); });
  }

  // The heartbeat thread. A lost lease (another relay took it) stops the beats until a claim
  // takes it again; the fence check in every settle keeps this relay's late acks out meanwhile.
  void beat() {
    std::unique_lock lock(heartbeat_mu_);
    while (!heartbeat_cv_.wait_for(lock, writer_lease_ / 3, [this] { return stopping_; })) {
      const std::int64_t left = std::min(alive_until_ms_.load() - steady_ms(),
                                         static_cast<std::int64_t>(writer_lease_.count()));
      if (!held_ || left <= 0) continue;
      lock.unlock();
      const std::string fence = std::to_string(fence_.load());
      const std::string ms = std::to_string(left);
      try {
        if (reply_int(client_.eval(scripts_.heartbeat, key_, {base_, token_, fence, ms}).get()) !=
            1)
          held_ = false;
      } catch (const std::exception&) {  // the next beat tries again; the claim reports errors
      }
      lock.lock();
    }
  }

  // One EVAL queued into the caller's MULTI (EVALSHA could not recover from NOSCRIPT at EXEC).
  void append_in_multi(redisContext* ctx, const std::vector<std::string_view>& argv) {
    const std::string& text = scripts_.append.text;
    std::vector<const char*> cargv{"EVAL", text.c_str(), "1", key_.c_str()};
    std::vector<size_t> lens{4, text.size(), 1, key_.size()};
    for (auto a : argv) {
      cargv.push_back(a.data());
      lens.push_back(a.size());
    }
    Reply r(static_cast<redisReply*>(
        redisCommandArgv(ctx, static_cast<int>(cargv.size()), cargv.data(), lens.data())));
    // Nothing is applied before the caller's EXEC: a lost reply is not in doubt.
    if (!r) throw_failure({"append in MULTI: connection lost", {}, ctx});
    if (r->type == REDIS_REPLY_STATUS && str(r.get()) == "QUEUED") return;
    if (r->type == REDIS_REPLY_ERROR) throw_failure({"append in MULTI", str(r.get())});
    // The server ran the EVAL at once: the context was not inside MULTI.
    throw ConfigError(
        "redis: TxHandle::redis_multi needs a context inside MULTI; the events were written "
        "without the caller's transaction",
        "redis");
  }

  std::size_t bulk(const Script& script, std::span<const EventId> ids) {
    if (ids.empty()) return 0;
    std::vector<std::string> owned = id_strings(ids);
    std::vector<std::string_view> argv{base_, "ids", "0"};
    argv.insert(argv.end(), owned.begin(), owned.end());
    return static_cast<std::size_t>(reply_int(client_.eval(script, key_, argv).get()));
  }

  std::size_t bulk_all(const Script& script) {
    const std::string chunk = std::to_string(kBulkChunk);
    std::size_t total = 0;
    for (;;) {
      auto n = reply_int(client_.eval(script, key_, {base_, "all", chunk}).get());
      total += static_cast<std::size_t>(n);
      if (n < static_cast<std::int64_t>(kBulkChunk)) return total;
    }
  }

  // Count from ack/nack/release; -1 (fenced off: the writer lease changed hands) counts 0.
  static std::size_t settled(const Reply& r) {
    auto n = reply_int(r.get());
    return n < 0 ? 0 : static_cast<std::size_t>(n);
  }

  // The ack script's arguments: the ids, then the distinct non-empty keys of those events as
  // claimed in `batch` (so the script need not read them), or the one entry "?" when an id is
  // not in the batch (the script then reads the keys from the bodies).
  static std::vector<std::string> ack_strings(const ClaimedBatch& batch,
                                              std::span<const EventId> ids) {
    std::vector<std::string> out;
    out.reserve(ids.size() * 2);
    std::vector<std::string_view> keys;
    keys.reserve(ids.size());
    bool unknown = false;
    std::size_t hint = 0;  // acks usually follow the batch's order
    for (const auto& id : ids) {
      out.push_back(id.str());
      const StoredEvent* found = nullptr;
      for (std::size_t i = 0; i < batch.events.size() && !found; ++i) {
        const auto& e = batch.events[(hint + i) % batch.events.size()];
        if (e.id == id) {
          found = &e;
          hint = (hint + i + 1) % batch.events.size();
        }
      }
      if (!found)
        unknown = true;
      else if (!found->key.empty())
        keys.push_back(found->key);
    }
    if (unknown) {
      out.emplace_back("?");
      return out;
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    for (auto k : keys) out.emplace_back(k);
    return out;
  }

  static std::vector<std::string> id_strings(std::span<const EventId> ids) {
    std::vector<std::string> out;
    out.reserve(ids.size());
    for (const auto& id : ids) out.push_back(id.str());
    return out;
  }

  const StoreOptions options_;
  const std::string base_;       // "{prefix}:"
  const std::string key_;        // KEYS[1] of every script: routes to the slot of {prefix}
  const std::string token_;      // writer lease owner token ("" = writer lease off)
  const std::string owner_tag_;  // after '#' in every claim's owner (redis_partition.h)
  const Duration writer_lease_;  // its length when the holder crashed (0 = writer lease off)
  const std::string instance_owner_ = instance_token();
  Client client_;
  Scripts scripts_;
  std::atomic<std::uint64_t> claims_{0};
  std::atomic<bool> held_{false};                // we hold the writer lease (as last seen)
  std::atomic<std::int64_t> fence_{0};           // the fence of our writer lease
  std::atomic<std::int64_t> alive_until_ms_{0};  // steady ms: last claim/renew + its lease
  std::once_flag heartbeat_started_;
  // Shared by a partitioned store's partitions: its relay warns once (docs/redis.md, Durability).
  const std::shared_ptr<std::once_flag> durability_checked_;
  std::thread heartbeat_;
  std::mutex heartbeat_mu_;
  std::condition_variable heartbeat_cv_;
  bool stopping_ = false;                       // guarded by heartbeat_mu_
  std::atomic<std::int64_t> next_hint_ms_{-1};  // from the last empty claim; -1 = unknown
  WakeListener wake_;                           // after client_: uses it
};

}  // namespace

std::unique_ptr<PartitionStore> open_partition(ClientOptions client, std::string prefix,
                                               Duration writer_lease, const StoreOptions& options,
                                               std::string token, std::string owner_tag,
                                               std::shared_ptr<std::once_flag> durability_once) {
  client.slot_key = "{" + prefix + "}";
  return std::make_unique<RedisStore>(std::move(client), std::move(prefix), writer_lease, options,
                                      std::move(token), std::move(owner_tag),
                                      std::move(durability_once));
}

}  // namespace redis_store

std::unique_ptr<Store> open_redis_store(std::string_view url, const StoreOptions& options) {
  auto c = redis_store::parse_store_url(url);
  StoreOptions o = options;
  if (c.archive) o.archive = *c.archive;
  if (c.archive_retention) o.archive_retention = *c.archive_retention;
  if (c.dead_retention) o.dead_retention = *c.dead_retention;
  if (c.partitions > 1) return redis_store::open_partitioned(std::move(c), o);
  return std::make_unique<redis_store::RedisStore>(std::move(c.client), std::move(c.prefix),
                                                   c.writer_lease, o);
}

}  // namespace outpost
