// The partitioned Redis store (URL parameter partitions=N, docs/redis.md "Partitions") against a
// real redis-server (OUTPOST_TEST_REDIS_URL): several Store objects (relays) claim at once, each
// from its own partitions, with per-key order and no loss while relays join, stop and are
// abandoned (a crash: its leases expire); the recorded partition count refuses a URL that
// disagrees and an unpartitioned URL; an outbox with unpartitioned events is not partitioned.
// Timing: every wait is bounded and generous; nothing asserts a speed.

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <stdio.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/url.h"
#include "outpost/error.h"
#include "outpost/stores/redis.h"
#include "server_process.h"
#include "store_cases.h"
#include "stores/redis/redis_partition.h"
#include "stores/redis/redis_url.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

std::string outbox_url(const std::string& extra) {
  auto url = testing::env("OUTPOST_TEST_REDIS_URL");
  if (!url) return {};
  return *url + "?prefix=" + testing::unique_name("part_") + extra;
}

#define REQUIRE_REDIS(url)                                                            \
  if ((url).empty()) {                                                                \
    if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_URL not set"; \
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";                                 \
  }

Event make(const std::string& key, int n) {
  Event e;
  e.type = "t";
  e.key = key;
  e.payload = std::to_string(n);
  return e;
}

// Every relay acks into it: per key, the payloads in the order they were acked.
struct Ledger {
  std::mutex mu;
  std::map<std::string, std::vector<int>> by_key;
  int acked = 0;
};

// One relay: its own Store object claiming, acking, on its own thread until stopped.
class Relay {
 public:
  Relay(std::unique_ptr<Store> store, Ledger& ledger) : store_(std::move(store)) {
    thread_ = std::thread([this, &ledger] {
      while (!stop_) {
        try {
          ClaimedBatch b = store_->claim(20, 3s);
          if (abandon_) return;  // a crash: a batch in hand stays leased until its lease ends
          if (b.empty()) {
            std::this_thread::sleep_for(5ms);
            continue;
          }
          std::vector<EventId> ids;
          for (const auto& e : b.events) ids.push_back(e.id);
          std::lock_guard lock(ledger.mu);
          // Recorded before the ack (a later claim of the key needs it acked first).
          for (const auto& e : b.events) ledger.by_key[e.key].push_back(std::stoi(e.payload));
          ledger.acked += static_cast<int>(store_->ack(b, ids));
          claimed_ += static_cast<int>(b.events.size());
        } catch (const std::exception& e) {
          std::lock_guard lock(ledger.mu);
          errors_ += e.what();
        }
      }
    });
  }
  ~Relay() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Stops the thread; `crash`: a batch it claims next is left unsettled, and the caller keeps
  // the Store open (its leases expire rather than being given up).
  std::unique_ptr<Store> stop(bool crash = false) {
    abandon_ = crash;
    if (!crash) stop_ = true;
    thread_.join();
    return std::move(store_);
  }
  int claimed() const { return claimed_; }
  const std::string& errors() const { return errors_; }

 private:
  std::unique_ptr<Store> store_;
  std::atomic<bool> stop_{false}, abandon_{false};
  std::atomic<int> claimed_{0};
  std::string errors_;
  std::thread thread_;
};

// Waits until every one of `total` events was acked (bounded).
bool all_acked(Ledger& ledger, int total, std::chrono::seconds within) {
  const auto deadline = SteadyClock::now() + within;
  while (SteadyClock::now() < deadline) {
    {
      std::lock_guard lock(ledger.mu);
      if (ledger.acked >= total) return true;
    }
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

void expect_in_order_once(Ledger& ledger, int keys, int per_key) {
  std::lock_guard lock(ledger.mu);
  ASSERT_EQ(ledger.by_key.size(), static_cast<std::size_t>(keys));
  for (auto& [key, seen] : ledger.by_key) {
    std::vector<int> expected;
    for (int i = 0; i < per_key; ++i) expected.push_back(i);
    // A crashed relay's batch comes again (at least once): keep each payload's last delivery.
    std::vector<int> last;
    for (int v : seen) {
      while (!last.empty() && last.back() >= v) last.pop_back();
      last.push_back(v);
    }
    EXPECT_EQ(last, expected) << "key " << key;
    for (std::size_t i = 1; i < seen.size(); ++i)
      EXPECT_TRUE(seen[i] == seen[i - 1] + 1 || seen[i] <= seen[i - 1])
          << "key " << key << " skipped ahead after " << seen[i - 1];
  }
}

TEST(RedisPartitions, ABadPartitionCountIsAConfigErrorBeforeConnecting) {
  for (const char* bad : {"0", "1025", "x"}) {
    try {  // nothing listens on port 1: only the URL check can answer
      open_redis_store(std::string("redis://127.0.0.1:1?partitions=") + bad);
      ADD_FAILURE() << "partitions=" << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("partitions"), std::string::npos) << e.what();
    }
  }
}

TEST(RedisPartitions, SeveralRelaysShareTheWorkInKeyOrderAndLoseNothing) {
  const std::string url = outbox_url("&partitions=8&writer_lease_ms=600");
  REQUIRE_REDIS(url);
  Ledger ledger;
  auto emitter = open_redis_store(url);
  constexpr int kKeys = 40, kPerKey = 25;
  for (int i = 0; i < kPerKey; ++i) {
    std::vector<Event> events;
    for (int k = 0; k < kKeys; ++k) events.push_back(make("key" + std::to_string(k), i));
    emitter->append(events);
  }
  std::vector<std::unique_ptr<Relay>> relays;
  for (int r = 0; r < 3; ++r)
    relays.push_back(std::make_unique<Relay>(open_redis_store(url), ledger));
  // Rounds keep coming until every relay has claimed some (each is assigned partitions once
  // the membership beats have seen all three; bounded, not timed).
  int rounds = kPerKey;
  const auto deadline = SteadyClock::now() + 60s;
  auto all_busy = [&] {
    return std::all_of(relays.begin(), relays.end(), [](auto& r) { return r->claimed() > 0; });
  };
  while (!all_busy() && SteadyClock::now() < deadline) {
    std::vector<Event> events;
    for (int k = 0; k < kKeys; ++k) events.push_back(make("key" + std::to_string(k), rounds));
    emitter->append(events);
    ++rounds;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(all_busy()) << "a relay never got a partition";
  ASSERT_TRUE(all_acked(ledger, kKeys * rounds, 60s));
  for (auto& r : relays) {
    r->stop();
    EXPECT_EQ(r->errors(), "");
  }
  expect_in_order_once(ledger, kKeys, rounds);
  EXPECT_EQ(emitter->stats().pending, 0);
}

TEST(RedisPartitions, RelaysJoiningStoppingAndCrashingKeepKeyOrderAndLoseNothing) {
  const std::string url = outbox_url("&partitions=6&writer_lease_ms=500");
  REQUIRE_REDIS(url);
  Ledger ledger;
  auto emitter = open_redis_store(url);
  constexpr int kKeys = 12, kRounds = 12;
  std::vector<std::unique_ptr<Relay>> relays;
  std::vector<std::unique_ptr<Store>> crashed;  // never closed: their leases must expire
  relays.push_back(std::make_unique<Relay>(open_redis_store(url), ledger));
  for (int round = 0; round < kRounds; ++round) {
    std::vector<Event> events;
    for (int k = 0; k < kKeys; ++k) events.push_back(make("k" + std::to_string(k), round));
    emitter->append(events);
    if (round % 4 == 1) relays.push_back(std::make_unique<Relay>(open_redis_store(url), ledger));
    if (round == 5) crashed.push_back(relays.front()->stop(/*crash=*/true));
    if (round == 5) relays.erase(relays.begin());
    if (round == 8 && relays.size() > 1) {
      relays.back()->stop();  // a clean stop: gives its partitions up at once
      relays.pop_back();
    }
    std::this_thread::sleep_for(100ms);
  }
  if (relays.empty()) relays.push_back(std::make_unique<Relay>(open_redis_store(url), ledger));
  ASSERT_TRUE(all_acked(ledger, kKeys * kRounds, 90s));
  for (auto& r : relays) {
    r->stop();
    EXPECT_EQ(r->errors(), "");
  }
  expect_in_order_once(ledger, kKeys, kRounds);
  EXPECT_EQ(emitter->stats().pending, 0);
  EXPECT_EQ(emitter->stats().leased, 0);
}

TEST(RedisPartitions, TheRecordedCountRefusesAnotherOneAndTheUnpartitionedLayout) {
  const std::string base = outbox_url("");
  REQUIRE_REDIS(base);
  auto four = open_redis_store(base + "&partitions=4");
  four->append(std::vector<Event>{make("a", 1)});
  try {
    open_redis_store(base + "&partitions=8")->append(std::vector<Event>{make("a", 2)});
    ADD_FAILURE() << "partitions=8 on an outbox of 4 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::config) << e.what();
    EXPECT_NE(std::string(e.what()).find("partitions=4"), std::string::npos) << e.what();
  }
  try {
    open_redis_store(base)->claim(10, 5s);
    ADD_FAILURE() << "an unpartitioned URL claimed from a partitioned outbox";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::config) << e.what();
    // A ConfigError: the CLI exits 2 on it (apps/outpost/main.cpp), 1 on a plain Error.
    EXPECT_NE(dynamic_cast<const ConfigError*>(&e), nullptr) << "not a ConfigError: " << e.what();
    EXPECT_NE(std::string(e.what()).find("partitions=4"), std::string::npos) << e.what();
  }
  EXPECT_EQ(four->stats().pending, 1);
}

TEST(RedisPartitions, AnOutboxWithUnpartitionedEventsIsNotPartitionedUntilDrained) {
  const std::string base = outbox_url("");
  REQUIRE_REDIS(base);
  auto old = open_redis_store(base);
  old->append(std::vector<Event>{make("a", 1)});
  try {
    open_redis_store(base + "&partitions=4")->append(std::vector<Event>{make("a", 2)});
    ADD_FAILURE() << "partitioned beside unpartitioned events";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::config) << e.what();
  }
  ClaimedBatch b = old->claim(10, 5s);
  ASSERT_EQ(b.events.size(), 1u);
  std::vector<EventId> ids{b.events[0].id};
  ASSERT_EQ(old->ack(b, ids), 1u);
  old.reset();
  auto now_partitioned = open_redis_store(base + "&partitions=4");
  now_partitioned->append(std::vector<Event>{make("a", 2)});
  EXPECT_EQ(now_partitioned->stats().pending, 1);
}

TEST(RedisPartitions, AStoppedRelayHandsItsPartitionsOverAtOnce) {
  // writer_lease_ms far longer than the wait below: only the stop's hand-over can explain it.
  const std::string url = outbox_url("&partitions=4&writer_lease_ms=60000");
  REQUIRE_REDIS(url);
  auto first = open_redis_store(url);
  auto second = open_redis_store(url);
  std::vector<Event> events;
  for (int k = 0; k < 16; ++k) events.push_back(make("k" + std::to_string(k), 0));
  first->append(events);
  ClaimedBatch b = first->claim(100, 5s);  // joins alone: owns every partition
  ASSERT_EQ(b.events.size(), 16u);
  std::vector<EventId> ids;
  for (const auto& e : b.events) ids.push_back(e.id);
  ASSERT_EQ(first->ack(b, ids), 16u);
  first->append(std::vector<Event>{make("k1", 1), make("k2", 1), make("k3", 1), make("k4", 1)});
  first.reset();  // stops: leaves the members and gives every partition up
  std::size_t got = 0;
  const auto deadline = SteadyClock::now() + 20s;
  while (got < 4 && SteadyClock::now() < deadline) {
    ClaimedBatch c = second->claim(100, 5s);
    std::vector<EventId> cids;
    for (const auto& e : c.events) cids.push_back(e.id);
    got += second->ack(c, cids);
    if (got < 4) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(got, 4u) << "the stopped relay's partitions were not handed over";
}

// Runs one command on the test server (OUTPOST_TEST_REDIS_URL's first host and database).
void redis_command(const std::string& url, const std::vector<std::string>& argv) {
  const core::Url u = core::Url::parse(url);
  redisContext* c = redisConnect(u.hosts().front().host.c_str(), u.hosts().front().port);
  ASSERT_TRUE(c && !c->err);
  std::vector<const char*> args;
  std::vector<std::size_t> lens;
  std::vector<std::string> all = argv;
  if (!u.path().empty() && u.path() != "0") all = {"SELECT", u.path()};
  auto run = [&](const std::vector<std::string>& cmd) {
    args.clear();
    lens.clear();
    for (const auto& a : cmd) {
      args.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lens.data()));
    if (r) freeReplyObject(r);
  };
  if (all != argv) run(all);
  run(argv);
  redisFree(c);
}

// A partition whose claim fails (here: its pending set is not a sorted set) does not cost the
// batches already claimed from the others, in a claim and in a settle_and_claim: they are
// returned (before, the error dropped them, leased until their lease ended, a crash counted).
TEST(RedisPartitions, AFailingPartitionDoesNotDropWhatTheOthersClaimed) {
  const auto base = testing::env("OUTPOST_TEST_REDIS_URL");
  if (!base) {
    if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
  }
  // A fresh outbox of 2 partitions with 20 keys' events, partition 1 broken afterwards; a new
  // store's first claim asks partition 0 first.
  auto broken_outbox = [&] {
    const std::string prefix = testing::unique_name("part_");
    auto store = open_redis_store(*base + "?prefix=" + prefix + "&partitions=2");
    std::vector<Event> events;
    for (int k = 0; k < 20; ++k) events.push_back(make("k" + std::to_string(k), 0));
    store->append(events);
    redis_command(*base, {"SET", "{" + prefix + ":p1}:v3:pending", "broken"});
    return store;
  };
  auto ids_of = [](const ClaimedBatch& b) {
    std::vector<EventId> ids;
    for (const auto& e : b.events) ids.push_back(e.id);
    return ids;
  };
  {
    auto store = broken_outbox();
    ClaimedBatch b;
    try {
      b = store->claim(100, 30s);
    } catch (const std::exception& e) {
      FAIL() << "claim: partition 1's error dropped partition 0's batch: " << e.what();
    }
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(store->ack(b, ids_of(b)), b.events.size());
  }
  {
    auto store = broken_outbox();
    ClaimedBatch first = store->claim(1, 30s);  // partition 0 only: the batch is full
    ASSERT_EQ(first.events.size(), 1u);
    const std::vector<EventId> acks = ids_of(first);
    SettleCounts counts;
    ClaimedBatch next;
    try {
      next = store->settle_and_claim(first, Settlement{acks, {}, {}}, counts, 100, 30s,
                                     ClaimOrder::ordered);
    } catch (const std::exception& e) {
      FAIL() << "settle_and_claim: partition 1's error dropped partition 0's batch: " << e.what();
    }
    EXPECT_EQ(counts.acked, 1u);
    ASSERT_FALSE(next.empty()) << "partition 0 holds more than one of the 20 keys";
    EXPECT_EQ(store->ack(next, ids_of(next)), next.events.size());
  }
}

// A renewed batch keeps its partitions: a relay joining while it is delivered gets them only
// once it is settled, so its ack is not fenced (before, the partition was given up, and its
// writer lease no longer kept after an empty claim, when the claim's first lease ended: the
// joining relay took its writer lease and the ack counted 0 there, the events coming again
// later: duplicates). The wait only has to outlast the claim's
// 1 s lease; a slow machine makes the test pass before the fix too, never fail after it.
TEST(RedisPartitions, ARenewedBatchKeepsItsPartitionsUntilSettled) {
  const std::string url = outbox_url("&partitions=2&writer_lease_ms=600");
  REQUIRE_REDIS(url);
  auto first = open_redis_store(url);
  std::vector<Event> events;
  for (int k = 0; k < 20; ++k) events.push_back(make("k" + std::to_string(k), 0));
  first->append(events);
  ClaimedBatch b = first->claim(100, 1s);  // joins alone: owns both partitions
  ASSERT_EQ(b.events.size(), 20u);
  ASSERT_TRUE(first->renew(b, 60s));
  auto second = open_redis_store(url);
  const auto until = SteadyClock::now() + 4s;
  while (SteadyClock::now() < until) {
    EXPECT_TRUE(first->claim(100, 1s).empty());  // still claiming: its beat goes on
    EXPECT_TRUE(second->claim(100, 1s).empty());
    std::this_thread::sleep_for(50ms);
  }
  std::vector<EventId> ids;
  for (const auto& e : b.events) ids.push_back(e.id);
  EXPECT_EQ(first->ack(b, ids), 20u) << "a partition was given up under a renewed batch";
}

// A partition's writer lease once given up (to the relay it is assigned to now) is not taken
// back by its old holder's lease keeping (heartbeat or renew, keep_writer_lease in prologue.lua):
// before, with the fence unchanged it was, and that relay held a lock it would neither renew
// nor release, the partition's new owner shut out until it expired.
TEST(RedisPartitions, AGivenUpWriterLeaseIsNotTakenBack) {
  const auto base = testing::env("OUTPOST_TEST_REDIS_URL");
  if (!base) {
    if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
  }
  const std::string prefix = testing::unique_name("part_");
  const auto config = redis_store::parse_store_url(*base + "?prefix=" + prefix);
  auto open = [&] {
    return redis_store::open_partition(config.client, prefix + ":p0", Duration(60000),
                                       StoreOptions{}, "", "p0.");
  };
  auto old_owner = open();
  old_owner->append(std::vector<Event>{make("a", 1)});
  ClaimedBatch b = old_owner->claim(10, 30s);
  ASSERT_EQ(b.events.size(), 1u);
  ASSERT_TRUE(old_owner->holds_writer_lease());
  old_owner->give_up_writer_lease();
  EXPECT_FALSE(old_owner->renew(b, 30s)) << "the given up writer lease was taken back";
  auto new_owner = open();
  EXPECT_TRUE(new_owner->claim(10, 30s).empty());  // the event is still leased
  EXPECT_TRUE(new_owner->holds_writer_lease()) << "the partition is held by its old owner";
}

// A combined batch's parts stay open until settled: an ack that settles none of a part's
// events (here: of none at all) does not let the beat give that partition up under the batch
// (before, each part counted as settled: a joining relay took its partition and the later ack
// of its events was fenced). The wait only has to outlast a few beats; a slow machine makes
// the test pass before the fix too, never fail after it.
TEST(RedisPartitions, APartNotSettledKeepsItsPartition) {
  const std::string url = outbox_url("&partitions=2&writer_lease_ms=600");
  REQUIRE_REDIS(url);
  auto first = open_redis_store(url);
  std::vector<Event> events;
  for (int k = 0; k < 20; ++k) events.push_back(make("k" + std::to_string(k), 0));
  first->append(events);
  ClaimedBatch b = first->claim(100, 60s);  // joins alone: owns both partitions
  ASSERT_EQ(b.events.size(), 20u);
  EXPECT_EQ(first->ack(b, std::vector<EventId>{}), 0u);
  auto second = open_redis_store(url);
  const auto until = SteadyClock::now() + 4s;
  while (SteadyClock::now() < until) {
    EXPECT_TRUE(first->claim(100, 1s).empty());  // still claiming: its beat goes on
    EXPECT_TRUE(second->claim(100, 1s).empty());
    std::this_thread::sleep_for(50ms);
  }
  std::vector<EventId> ids;
  for (const auto& e : b.events) ids.push_back(e.id);
  EXPECT_EQ(first->ack(b, ids), 20u) << "a partition was given up under an unsettled part";
}

// On a 3-master Redis Cluster (OUTPOST_TEST_REDIS_CLUSTER_URL) each partition is its own slot:
// the partitions spread over the masters, and two relays deliver everything in key order.
TEST(RedisPartitions, OnAClusterThePartitionsSpreadOverTheMasters) {
  auto base = testing::env("OUTPOST_TEST_REDIS_CLUSTER_URL");
  if (!base) {
    if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_CLUSTER_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_CLUSTER_URL not set";
  }
  const std::string prefix = testing::unique_name("cpart_");
  const std::string url = *base + "?prefix=" + prefix + "&partitions=8&writer_lease_ms=500";
  Ledger ledger;
  auto emitter = open_redis_store(url);
  constexpr int kKeys = 16, kPerKey = 10;
  for (int i = 0; i < kPerKey; ++i) {
    std::vector<Event> events;
    for (int k = 0; k < kKeys; ++k) events.push_back(make("key" + std::to_string(k), i));
    emitter->append(events);
  }
  // Which node holds each partition's sequence key (the others answer MOVED).
  std::set<int> owners;
  const core::Url parsed = core::Url::parse(*base);
  for (const auto& hp : parsed.hosts()) {
    redisContext* c = redisConnect(hp.host.c_str(), hp.port);
    ASSERT_TRUE(c && !c->err);
    for (int p = 0; p < 8; ++p) {
      const std::string key = "{" + prefix + ":p" + std::to_string(p) + "}:seq";
      auto* r = static_cast<redisReply*>(redisCommand(c, "EXISTS %s", key.c_str()));
      if (r && r->type == REDIS_REPLY_INTEGER && r->integer == 1) owners.insert(hp.port);
      if (r) freeReplyObject(r);
    }
    redisFree(c);
  }
  EXPECT_GE(owners.size(), 2u) << "every partition on one master";
  {
    Relay a(open_redis_store(url), ledger), b(open_redis_store(url), ledger);
    ASSERT_TRUE(all_acked(ledger, kKeys * kPerKey, 60s));
    a.stop();
    b.stop();
    EXPECT_EQ(a.errors() + b.errors(), "");
  }
  expect_in_order_once(ledger, kKeys, kPerKey);
  EXPECT_EQ(emitter->stats().pending, 0);
}

// The real relay (pipelined: settle_and_claim while delivering, renewals) on several relays at
// once, through `outpost bench`: its own check counts order breaks and duplicates. A partition
// given up between a batch's settle being noted and sent lost that settlement (its events came
// again after their lease: duplicates, counted as order breaks too). The writer lease is long
// enough that a stalled process on a loaded machine does not move partitions (moves come from
// relays starting and stopping), so any duplicate is a defect.
TEST(RedisPartitions, PipelinedRelaysDeliverEachEventOnceInKeyOrder) {
  const std::string url = outbox_url("&partitions=16&writer_lease_ms=3000");
  REQUIRE_REDIS(url);
  const std::string cmd = std::string(OUTPOST_BIN) + " bench --store '" + url +
                          "' --relays 8 --sink-delay-ms 20 --prefill --events 20000 --keys 1000 "
                          "--no-baseline --no-backlog-check --latency-seconds 0 --json 2>/dev/null";
  FILE* out = ::popen(cmd.c_str(), "r");
  ASSERT_NE(out, nullptr);
  std::string text;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, out)) text.append(buf, n);
  ASSERT_EQ(::pclose(out), 0) << text;
  for (const char* field : {"\"order_breaks\":0,", "\"duplicates\":0"})
    EXPECT_NE(text.find(field), std::string::npos) << field << " not in " << text;
}

// On a single master an append over several partitions is one script (lua/append_many.lua):
// every part is checked before any is written, so an id already live in one partition rejects
// the whole call and nothing is written in the others (before: each partition appended on its
// own and the others' events were written).
TEST(RedisPartitions, AnAppendOverSeveralPartitionsIsWholeOrNothing) {
  const auto url = outbox_url("&partitions=16");
  REQUIRE_REDIS(url);
  auto store = open_redis_store(url);
  Event live = make("k0", 0);
  live.id = EventId::generate();
  store->append(std::vector<Event>{live});
  std::vector<Event> events;
  std::set<std::uint32_t> partitions;
  for (int k = 1; partitions.size() < 16; ++k) {
    events.push_back(make("k" + std::to_string(k), k));
    partitions.insert(redis_store::fnv1a(events.back().key) % 16);
  }
  events.push_back(live);  // its id is live: a conflict
  try {
    store->append(events);
    ADD_FAILURE() << "an append with a live event's id was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::conflict) << e.what();
  }
  EXPECT_EQ(store->stats().pending, 1) << "the other partitions' events were written";
  events.pop_back();
  store->append(events);
  EXPECT_EQ(store->stats().pending, static_cast<std::int64_t>(events.size()) + 1);
}

// dead_retention on a partitioned outbox: a dead letter goes once past its retention even when
// its partition sees no more acks (before: only an ack pruned, and only its own partition, so a
// key that went quiet kept its dead letters for ever). The relay's beat prunes the partitions it
// holds.
TEST(RedisPartitions, ADeadLetterGoesAfterItsRetentionInAPartitionNoAckReaches) {
  const auto url = outbox_url("&partitions=16&dead_retention=300ms");
  REQUIRE_REDIS(url);
  auto store = open_redis_store(url);
  std::vector<Event> old{make("a", 0)};
  old[0].id = EventId::generate();
  std::string other = "b";  // a key of another partition: its acks never reach "a"'s
  for (int i = 0; redis_store::fnv1a(other) % 16 == redis_store::fnv1a("a") % 16; ++i)
    other = "b" + std::to_string(i);
  store->append(old);
  ClaimedBatch b = store->claim(10, 30s);
  ASSERT_EQ(b.events.size(), 1u);
  std::vector<Nack> nacks{{old[0].id, "refused", std::nullopt}};
  ASSERT_EQ(store->nack(b, nacks), 1u);
  std::this_thread::sleep_for(600ms);
  bool gone = false;
  for (auto deadline = SteadyClock::now() + 15s; !gone && SteadyClock::now() < deadline;) {
    std::vector<Event> more{make(other, 1)};
    store->append(more);
    ClaimedBatch c = store->claim(10, 30s);
    std::vector<EventId> ids;
    for (const auto& e : c.events) ids.push_back(e.id);
    if (!ids.empty()) store->ack(c, ids);
    gone = true;
    for (const auto& d : store->dead(10)) gone = gone && d.id != old[0].id;
    if (!gone) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(gone) << "a dead letter stayed past dead_retention in a partition no ack reached";
}

// archive_retention likewise: an archived event goes once past its retention though its
// partition sees no more acks (before: it stayed, as the dead letter above).
TEST(RedisPartitions, AnArchivedEventGoesAfterItsRetentionInAPartitionNoAckReaches) {
  const auto url = outbox_url("&partitions=16&archive=1&archive_retention=300ms");
  REQUIRE_REDIS(url);
  auto store = open_redis_store(url);
  std::vector<Event> first{make("a", 0)};
  first[0].id = EventId::generate();
  std::string other = "b";  // a key of another partition: its acks never reach "a"'s
  for (int i = 0; redis_store::fnv1a(other) % 16 == redis_store::fnv1a("a") % 16; ++i)
    other = "b" + std::to_string(i);
  store->append(first);
  ClaimedBatch b = store->claim(10, 30s);
  ASSERT_EQ(b.events.size(), 1u);
  ASSERT_EQ(store->ack(b, std::vector<EventId>{first[0].id}), 1u);
  std::this_thread::sleep_for(600ms);
  bool gone = false;
  for (auto deadline = SteadyClock::now() + 15s; !gone && SteadyClock::now() < deadline;) {
    std::vector<Event> more{make(other, 1)};
    store->append(more);
    ClaimedBatch c = store->claim(10, 30s);
    std::vector<EventId> ids;
    for (const auto& e : c.events) ids.push_back(e.id);
    if (!ids.empty()) store->ack(c, ids);
    gone = true;
    for (const auto& a : store->archived(100)) gone = gone && a.id != first[0].id;
    if (!gone) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(gone) << "an archived event stayed past archive_retention in a partition no ack "
                       "reached";
}

// The EVALSHA calls a private server (tests/support/server_process.h) has run so far.
std::int64_t evalsha_calls(std::uint16_t port) {
  redisContext* c = redisConnect("127.0.0.1", port);
  if (!c || c->err) return -1;
  auto* r = static_cast<redisReply*>(redisCommand(c, "INFO commandstats"));
  std::int64_t calls = -1;
  if (r && r->type == REDIS_REPLY_STRING) {  // RESP2: INFO is a bulk string
    const std::string info(r->str, r->len);
    const auto at = info.find("cmdstat_evalsha:calls=");
    calls = at == std::string::npos ? 0 : std::stoll(info.substr(at + 22));
  }
  if (r) freeReplyObject(r);
  redisFree(c);
  return calls;
}

// On a single master one script serves every partition a relay owns: an append of events of 16
// partitions, a claim that takes events from them, and the settle_and_claim that acks that
// batch, are one EVALSHA each
// (before: one per partition asked, so a relay owning many partitions paid a round trip for
// each). A private server, so no other test's calls are counted; the relay's own beats
// (members every 200 ms, writer leases every 20 min here) may add a call or two.
TEST(RedisPartitions, OneClaimAndOneSettleServeEveryOwnedPartitionInOneCall) {
  const std::uint16_t port = testing::free_port();
  const std::string dir = testing::temp_dir() + "/" + testing::unique_name("redis_calls_");
  std::filesystem::create_directories(dir);
  testing::ServerProcess server({"redis-server", "--port", std::to_string(port), "--bind",
                                 "127.0.0.1", "--dir", dir, "--save", ""},
                                dir + "/log");
  ASSERT_TRUE(testing::wait_for_port(port, 10s));
  const std::string url = "redis://127.0.0.1:" + std::to_string(port) +
                          "/0?prefix=calls&partitions=16&writer_lease_ms=3600000";
  std::unique_ptr<Store> store;
  for (auto deadline = SteadyClock::now() + 10s; !store && SteadyClock::now() < deadline;) {
    try {  // LOADING until the server is ready
      store = open_redis_store(url);
      store->stats();
    } catch (const std::exception&) {
      store.reset();
      std::this_thread::sleep_for(50ms);
    }
  }
  ASSERT_TRUE(store);
  std::vector<Event> events;
  std::set<std::uint32_t> partitions;
  for (int k = 0; partitions.size() < 16; ++k) {
    events.push_back(make("k" + std::to_string(k), 0));
    partitions.insert(redis_store::fnv1a(events.back().key) % 16);
  }
  const std::int64_t before_append = evalsha_calls(port);
  store->append(events);
  EXPECT_LE(evalsha_calls(port) - before_append, 3)
      << "an append over 16 partitions took one call per partition";
  ClaimedBatch warm = store->claim(1, 60s);  // joins, loads the scripts
  ASSERT_EQ(warm.events.size(), 1u);
  std::vector<EventId> warm_ids{warm.events[0].id};
  ASSERT_EQ(store->ack(warm, warm_ids), 1u);
  const std::int64_t before = evalsha_calls(port);
  ClaimedBatch b = store->claim(1000, 60s);
  const std::int64_t after_claim = evalsha_calls(port);
  ASSERT_EQ(b.events.size() + 1, events.size());
  std::set<std::uint32_t> from;
  std::vector<EventId> ids;
  for (const auto& e : b.events) {
    from.insert(redis_store::fnv1a(e.key) % 16);
    ids.push_back(e.id);
  }
  EXPECT_GE(from.size(), 15u);
  SettleCounts counts;
  ClaimedBatch next =
      store->settle_and_claim(b, Settlement{ids, {}, {}}, counts, 1000, 60s, ClaimOrder::ordered);
  const std::int64_t after_settle = evalsha_calls(port);
  EXPECT_EQ(counts.acked, ids.size());
  EXPECT_TRUE(next.empty());
  EXPECT_LE(after_claim - before, 3) << "a claim over 16 partitions took one call per partition";
  EXPECT_LE(after_settle - after_claim, 3)
      << "a settle over 16 partitions took one call per partition";
  EXPECT_EQ(store->stats().pending, 0);
}

}  // namespace
}  // namespace outpost
