// The relay's store errors by their code: an outage is retried with backoff and, once the store
// answers again, said once (docs/cli.md, "relay"); a row the store cannot read
// (ErrorCode::corrupt, docs/emit-contract.md) stops the relay, whose run() throws the store's
// own error, instead of retrying the claim forever. Both loops (pipelined, sequential), every
// store case of this executable.

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "outpost/relay.h"
#include "outpost/sinks/handlers.h"
#include "outpost/store_wrapper.h"
#include "store_param.h"

namespace outpost::unit {
namespace {

// Claims throw `code` once `trip` is set (a row that cannot be read, or an outage), `failures`
// times (-1: until the test says otherwise).
class ClaimFailing final : public StoreWrapper {
 public:
  explicit ClaimFailing(std::shared_ptr<Store> inner) : StoreWrapper(std::move(inner)) {}
  std::atomic<int> failures{0};
  ErrorCode code = ErrorCode::corrupt;
  std::atomic<int> claims{0};
  // The claim inside settle_and_claim throws `code` this many times, after its settlement was
  // made; each such failure then arms `failures_after_combined` failures of the plain claims.
  std::atomic<int> combined_failures{0};
  int failures_after_combined = 0;

  ClaimedBatch claim(std::size_t max, Duration lease, ClaimOrder order) override {
    ++claims;
    if (take()) fail();
    return target().claim(max, lease, order);
  }
  ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& settlement,
                                SettleCounts& counts, std::size_t max, Duration lease,
                                ClaimOrder order) override {
    // The separate calls, so every claim goes through claim() above.
    int n = combined_failures.load();
    if (n > 0 && combined_failures.compare_exchange_strong(n, n - 1)) {
      counts = {};
      if (!settlement.acks.empty()) counts.acked = target().ack(done, settlement.acks);
      if (!settlement.nacks.empty()) counts.nacked = target().nack(done, settlement.nacks);
      if (!settlement.releases.empty())
        counts.released = target().release(done, settlement.releases);
      failures = failures_after_combined;
      fail();
    }
    return Store::settle_and_claim(done, settlement, counts, max, lease, order);
  }

 private:
  bool take() {
    int n = failures.load();
    while (n != 0) {
      if (n < 0) return true;
      if (failures.compare_exchange_weak(n, n - 1)) return true;
    }
    return false;
  }
  [[noreturn]] void fail() const {
    if (code == ErrorCode::corrupt)
      throw Error(ErrorCode::corrupt, "sqlite", "headers column is not a JSON object");
    throw ConnectionError("faulty", "injected outage");
  }
};

struct Reports {
  std::mutex mu;
  std::vector<std::string> errors, notices;
  void wire(RelayOptions& o) {
    o.on_error = [this](const std::string& m) {
      std::lock_guard lock(mu);
      errors.push_back(m);
    };
    o.on_notice = [this](const std::string& m, bool) {
      std::lock_guard lock(mu);
      notices.push_back(m);
    };
  }
  std::vector<std::string> notices_now() {
    std::lock_guard lock(mu);
    return notices;
  }
};

// Runs relay.run() on a thread: what it threw (nullptr: it returned), or the relay is stopped
// and the test fails when it has not returned within `timeout`.
std::exception_ptr run_to_end(Relay& relay, Duration timeout = 30'000ms) {
  std::atomic<bool> done{false};
  std::exception_ptr thrown;
  std::thread t([&] {
    try {
      relay.run();
    } catch (...) {
      thrown = std::current_exception();
    }
    done = true;
  });
  const bool ended = eventually([&] { return done.load(); }, timeout);
  if (!ended) relay.stop();
  t.join();
  EXPECT_TRUE(ended) << "run() did not return: a fatal store error was retried";
  return thrown;
}

}  // namespace

class RelayCorruptTest : public StoreParamTest {
 protected:
  void check(bool pipeline, bool until_empty, int good_batches_first) {
    auto store = std::make_shared<ClaimFailing>(make_store());
    store->append(make_events(4, "t"));
    HandlerSink sink;
    std::atomic<int> handled{0};
    sink.on("t", [&](const StoredEvent&) {
      // The unreadable row comes after the first batches: they are delivered and acked.
      if (++handled == good_batches_first) store->failures = -1;
    });
    if (good_batches_first == 0) store->failures = -1;
    // Pipelined, a batch claimed ahead before the row turned unreadable is delivered too.
    RelayOptions o;
    o.batch_size = 1;
    o.pipeline = pipeline;
    o.until_empty = until_empty;
    o.poll_interval = 50ms;
    Reports reports;
    reports.wire(o);
    Relay relay(*store, sink, o);
    auto thrown = run_to_end(relay);
    ASSERT_TRUE(thrown) << "run() returned without the store's error";
    try {
      std::rethrow_exception(thrown);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::corrupt);
      EXPECT_EQ(e.backend(), "sqlite");
      EXPECT_STREQ(e.what(), "headers column is not a JSON object");
    }
    // Said once, not retried: one claim reached it.
    EXPECT_EQ(relay.counters().store_errors, 1u);
    // (A claim that failed inside settle_and_claim may add a note that the batch it settled
    // again on its own was already settled.)
    std::lock_guard lock(reports.mu);
    std::vector<std::string> said;
    for (const auto& m : reports.errors)
      if (m.find("headers column is not a JSON object") != std::string::npos) said.push_back(m);
    ASSERT_EQ(said.size(), 1u) << ::testing::PrintToString(reports.errors);
    EXPECT_NE(said[0].find("the relay stops"), std::string::npos) << said[0];
    EXPECT_GE(handled.load(), good_batches_first);
    // What it held is given back (released, or acked once delivered), nothing stays leased.
    auto s = store->stats();
    EXPECT_EQ(s.leased, 0);
    EXPECT_EQ(s.pending, 4 - handled.load());
  }
};

TEST_P(RelayCorruptTest, AnUnreadableRowStopsThePipelinedRelayWithTheStoresError) {
  check(/*pipeline=*/true, /*until_empty=*/true, 0);
  check(/*pipeline=*/true, /*until_empty=*/false, 2);
}

TEST_P(RelayCorruptTest, AnUnreadableRowStopsTheSequentialRelayWithTheStoresError) {
  check(/*pipeline=*/false, /*until_empty=*/false, 0);
  check(/*pipeline=*/false, /*until_empty=*/true, 2);
}

// An outage is retried (not fatal), and the end of it is said once, through on_notice, however
// many claims failed; a second outage is said again.
TEST_P(RelayCorruptTest, AStoreOutageIsRetriedAndItsEndSaidOncePerOutage) {
  auto store = std::make_shared<ClaimFailing>(make_store());
  store->code = ErrorCode::connection;
  store->failures = 3;
  HandlerSink sink;
  std::atomic<int> handled{0};
  sink.on("t", [&](const StoredEvent&) { ++handled; });
  RelayOptions o;
  o.poll_interval = 20ms;
  Reports reports;
  reports.wire(o);
  Relay relay(*store, sink, o);
  std::thread t([&] { relay.run(); });
  EXPECT_TRUE(eventually([&] { return reports.notices_now().size() == 1; }, 30'000ms));
  store->append(make_events(2, "t"));
  EXPECT_TRUE(eventually([&] { return handled.load() == 2; }, 30'000ms));
  auto notices = reports.notices_now();
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("the store works again after"), std::string::npos) << notices[0];
  EXPECT_NE(notices[0].find("3 failed"), std::string::npos) << notices[0];
  // A second outage: said again, once.
  store->failures = 2;
  EXPECT_TRUE(eventually([&] { return reports.notices_now().size() == 2; }, 30'000ms));
  relay.stop();
  t.join();
  notices = reports.notices_now();
  ASSERT_EQ(notices.size(), 2u);
  EXPECT_NE(notices[1].find("2 failed"), std::string::npos) << notices[1];
  EXPECT_EQ(relay.counters().store_errors, 5u);
}

// One outage seen first by the claim inside settle_and_claim (its settlement went through) and
// then by a plain claim: the settlement the relay makes again on its own in between answers, but
// the outage is not over until a claim answers, so it is said once, counting both failed claims.
TEST_P(RelayCorruptTest, ASettlementBetweenFailingClaimsDoesNotEndTheOutage) {
  auto store = std::make_shared<ClaimFailing>(make_store());
  store->code = ErrorCode::connection;
  store->append(make_events(12, "t"));
  HandlerSink sink;
  std::atomic<int> handled{0};
  sink.on("t", [&](const StoredEvent&) { ++handled; });
  store->combined_failures = 1;
  store->failures_after_combined = 1;
  RelayOptions o;
  o.poll_interval = 20ms;
  o.batch_size = 2;  // full batches: the relay claims ahead, settling through settle_and_claim
  o.pipeline = true;
  Reports reports;
  reports.wire(o);
  Relay relay(*store, sink, o);
  std::thread t([&] { relay.run(); });
  EXPECT_TRUE(eventually([&] { return handled.load() >= 12; }, 30'000ms));
  EXPECT_TRUE(eventually([&] { return !reports.notices_now().empty(); }, 30'000ms));
  relay.stop();
  t.join();
  EXPECT_EQ(store->combined_failures.load(), 0)
      << "the relay never settled through settle_and_claim";
  auto notices = reports.notices_now();
  ASSERT_EQ(notices.size(), 1u) << ::testing::PrintToString(notices);
  EXPECT_NE(notices[0].find("(2 failed calls)"), std::string::npos) << notices[0];
  EXPECT_EQ(relay.counters().store_errors, 2u);
}

INSTANTIATE_TEST_SUITE_P(Stores, RelayCorruptTest, ::testing::ValuesIn(testing::store_cases()),
                         case_name);

}  // namespace outpost::unit
