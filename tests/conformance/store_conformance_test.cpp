// The store conformance suite: every test runs against every registered store case
// (tests/support/store_cases.h; one <backend>_case.cpp per backend). It pins down the life
// cycle of store.h: append (in the caller's transaction), claim (ordered / unordered), ack,
// nack (retry or dead), release, renew, stats, list, dead letters, retry, discard, wait_for_work.
//
// Timing: leases are tens of milliseconds and every wait is bounded; where a test waits for
// something to become true it polls with a deadline rather than sleeping a fixed time, so a slow
// machine makes it slower, not flaky.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "outpost/error.h"
#include "outpost/store.h"
#include "store_case_test.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using testing::StoreCase;
using testing::StoreFixture;
using SteadyClock = std::chrono::steady_clock;

Event make_event(std::string type, std::string key = {}, std::string payload = "{}") {
  return Event::make(std::move(type), std::move(payload), std::move(key));
}

std::vector<EventId> ids_of(const std::vector<StoredEvent>& events) {
  std::vector<EventId> ids;
  for (const auto& e : events) ids.push_back(e.id);
  return ids;
}

std::vector<EventId> ids_of(const std::vector<Event>& events) {
  std::vector<EventId> ids;
  for (const auto& e : events) ids.push_back(e.id);
  return ids;
}

class StoreConformance : public testing::StoreCaseTest {
 protected:
  Store& store() { return *fixture().store; }
  StoreFixture& fixture() {
    if (fixtures().empty()) make();
    return fixtures().front();
  }

  // Claims until a non-empty batch arrives or `timeout` passes.
  ClaimedBatch claim_within(Store& s, std::size_t max, Duration lease, Duration timeout,
                            ClaimOrder order = ClaimOrder::ordered) {
    auto deadline = SteadyClock::now() + timeout;
    while (true) {
      ClaimedBatch b = s.claim(max, lease, order);
      if (!b.empty() || SteadyClock::now() >= deadline) return b;
      std::this_thread::sleep_for(5ms);
    }
  }
};

// --- append ------------------------------------------------------------------------------------

TEST_P(StoreConformance, RollbackEmitsNothingAndCommitIsClaimable) {
  auto& f = fixture();
  if (!f.append_in_tx) GTEST_SKIP() << "store takes no transaction handle";
  std::vector<Event> rolled_back{make_event("t.rolled_back", "k"), make_event("t.rolled_back")};
  f.append_in_tx(rolled_back, /*commit=*/false);
  EXPECT_TRUE(f.store->claim(10, 5s).empty());
  EXPECT_EQ(f.store->stats().pending, 0);

  std::vector<Event> committed{make_event("t.committed", "k"), make_event("t.committed")};
  f.append_in_tx(committed, /*commit=*/true);
  auto batch = f.store->claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 2u);
  EXPECT_EQ(ids_of(batch.events), ids_of(committed));
}

TEST_P(StoreConformance, FieldsRoundTrip) {
  Event e;
  e.id = EventId::generate();
  e.type = "order.placed";
  e.key = "order-42";
  e.payload = std::string("{\"a\":1}\0binary\xff", 15);
  e.occurred_at = TimePoint(std::chrono::microseconds(1'700'000'000'123'456));
  e.headers = {{"correlation_id", "c-1"}, {"traceparent", "00-abc-def-01"}, {"x-user", "ü"}};
  Event plain = make_event("other");
  store().append(std::vector<Event>{e, plain});

  auto batch = store().claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 2u);
  const StoredEvent& got = batch.events[0];
  EXPECT_EQ(got.id, e.id);
  EXPECT_EQ(got.type, e.type);
  EXPECT_EQ(got.key, e.key);
  EXPECT_EQ(got.payload, e.payload);
  EXPECT_EQ(got.occurred_at, e.occurred_at);
  EXPECT_EQ(got.headers, e.headers);
  EXPECT_EQ(got.attempts, 1);
  EXPECT_TRUE(batch.events[1].headers.empty());
  EXPECT_LT(batch.events[0].seq, batch.events[1].seq);
}

TEST_P(StoreConformance, NilIdGetsUuidV7AndZeroTimeBecomesNow) {
  Event e;
  e.type = "t";
  e.payload = "1";
  TimePoint before = now();
  store().append(std::vector<Event>{e});
  auto events = store().list(10);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].id.is_nil());
  EXPECT_EQ(events[0].id.bytes()[6] >> 4, 7) << events[0].id.str();
  EXPECT_GE(events[0].occurred_at + 1s, before);
  EXPECT_LE(events[0].occurred_at, now() + 1s);
}

TEST_P(StoreConformance, InvalidEventsRejectedBeforeWriting) {
  StoreOptions options;
  options.max_payload_bytes = 16;
  auto& f = make(options);
  std::vector<Event> oversize{make_event("ok", "", "small"),
                              make_event("big", "", std::string(17, 'x'))};
  try {
    f.store->append(oversize);
    FAIL() << "oversize payload accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::too_large) << e.what();
  }
  std::vector<Event> empty_type{make_event("ok"), make_event("")};
  EXPECT_THROW(f.store->append(empty_type), ConfigError);
  EXPECT_EQ(f.store->stats().pending, 0);
  EXPECT_TRUE(f.store->list(10).empty());
  f.store->append(std::vector<Event>{make_event("ok", "", std::string(16, 'x'))});
  EXPECT_EQ(f.store->stats().pending, 1);
}

// One validation layer (core/append_check.h) on every store (issue 10 defect 7): the same
// inputs are refused the same way, as a ConfigError naming the field (never a backend error), and
// nothing of the call is written; the largest accepted values round-trip.
TEST_P(StoreConformance, SameInputRulesOnEveryStore) {
  auto& f = make();
  auto with = [](const std::function<void(Event&)>& edit) {
    Event e = make_event("t", "k");
    edit(e);
    return e;
  };
  const std::vector<std::pair<std::string, Event>> refused{
      {"type", with([](Event& e) { e.type = std::string("a\0b", 3); })},
      {"type", with([](Event& e) { e.type = "bad\xC3"; })},
      {"type", with([](Event& e) { e.type = std::string(limits::kMaxTypeBytes + 1, 't'); })},
      {"key", with([](Event& e) { e.key = std::string("k\0", 2); })},
      {"key", with([](Event& e) { e.key = "\xFF\xFE"; })},
      {"key", with([](Event& e) { e.key = std::string(2 << 20, 'k'); })},
      {"header 'h'", with([](Event& e) { e.headers["h"] = std::string("v\0", 2); })},
      {"header 'h'", with([](Event& e) { e.headers["h"] = "\xED\xA0\x80"; })},  // surrogate
      {"header 'h'",
       with([](Event& e) { e.headers["h"] = std::string(limits::kMaxHeaderValueBytes + 1, 'v'); })},
      {"header name", with([](Event& e) { e.headers[std::string("n\0", 2)] = "v"; })},
      {"header name", with([](Event& e) { e.headers[""] = "v"; })},
      {"headers", with([](Event& e) {
         for (std::size_t i = 0; i <= limits::kMaxHeaders; ++i) e.headers["h" + std::to_string(i)];
       })},
  };
  for (const auto& [field, bad] : refused) {
    std::vector<Event> call{make_event("ok", "k"), bad};
    try {
      f.store->append(call);
      ADD_FAILURE() << field << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("event 1: " + field), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << field << ": not a ConfigError: " << e.what();
    }
  }
  EXPECT_EQ(f.store->stats().pending, 0) << "nothing of a refused call is written";

  Event largest = make_event(std::string(limits::kMaxTypeBytes, 't'),
                             std::string(limits::kMaxKeyBytes - 8, 'k') + "ключ");  // 8 bytes
  for (std::size_t i = 0; i + 1 < limits::kMaxHeaders; ++i)
    largest.headers["h" + std::to_string(i)] = "é";
  largest.headers["big"] = std::string(limits::kMaxHeaderValueBytes, 'v');
  largest.payload = std::string("\x00\xFF", 2);  // the payload is bytes: anything goes
  std::vector<Event> ok{largest};
  ASSERT_NO_THROW(f.store->append(ok));
  auto listed = f.store->list(10);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].type, largest.type);
  EXPECT_EQ(listed[0].key, largest.key);
  EXPECT_EQ(listed[0].headers, largest.headers);
  EXPECT_EQ(listed[0].payload, largest.payload);
}

// An id is the event's identity while the outbox holds it: emitting an id that an undelivered
// (pending, leased or dead) event has, or twice in one call, is a conflict and writes nothing of
// the call. Once delivered, the id may be emitted again (a re-emitted event keeps its id so
// consumers recognise it; docs/cli.md, "emit"). Every store checks the ids a caller brings (parsed,
// or made elsewhere); SQLite does not check ids this process generated (unique by construction).

// An event whose id this process's generator did not make: a UUIDv7 layout from our own bits.
Event with_brought_id(std::string type, std::string key = {}) {
  static std::mt19937_64 rng(std::random_device{}());
  std::array<std::uint8_t, 16> b;
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  b[6] = static_cast<std::uint8_t>(0x70 | (b[6] & 0x0F));
  b[8] = static_cast<std::uint8_t>(0x80 | (b[8] & 0x3F));
  Event e = make_event(std::move(type), std::move(key));
  e.id = EventId::from_bytes(b.data());
  return e;
}

void expect_duplicate_id_rule(Store& store, const std::function<Event(std::string)>& make) {
  auto expect_conflict = [&](std::vector<Event> events, const char* what) {
    try {
      store.append(events);
      ADD_FAILURE() << what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::conflict) << what << ": " << e.what();
    }
  };
  Event first = make("k");
  Event dead = make("d");
  store.append(std::vector<Event>{first, dead});

  Event twice = make("k");
  expect_conflict({make("k"), twice, twice}, "the same id twice in one call");
  expect_conflict({make("k"), first}, "the id of a pending event");
  EXPECT_EQ(store.stats().pending, 2) << "a rejected call wrote events";

  auto batch = store.claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 2u);
  expect_conflict({first}, "the id of a leased event");
  std::vector<Nack> nacks{{dead.id, "boom", std::nullopt}};
  ASSERT_EQ(store.nack(batch, nacks), 1u);
  expect_conflict({dead}, "the id of a dead event");
  ASSERT_EQ(store.ack(batch, std::vector<EventId>{first.id}), 1u);

  auto s = store.stats();
  EXPECT_EQ(s.pending, 0);
  EXPECT_EQ(s.leased, 0);
  EXPECT_EQ(s.dead, 1);
  EXPECT_EQ(store.retry(std::vector<EventId>{dead.id}), 1u) << "the dead event came back";
  expect_conflict({dead}, "the id of a retried dead event");

  // Delivered: its id may come again, and is an event of its own.
  store.append(std::vector<Event>{first});
  std::set<EventId> got;
  auto deadline = SteadyClock::now() + 2s;
  while (got.size() < 2 && SteadyClock::now() < deadline) {
    for (const auto& e : store.claim(10, 5s).events) got.insert(e.id);
    if (got.size() < 2) std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(got, (std::set<EventId>{first.id, dead.id}));
}

TEST_P(StoreConformance, DuplicateBroughtIdsAreAConflictAndWriteNothing) {
  expect_duplicate_id_rule(store(), [](std::string key) { return with_brought_id("t", key); });
}

TEST_P(StoreConformance, DuplicateGeneratedIdsAreAConflictAndWriteNothing) {
  if (!fixture().checks_generated_ids) {
    // Such a store keeps an event appended twice with the id this process generated for it.
    Event first = make_event("t", "k");
    store().append(std::vector<Event>{first});
    store().append(std::vector<Event>{first});
    auto batch = store().claim(10, 5s, ClaimOrder::unordered);
    ASSERT_EQ(batch.events.size(), 2u) << "a re-emitted id is kept as an event of its own";
    EXPECT_EQ(batch.events[0].id, first.id);
    EXPECT_EQ(batch.events[1].id, first.id);
    EXPECT_EQ(store().ack(batch, ids_of(batch.events)), 2u);
    EXPECT_EQ(store().stats().pending, 0);
    return;
  }
  expect_duplicate_id_rule(store(), [](std::string key) { return make_event("t", key); });
}

TEST_P(StoreConformance, DuplicateIdInTheCallersTransactionIsAConflict) {
  auto& f = fixture();
  if (!f.append_in_tx) GTEST_SKIP() << "store takes no transaction handle";
  Event first = with_brought_id("t", "k");
  f.store->append(std::vector<Event>{first});
  try {
    std::vector<Event> events{make_event("t", "k"), first};
    f.append_in_tx(events, /*commit=*/true);
    ADD_FAILURE() << "a duplicate id was accepted in the caller's transaction";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::conflict) << e.what();
  }
  auto events = f.store->list(10);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].id, first.id);
}

// --- claim -------------------------------------------------------------------------------------

TEST_P(StoreConformance, ClaimRespectsMaxAndCountsAttempts) {
  std::vector<Event> events;
  for (int i = 0; i < 5; ++i) events.push_back(make_event("t", ""));
  store().append(events);
  auto first = store().claim(3, 5s);
  ASSERT_EQ(first.events.size(), 3u);
  for (const auto& e : first.events) EXPECT_EQ(e.attempts, 1);
  EXPECT_TRUE(std::is_sorted(first.events.begin(), first.events.end(),
                             [](auto& a, auto& b) { return a.seq < b.seq; }));
  auto second = store().claim(10, 5s);
  ASSERT_EQ(second.events.size(), 2u);
  EXPECT_NE(first.lease.owner, second.lease.owner);
  EXPECT_TRUE(store().claim(10, 5s).empty());
  std::vector<EventId> all = ids_of(first.events);
  for (auto& id : ids_of(second.events)) all.push_back(id);
  EXPECT_EQ(all, ids_of(events));
}

TEST_P(StoreConformance, OrderedKeyInFlightBlocksLaterEventsOfThatKey) {
  std::vector<Event> events{make_event("t", "k"), make_event("t", "k"), make_event("t", "j")};
  store().append(events);
  auto first = store().claim(1, 5s);
  ASSERT_EQ(first.events.size(), 1u);
  EXPECT_EQ(first.events[0].id, events[0].id);
  auto second = store().claim(10, 5s);
  ASSERT_EQ(second.events.size(), 1u);
  EXPECT_EQ(second.events[0].id, events[2].id);  // k's second event waits for the first
  EXPECT_EQ(store().ack(first, ids_of(first.events)), 1u);
  auto third = store().claim(10, 5s);
  ASSERT_EQ(third.events.size(), 1u);
  EXPECT_EQ(third.events[0].id, events[1].id);
}

TEST_P(StoreConformance, OrderedBatchCarriesARunOfOneKeyInOrder) {
  std::vector<Event> events{make_event("t", "k"), make_event("t", "j"), make_event("t", "k"),
                            make_event("t", "k")};
  store().append(events);
  auto batch = store().claim(10, 5s);
  EXPECT_EQ(ids_of(batch.events), ids_of(events));
}

TEST_P(StoreConformance, OrderedEventWaitingForRetryBlocksItsKey) {
  std::vector<Event> events{make_event("t", "k"), make_event("t", "k"), make_event("t", "")};
  store().append(events);
  auto first = store().claim(1, 5s);
  ASSERT_EQ(first.events.size(), 1u);
  std::vector<Nack> nacks{{events[0].id, "boom", Duration(60s)}};
  EXPECT_EQ(store().nack(first, nacks), 1u);
  auto second = store().claim(10, 5s);
  ASSERT_EQ(second.events.size(), 1u);
  EXPECT_EQ(second.events[0].id, events[2].id);
  EXPECT_TRUE(store().claim(10, 5s).empty());
}

TEST_P(StoreConformance, EmptyKeysAreNotBlocked) {
  std::vector<Event> events{make_event("t", ""), make_event("t", "")};
  store().append(events);
  auto first = store().claim(1, 5s);
  ASSERT_EQ(first.events.size(), 1u);
  auto second = store().claim(1, 5s);
  ASSERT_EQ(second.events.size(), 1u);
  EXPECT_EQ(second.events[0].id, events[1].id);
}

TEST_P(StoreConformance, DeadEventDoesNotBlockItsKey) {
  std::vector<Event> events{make_event("t", "k"), make_event("t", "k")};
  store().append(events);
  auto first = store().claim(1, 5s);
  ASSERT_EQ(first.events.size(), 1u);
  std::vector<Nack> nacks{{events[0].id, "fatal", std::nullopt}};
  EXPECT_EQ(store().nack(first, nacks), 1u);
  auto second = store().claim(10, 5s);
  ASSERT_EQ(second.events.size(), 1u);
  EXPECT_EQ(second.events[0].id, events[1].id);
}

TEST_P(StoreConformance, UnorderedClaimIgnoresKeys) {
  std::vector<Event> events{make_event("t", "k"), make_event("t", "k")};
  store().append(events);
  auto first = store().claim(1, 5s, ClaimOrder::unordered);
  ASSERT_EQ(first.events.size(), 1u);
  std::vector<Nack> nacks{{events[0].id, "later", Duration(60s)}};
  store().nack(first, nacks);
  auto second = store().claim(10, 5s, ClaimOrder::unordered);
  ASSERT_EQ(second.events.size(), 1u);
  EXPECT_EQ(second.events[0].id, events[1].id);
}

TEST_P(StoreConformance, ConcurrentClaimersNeverShareAnEvent) {
  constexpr int kEvents = 400;
  std::vector<Event> events;
  for (int i = 0; i < kEvents; ++i) events.push_back(make_event("t", "k" + std::to_string(i % 7)));
  store().append(events);
  std::mutex mu;
  std::multiset<std::string> seen;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      auto deadline = SteadyClock::now() + 10s;
      while (SteadyClock::now() < deadline) {
        auto batch = store().claim(16, 10s);
        if (batch.empty()) {
          if (store().stats().pending == 0) return;
          std::this_thread::sleep_for(1ms);
          continue;
        }
        {
          std::lock_guard lock(mu);
          for (auto& e : batch.events) seen.insert(e.id.str());
        }
        EXPECT_EQ(store().ack(batch, ids_of(batch.events)), batch.events.size());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kEvents));
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), seen.size());
  auto s = store().stats();
  EXPECT_EQ(s.pending + s.leased, 0);
}

// --- held-back layouts: a held-back run of a key never holds back another key -----------------
//
// Random layouts (fixed seed) of held-back and free rows: a key's head either failed with its
// retry an hour away or is leased for an hour by a relay that died (a store object never used
// again), several keys interleaved, the other events emitted one per transaction, several in
// one, or in the caller's transaction. Then every row whose key has no held-back head before
// it must be claimable at once: by one big claim, and by a run of small claims none of which
// comes back empty while such a row is left.

struct LayoutRow {
  EventId id;
  std::string key;
  bool free;  // claimable now: its key has no held-back row before it
};

std::vector<LayoutRow> build_held_back_layout(std::mt19937& rng, StoreFixture& f, Store& dead_relay,
                                              const std::string& key_prefix, std::string* trace) {
  const int key_count = 1 + static_cast<int>(rng() % 5);
  std::vector<std::string> keys;
  for (int k = 0; k < key_count; ++k) keys.push_back(key_prefix + "k" + std::to_string(k));
  std::set<std::string> held, used;  // keys with a held-back head; keys with any row
  std::vector<LayoutRow> rows;
  auto emitted = [&](const Event& e) {
    const bool is_free = e.key.empty() || !held.contains(e.key);
    rows.push_back({e.id, e.key, is_free});
    used.insert(e.key);
    *trace += (e.key.empty() ? std::string("-") : e.key) + (is_free ? " " : "(blocked) ");
  };
  const int steps = 3 + static_cast<int>(rng() % 8);
  for (int step = 0; step < steps; ++step) {
    // Only a key without rows can get a held-back head, so a held row is always its key's head.
    std::vector<std::string> fresh;
    for (const auto& k : keys)
      if (!used.contains(k)) fresh.push_back(k);
    if (!fresh.empty() && rng() % 3 == 0) {
      Event head = make_event("t", fresh[rng() % fresh.size()]);
      f.store->append(std::vector<Event>{head});
      const bool failed = rng() % 2 == 0;
      Store& holder = failed ? *f.store : dead_relay;
      ClaimedBatch batch = holder.claim(1000, 3600s);
      std::vector<EventId> others;
      bool found = false;
      for (const auto& e : batch.events) {
        if (e.id == head.id)
          found = true;
        else
          others.push_back(e.id);
      }
      if (!found) throw std::runtime_error("layout: a fresh key's head was not claimable");
      if (!others.empty() && holder.release(batch, others) != others.size())
        throw std::runtime_error("layout: release lost events");
      if (failed) {
        std::vector<Nack> nacks{{head.id, "failed", Duration(3600s)}};
        if (holder.nack(batch, nacks) != 1) throw std::runtime_error("layout: nack lost");
      }
      // PostgreSQL commits settlements with the holder's next call (a read commits at once):
      // a relay that dies right after a release leaves those rows leased by it instead.
      holder.stats();
      rows.push_back({head.id, head.key, false});
      used.insert(head.key);
      held.insert(head.key);
      *trace += head.key + (failed ? "(failed) " : "(leased by a dead relay) ");
      continue;
    }
    const int n = 1 + static_cast<int>(rng() % 4);
    std::vector<Event> events;
    for (int i = 0; i < n; ++i) {
      std::size_t pick = rng() % (keys.size() + 1);
      events.push_back(make_event("t", pick == keys.size() ? "" : keys[pick]));
    }
    const unsigned how = rng() % 3;
    *trace += how == 0 ? "| " : how == 1 ? "[ " : "tx[ ";
    if (how == 0) {
      for (const auto& e : events) {
        f.store->append(std::vector<Event>{e});
        emitted(e);
      }
    } else {
      if (how == 2 && f.append_in_tx)
        f.append_in_tx(events, /*commit=*/true);
      else
        f.store->append(events);
      for (const auto& e : events) emitted(e);
      *trace += "] ";
    }
  }
  return rows;
}

// Checks that the claimed ids are exactly the free rows, each key's in emit order.
void expect_exactly_the_free_rows(const std::vector<LayoutRow>& rows,
                                  const std::vector<StoredEvent>& claimed,
                                  const std::string& what) {
  std::map<std::string, std::vector<EventId>> want, got;
  for (const auto& r : rows)
    if (r.free) want[r.key].push_back(r.id);
  for (const auto& e : claimed) got[e.key].push_back(e.id);
  if (want.contains("")) {  // no order among empty keys
    std::sort(want[""].begin(), want[""].end());
    if (got.contains("")) std::sort(got[""].begin(), got[""].end());
  }
  EXPECT_EQ(got, want) << what;
}

// Builds one layout into f and checks what the claims see.
void check_held_back_layout(std::mt19937& rng, StoreFixture& f, Store& dead_relay,
                            std::string& trace, int round) {
  // Keys of earlier rounds are held back or blocked by now: they must stay out of the way.
  auto rows = build_held_back_layout(rng, f, dead_relay, "r" + std::to_string(round), &trace);
  const std::string what = "round " + std::to_string(round) + ": " + trace;
  std::size_t free_rows = 0;
  for (const auto& r : rows) free_rows += r.free;

  // One claim takes every free row.
  ClaimedBatch all = f.store->claim(1000, 30s);
  expect_exactly_the_free_rows(rows, all.events, what + "(one claim)");
  ASSERT_EQ(f.store->release(all, ids_of(all.events)), all.events.size()) << what;

  // Small claims, each acked before the next (a relay delivering): none comes back empty
  // while a free row is left.
  std::vector<StoredEvent> claimed;
  while (claimed.size() < free_rows) {
    const std::size_t max = 1 + rng() % 3;
    ClaimedBatch b = f.store->claim(max, 30s);
    ASSERT_FALSE(b.empty()) << what << "(small claims: empty with " << free_rows - claimed.size()
                            << " free rows left)";
    claimed.insert(claimed.end(), b.events.begin(), b.events.end());
    ASSERT_EQ(f.store->ack(b, ids_of(b.events)), b.events.size()) << what;
  }
  expect_exactly_the_free_rows(rows, claimed, what + "(small claims)");
  EXPECT_TRUE(f.store->claim(10, 30s).empty()) << what;
}

TEST_P(StoreConformance, HeldBackKeysNeverHoldBackOtherKeys) {
  std::mt19937 rng(20261124);
  StoreFixture& f = fixture();
  // A relay that died holding a lease: another Store object that is never used again. On a
  // single-writer store that object would also hold the writer lease, which stops every
  // claim until it expires (a failover bound, not a held-back key): its leases are taken by
  // the live object's own claims there, which are other lease owners all the same. On a
  // partitioned store it would own a share of the partitions, and the live object could not
  // claim the keys there at all (an ownership rule, tested in store_membership_test.cpp).
  std::shared_ptr<Store> dead_relay =
      f.open_again && !f.single_writer && !f.partitioned ? f.open_again() : f.store;
  for (int round = 0; round < 24; ++round) {
    std::string trace;
    try {
      check_held_back_layout(rng, f, *dead_relay, trace, round);
    } catch (const std::exception& e) {
      FAIL() << "round " << round << ": " << trace << ": " << e.what();
    }
    if (HasFatalFailure()) return;
  }
}

// --- nack, dead letters, retry, discard --------------------------------------------------------

TEST_P(StoreConformance, NackWithRetryIsNotClaimableBeforeItIsDue) {
  std::vector<Event> events{make_event("t", "k")};
  store().append(events);
  auto first = store().claim(10, 5s);
  ASSERT_EQ(first.events.size(), 1u);
  auto nacked_at = SteadyClock::now();
  std::vector<Nack> nacks{{events[0].id, "try again", Duration(1s)}};
  EXPECT_EQ(store().nack(first, nacks), 1u);
  EXPECT_TRUE(store().claim(10, 5s).empty());
  auto again = claim_within(store(), 10, 5s, 5s);
  auto waited = SteadyClock::now() - nacked_at;
  ASSERT_EQ(again.events.size(), 1u);
  EXPECT_GE(waited, 950ms);  // a ms clock may round; 1 s less a little
  EXPECT_EQ(again.events[0].id, events[0].id);
  EXPECT_EQ(again.events[0].attempts, 2);
}

TEST_P(StoreConformance, NackWithoutRetryIsDeadWithItsError) {
  Event e = make_event("t.dead", "k", "{\"n\":1}");
  e.headers = {{"correlation_id", "c"}};
  store().append(std::vector<Event>{e});
  auto batch = store().claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 1u);
  std::vector<Nack> nacks{{e.id, "handler threw: no such customer", std::nullopt}};
  EXPECT_EQ(store().nack(batch, nacks), 1u);
  auto dead = store().dead(10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].id, e.id);
  EXPECT_EQ(dead[0].type, e.type);
  EXPECT_EQ(dead[0].key, e.key);
  EXPECT_EQ(dead[0].payload, e.payload);
  EXPECT_EQ(dead[0].headers, e.headers);
  EXPECT_EQ(dead[0].attempts, 1);
  EXPECT_EQ(dead[0].last_error, "handler threw: no such customer");
  EXPECT_LE(dead[0].dead_at, now() + 1s);
  auto s = store().stats();
  EXPECT_EQ(s.dead, 1);
  EXPECT_EQ(s.pending, 0);
  EXPECT_EQ(s.leased, 0);
  EXPECT_TRUE(store().claim(10, 5s).empty());
}

TEST_P(StoreConformance, RetryBringsDeadEventsBackWithAttemptsZero) {
  std::vector<Event> events{make_event("t", "k"), make_event("t", "j"), make_event("t", "")};
  store().append(events);
  auto batch = store().claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 3u);
  std::vector<Nack> nacks;
  for (auto& e : events) nacks.push_back({e.id, "x", std::nullopt});
  EXPECT_EQ(store().nack(batch, nacks), 3u);
  ASSERT_EQ(store().dead(10).size(), 3u);

  std::vector<EventId> one{events[0].id, EventId::generate()};
  EXPECT_EQ(store().retry(one), 1u);
  auto listed = store().list(10);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id, events[0].id);
  EXPECT_EQ(listed[0].attempts, 0);
  EXPECT_EQ(store().dead(10).size(), 2u);

  EXPECT_EQ(store().retry_all(), 2u);
  EXPECT_TRUE(store().dead(10).empty());
  auto again = store().claim(10, 5s);
  ASSERT_EQ(again.events.size(), 3u);
  EXPECT_EQ(ids_of(again.events), ids_of(events));
  for (auto& e : again.events) EXPECT_EQ(e.attempts, 1);
  EXPECT_EQ(store().stats().dead, 0);
}

TEST_P(StoreConformance, DiscardDeletesDeadEvents) {
  std::vector<Event> events{make_event("t"), make_event("t"), make_event("t")};
  store().append(events);
  auto batch = store().claim(10, 5s);
  std::vector<Nack> nacks;
  for (auto& e : events) nacks.push_back({e.id, "x", std::nullopt});
  store().nack(batch, nacks);
  std::vector<EventId> one{events[1].id, EventId::generate()};
  EXPECT_EQ(store().discard(one), 1u);
  auto dead = store().dead(10);
  ASSERT_EQ(dead.size(), 2u);
  EXPECT_EQ(dead[0].id, events[0].id);
  EXPECT_EQ(dead[1].id, events[2].id);
  EXPECT_EQ(store().discard_all(), 2u);
  EXPECT_TRUE(store().dead(10).empty());
  EXPECT_EQ(store().stats().dead, 0);
  EXPECT_TRUE(store().claim(10, 5s).empty());
  EXPECT_EQ(store().retry(ids_of(events)), 0u);
}

// --- leases --------------------------------------------------------------------------------------

TEST_P(StoreConformance, ExpiredLeaseIsReclaimedAndLiveOneIsNot) {
  // A live lease (10 s) and a short one (60 ms) on different keys; only the short one comes
  // back. (No check races the 60 ms: a stalled test machine cannot make this fail.)
  std::vector<Event> events{make_event("t", "live"), make_event("t", "short")};
  store().append(events);
  auto live = store().claim(1, 10s);
  ASSERT_EQ(live.events.size(), 1u);
  EXPECT_EQ(live.events[0].id, events[0].id);
  auto short_lease = store().claim(1, 60ms);
  ASSERT_EQ(short_lease.events.size(), 1u);
  EXPECT_EQ(short_lease.events[0].id, events[1].id);
  auto again = claim_within(store(), 10, 10s, 3s);
  ASSERT_EQ(again.events.size(), 1u);
  EXPECT_EQ(again.events[0].id, events[1].id);
  EXPECT_EQ(again.events[0].attempts, 1);  // the expired claim's attempt, now in flight again
  EXPECT_EQ(again.events[0].crashes, 1);
  EXPECT_TRUE(store().claim(10, 10s).empty());
  EXPECT_EQ(store().stats().leased, 2);
}

TEST_P(StoreConformance, ExpiredLeaseIsReclaimedInKeyOrder) {
  std::vector<Event> events{make_event("t", "k"), make_event("t", "k")};
  store().append(events);
  auto first = store().claim(10, 60ms);
  ASSERT_EQ(first.events.size(), 2u);
  auto second = claim_within(store(), 10, 10s, 3s);
  ASSERT_EQ(second.events.size(), 2u);
  EXPECT_EQ(ids_of(second.events), ids_of(events));
  EXPECT_EQ(second.events[0].attempts, 1);
  EXPECT_EQ(second.events[0].crashes, 1);
}

// A lease that expires with no outcome recorded (the relay died or hung, or could not write the
// outcome to the store) is a crash, not a delivery attempt (store.h): the next claim takes over
// the expired claim's attempt and counts a crash, again at every expiry. A nack still records an
// attempt, a release undoes only the claim's attempt, and a retried dead letter starts both
// counters at 0. (The leases are 150 ms; no check races them: a stalled test machine only makes
// the claims wait longer.)
TEST_P(StoreConformance, AnExpiredLeaseCountsACrashNotAnAttempt) {
  std::vector<Event> events{make_event("t", "k")};
  store().append(events);
  const std::vector<EventId> ids = ids_of(events);
  auto first = store().claim(10, 150ms);
  ASSERT_EQ(first.events.size(), 1u);
  EXPECT_EQ(first.events[0].attempts, 1);
  EXPECT_EQ(first.events[0].crashes, 0);

  auto second = claim_within(store(), 10, 150ms, 10s);  // first's lease expired unsettled
  ASSERT_EQ(second.events.size(), 1u);
  EXPECT_EQ(second.events[0].attempts, 1);
  EXPECT_EQ(second.events[0].crashes, 1);
  auto third = claim_within(store(), 10, 30s, 10s);  // and second's
  ASSERT_EQ(third.events.size(), 1u);
  EXPECT_EQ(third.events[0].attempts, 1);
  EXPECT_EQ(third.events[0].crashes, 2);
  auto listed = store().list(10);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].attempts, 1);
  EXPECT_EQ(listed[0].crashes, 2);
  auto leased = store().leased(10);
  ASSERT_EQ(leased.size(), 1u);
  EXPECT_EQ(leased[0].attempts, 1);
  EXPECT_EQ(leased[0].crashes, 2);
  // The expired claims' owners can no longer settle; the current one can.
  EXPECT_EQ(store().release(first, ids), 0u);
  EXPECT_EQ(store().release(second, ids), 0u);

  // A refused delivery is an attempt; the next claim is a fresh one.
  std::vector<Nack> retry_now{{events[0].id, "refused", Duration(0)}};
  EXPECT_EQ(store().nack(third, retry_now), 1u);
  auto fourth = claim_within(store(), 10, 30s, 10s);
  ASSERT_EQ(fourth.events.size(), 1u);
  EXPECT_EQ(fourth.events[0].attempts, 2);
  EXPECT_EQ(fourth.events[0].crashes, 2);

  // A release undoes the claim's attempt and keeps the crashes.
  EXPECT_EQ(store().release(fourth, ids), 1u);
  auto fifth = store().claim(10, 30s);
  ASSERT_EQ(fifth.events.size(), 1u);
  EXPECT_EQ(fifth.events[0].attempts, 2);
  EXPECT_EQ(fifth.events[0].crashes, 2);

  // Dead letters keep both counters; a retry starts them at 0.
  std::vector<Nack> dead_now{{events[0].id, "gave up", std::nullopt}};
  EXPECT_EQ(store().nack(fifth, dead_now), 1u);
  auto dead = store().dead(10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].attempts, 2);
  EXPECT_EQ(dead[0].crashes, 2);
  EXPECT_EQ(store().retry(ids), 1u);
  listed = store().list(10);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].attempts, 0);
  EXPECT_EQ(listed[0].crashes, 0);
  auto sixth = store().claim(10, 30s);
  ASSERT_EQ(sixth.events.size(), 1u);
  EXPECT_EQ(sixth.events[0].attempts, 1);
  EXPECT_EQ(sixth.events[0].crashes, 0);
  EXPECT_EQ(store().ack(sixth, ids), 1u);
}

// settle_and_claim claims like claim(): an event whose lease expired unsettled counts a crash.
TEST_P(StoreConformance, SettleAndClaimCountsACrashForAnExpiredLease) {
  std::vector<Event> events{make_event("t", "k"), make_event("t", "j")};
  store().append(events);
  auto lost = store().claim(1, 150ms);  // k, whose lease will expire
  ASSERT_EQ(lost.events.size(), 1u);
  auto held = store().claim(1, 30s);  // j
  ASSERT_EQ(held.events.size(), 1u);
  ClaimedBatch next;
  auto deadline = SteadyClock::now() + 10s;
  const std::vector<EventId> acks = ids_of(held.events);
  Settlement settlement{acks, {}, {}};
  SettleCounts counts;
  next = store().settle_and_claim(held, settlement, counts, 10, 30s);
  EXPECT_EQ(counts.acked, 1u);
  while (next.empty() && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
    next = store().settle_and_claim(held, Settlement{}, counts, 10, 30s);
  }
  ASSERT_EQ(next.events.size(), 1u);
  EXPECT_EQ(next.events[0].id, events[0].id);
  EXPECT_EQ(next.events[0].attempts, 1);
  EXPECT_EQ(next.events[0].crashes, 1);
}

TEST_P(StoreConformance, RenewExtendsTheLease) {
  store().append(std::vector<Event>{make_event("t", "k")});
  auto batch = store().claim(10, 50ms);
  ASSERT_EQ(batch.events.size(), 1u);
  std::this_thread::sleep_for(100ms);  // expired, but nobody took it yet
  EXPECT_TRUE(store().renew(batch, 10s));
  EXPECT_TRUE(store().claim(10, 5s).empty());
  EXPECT_EQ(store().stats().leased, 1);
  EXPECT_EQ(store().ack(batch, ids_of(batch.events)), 1u);
}

TEST_P(StoreConformance, RenewFailsAfterAnotherClaimerTookTheEvents) {
  store().append(std::vector<Event>{make_event("t", "k"), make_event("t", "")});
  auto batch = store().claim(10, 40ms);
  ASSERT_EQ(batch.events.size(), 2u);
  auto other = claim_within(store(), 1, 10s, 3s);
  ASSERT_EQ(other.events.size(), 1u);
  EXPECT_FALSE(store().renew(batch, 10s));
}

TEST_P(StoreConformance, StaleOwnerCannotAckNackOrRelease) {
  std::vector<Event> events{make_event("t", "k")};
  store().append(events);
  auto stale = store().claim(10, 40ms);
  ASSERT_EQ(stale.events.size(), 1u);
  auto current = claim_within(store(), 10, 10s, 3s);
  ASSERT_EQ(current.events.size(), 1u);
  EXPECT_EQ(store().ack(stale, ids_of(stale.events)), 0u);
  std::vector<Nack> nacks{{events[0].id, "stale", std::nullopt}};
  EXPECT_EQ(store().nack(stale, nacks), 0u);
  EXPECT_EQ(store().release(stale, ids_of(stale.events)), 0u);
  EXPECT_TRUE(store().dead(10).empty());
  EXPECT_EQ(store().stats().leased, 1);
  EXPECT_EQ(store().ack(current, ids_of(current.events)), 1u);
  auto s = store().stats();
  EXPECT_EQ(s.pending + s.leased + s.dead, 0);
}

TEST_P(StoreConformance, ReleaseDoesNotCountTheAttempt) {
  std::vector<Event> events{make_event("t", "k"), make_event("t", "k")};
  store().append(events);
  auto batch = store().claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 2u);
  EXPECT_EQ(store().release(batch, ids_of(batch.events)), 2u);
  auto again = store().claim(10, 5s);
  ASSERT_EQ(again.events.size(), 2u);
  EXPECT_EQ(ids_of(again.events), ids_of(events));
  EXPECT_EQ(again.events[0].attempts, 1);
  EXPECT_EQ(again.events[1].attempts, 1);
}

TEST_P(StoreConformance, AckCountsOnlyEventsOfTheBatch) {
  std::vector<Event> events{make_event("t"), make_event("t"), make_event("t")};
  store().append(events);
  auto batch = store().claim(2, 5s);
  ASSERT_EQ(batch.events.size(), 2u);
  std::vector<EventId> ids{events[0].id, events[2].id, EventId::generate()};
  EXPECT_EQ(store().ack(batch, ids), 1u);  // events[2] is not in this batch
  auto s = store().stats();
  EXPECT_EQ(s.leased, 1);
  EXPECT_EQ(s.pending, 1);
  EXPECT_EQ(store().ack(batch, ids_of(batch.events)), 1u);  // the other one; acked one is gone
}

// --- settle_and_claim (the relay's hot path)
// ------------------------------------------------------

TEST_P(StoreConformance, SettleAndClaimSettlesThenClaimsTheNextHeads) {
  // k: a1 a2 a3; j: b1 b2. The first batch takes a1 and b1 (max 1 per key is not promised, so
  // claim 2 of the ordered heads); acking a1, nacking b1 for later and releasing nothing must
  // make a2 claimable in the same call while b2 stays blocked behind the retrying b1.
  std::vector<Event> events{make_event("t", "k"), make_event("t", "j"), make_event("t", "k"),
                            make_event("t", "j"), make_event("t", "k")};
  store().append(events);
  auto first = store().claim(2, 5s);
  ASSERT_EQ(ids_of(first.events), (std::vector<EventId>{events[0].id, events[1].id}));
  std::vector<EventId> acks{events[0].id};
  std::vector<Nack> nacks{{events[1].id, "later", Duration{60'000}}};
  SettleCounts counts;
  auto next = store().settle_and_claim(first, Settlement{acks, nacks, {}}, counts, 10, 5s);
  EXPECT_EQ(counts.acked, 1u);
  EXPECT_EQ(counts.nacked, 1u);
  EXPECT_EQ(counts.released, 0u);
  EXPECT_EQ(ids_of(next.events), (std::vector<EventId>{events[2].id, events[4].id}));
  auto s = store().stats();
  EXPECT_EQ(s.leased, 2);
  EXPECT_EQ(s.pending, 2);  // b1 waiting to retry, b2 behind it
}

TEST_P(StoreConformance, SettleAndClaimSettlesWhenNothingIsClaimable) {
  std::vector<Event> events{make_event("t", "k"), make_event("t", "k")};
  store().append(events);
  auto batch = store().claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 2u);
  std::vector<EventId> acks{events[0].id};
  std::vector<EventId> releases{events[1].id};
  SettleCounts counts;
  auto next = store().settle_and_claim(batch, Settlement{acks, {}, releases}, counts, 10, 5s);
  EXPECT_EQ(counts.acked, 1u);
  EXPECT_EQ(counts.released, 1u);
  // The released event is claimable again at once, with its attempt not counted.
  ASSERT_EQ(next.events.size(), 1u);
  EXPECT_EQ(next.events[0].id, events[1].id);
  EXPECT_EQ(next.events[0].attempts, 1);
  SettleCounts last;
  std::vector<EventId> acks2{events[1].id};
  auto none = store().settle_and_claim(next, Settlement{acks2, {}, {}}, last, 10, 5s);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(last.acked, 1u);
  auto s = store().stats();
  EXPECT_EQ(s.pending + s.leased + s.dead, 0);
}

TEST_P(StoreConformance, SettleAndClaimIsFencedLikeTheSeparateCalls) {
  std::vector<Event> events{make_event("t", "k")};
  store().append(events);
  auto stale = store().claim(10, 40ms);
  ASSERT_EQ(stale.events.size(), 1u);
  auto current = claim_within(store(), 10, 10s, 3s);
  ASSERT_EQ(current.events.size(), 1u);
  std::vector<EventId> acks{events[0].id};
  SettleCounts counts;
  auto next = store().settle_and_claim(stale, Settlement{acks, {}, {}}, counts, 10, 5s);
  EXPECT_EQ(counts.acked, 0u);
  EXPECT_TRUE(next.empty());  // the event is still leased by `current`
  EXPECT_EQ(store().stats().leased, 1);
}

// --- inspection ----------------------------------------------------------------------------------

TEST_P(StoreConformance, StatsCountEachState) {
  EXPECT_EQ(store().stats().oldest_pending_age, Duration(0));
  std::vector<Event> events;
  for (int i = 0; i < 5; ++i) events.push_back(make_event("t", ""));
  store().append(events);
  std::this_thread::sleep_for(60ms);
  auto leased = store().claim(2, 10s);
  ASSERT_EQ(leased.events.size(), 2u);
  std::vector<Nack> nacks{{leased.events[0].id, "x", std::nullopt}};
  store().nack(leased, nacks);
  auto s = store().stats();
  EXPECT_EQ(s.pending, 3);
  EXPECT_EQ(s.leased, 1);
  EXPECT_EQ(s.dead, 1);
  EXPECT_EQ(s.archived, 0);
  EXPECT_GE(s.oldest_pending_age, 40ms);
  EXPECT_LT(s.oldest_pending_age, 60s);
}

TEST_P(StoreConformance, ListShowsUndeliveredEventsInOrder) {
  std::vector<Event> events;
  for (int i = 0; i < 5; ++i) events.push_back(make_event("t" + std::to_string(i), "k"));
  store().append(events);
  auto batch = store().claim(1, 10s);
  auto listed = store().list(3);
  ASSERT_EQ(listed.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(listed[i].id, events[i].id);
  EXPECT_EQ(listed[0].attempts, 1);
  EXPECT_EQ(listed[1].attempts, 0);
  EXPECT_EQ(store().list(100).size(), 5u);
}

TEST_P(StoreConformance, ArchiveKeepsAckedEventsOutOfPending) {
  StoreOptions options;
  options.archive = true;
  auto& f = make(options);
  std::vector<Event> events{make_event("t", "k"), make_event("t", "k")};
  f.store->append(events);
  auto batch = f.store->claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 2u);
  EXPECT_EQ(f.store->ack(batch, ids_of(batch.events)), 2u);
  auto s = f.store->stats();
  EXPECT_EQ(s.pending, 0);
  EXPECT_EQ(s.leased, 0);
  EXPECT_EQ(s.archived, 2);
  EXPECT_TRUE(f.store->list(10).empty());
  EXPECT_TRUE(f.store->claim(10, 5s).empty());
}

// Every store opened with `archive` reads its archive back (Store::archived, `outpost events
// archive`): acked events, most recently archived first, each with its archive time; `limit`
// bounds it. (Until 2026-11-27 the memory store archived but could not read it, and its URL took
// no `archive` parameter.)
TEST_P(StoreConformance, ArchivedReadsAckedEventsBackMostRecentlyArchivedFirst) {
  StoreOptions options;
  options.archive = true;
  auto& f = make(options);
  const TimePoint before = now() - std::chrono::minutes(10);
  std::vector<Event> first{make_event("t", "k1")}, second{make_event("t", "k2")};
  for (auto* events : {&first, &second}) {
    f.store->append(*events);
    auto batch = f.store->claim(10, 5s);
    ASSERT_EQ(batch.events.size(), 1u);
    EXPECT_EQ(f.store->ack(batch, ids_of(batch.events)), 1u);
    std::this_thread::sleep_for(20ms);  // the store's clock moves on between the two acks
  }
  auto archived = f.store->archived(10);
  ASSERT_EQ(archived.size(), 2u);
  EXPECT_EQ(archived[0].id, second[0].id) << "most recently archived first";
  EXPECT_EQ(archived[1].id, first[0].id);
  EXPECT_EQ(archived[0].key, "k2");
  EXPECT_EQ(archived[0].payload, second[0].payload);
  for (const auto& a : archived) {
    EXPECT_GT(a.archived_at, before);
    EXPECT_LT(a.archived_at, now() + std::chrono::minutes(10));
  }
  EXPECT_GE(archived[0].archived_at, archived[1].archived_at);
  ASSERT_EQ(f.store->archived(1).size(), 1u);
  EXPECT_EQ(f.store->archived(1)[0].id, second[0].id);
}

// --- wake-ups ------------------------------------------------------------------------------------

TEST_P(StoreConformance, WaitForWorkWakesOnAppendFromAnotherStoreObject) {
  auto& f = fixture();
  if (!f.open_again) GTEST_SKIP() << "store cannot be opened twice";
  auto other = f.open_again();
  std::atomic<bool> got{false};
  auto start = SteadyClock::now();
  std::thread relay([&] {
    auto deadline = SteadyClock::now() + 8s;
    while (SteadyClock::now() < deadline) {
      if (!f.store->claim(10, 5s).empty()) {
        got = true;
        return;
      }
      f.store->wait_for_work(8s);
    }
  });
  std::this_thread::sleep_for(100ms);
  other->append(std::vector<Event>{make_event("t", "k")});
  relay.join();
  EXPECT_TRUE(got);
  EXPECT_LT(SteadyClock::now() - start, 3s);  // woken, not the 8 s timeout
}

TEST_P(StoreConformance, WaitForWorkWakesOnAppendToTheSameStore) {
  store();  // create before the thread uses it
  std::atomic<bool> got{false};
  auto start = SteadyClock::now();
  std::thread relay([&] {
    auto deadline = SteadyClock::now() + 8s;
    while (SteadyClock::now() < deadline) {
      if (!store().claim(10, 5s).empty()) {
        got = true;
        return;
      }
      store().wait_for_work(8s);
    }
  });
  std::this_thread::sleep_for(100ms);
  store().append(std::vector<Event>{make_event("t", "k")});
  relay.join();
  EXPECT_TRUE(got);
  EXPECT_LT(SteadyClock::now() - start, 3s);
}

TEST_P(StoreConformance, WaitForWorkWakesWhenARetryFallsDue) {
  std::vector<Event> events{make_event("t", "k")};
  store().append(events);
  auto batch = store().claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 1u);
  std::vector<Nack> nacks{{events[0].id, "soon", Duration(200ms)}};
  store().nack(batch, nacks);
  auto start = SteadyClock::now();
  bool got = false;
  while (SteadyClock::now() - start < 8s) {
    if (!store().claim(10, 5s).empty()) {
      got = true;
      break;
    }
    store().wait_for_work(8s);
  }
  EXPECT_TRUE(got);
  EXPECT_LT(SteadyClock::now() - start, 3s);
}

TEST_P(StoreConformance, InterruptWakesWaitForWork) {
  store();  // create before the thread uses it
  // A store's first waits may return early (PostgreSQL's first one only connects its LISTEN
  // and returns): wait until one blocks, or an early return would pass without interrupt().
  bool blocks = false;
  for (int i = 0; i < 10 && !blocks; ++i) {
    auto t = SteadyClock::now();
    store().wait_for_work(300ms);
    blocks = SteadyClock::now() - t >= 250ms;
  }
  ASSERT_TRUE(blocks) << "wait_for_work never blocks while there is nothing to do";
  std::atomic<bool> woke{false};
  auto start = SteadyClock::now();
  std::thread waiter([&] {
    store().wait_for_work(8s);
    woke = true;
  });
  // An interrupt() before the waiter blocks may be lost: repeat it until the waiter returns.
  while (!woke && SteadyClock::now() - start < 10s) {
    store().interrupt();
    std::this_thread::sleep_for(50ms);
  }
  waiter.join();
  EXPECT_LT(SteadyClock::now() - start, 3s);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreConformance, ::testing::ValuesIn(testing::store_cases()),
                         testing::case_name);

}  // namespace
}  // namespace outpost
