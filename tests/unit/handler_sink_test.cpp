// The handler-table sink on its own: outcomes per event, lanes by key (skip after a failure,
// never two events of a key at once, real parallelism across keys), middleware and the table.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "outpost/error.h"
#include "outpost/sinks/handlers.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using Status = DeliveryResult::Status;

std::vector<StoredEvent> stored(const std::vector<std::pair<std::string, std::string>>& type_key) {
  std::vector<StoredEvent> out;
  std::int64_t seq = 0;
  for (const auto& [type, key] : type_key) {
    StoredEvent e;
    static_cast<Event&>(e) = Event::make(type, "{}", key);
    e.seq = ++seq;
    e.attempts = 1;
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<Status> statuses(const std::vector<DeliveryResult>& results) {
  std::vector<Status> out;
  for (const auto& r : results) out.push_back(r.status);
  return out;
}

class HandlerSinkLanes : public ::testing::TestWithParam<std::size_t> {};

TEST_P(HandlerSinkLanes, FailureSkipsLaterEventsOfItsKeyOnly) {
  HandlerSink sink({.concurrency = GetParam()});
  sink.on("ok", [](const StoredEvent&) {});
  sink.on("bad", [](const StoredEvent&) { throw std::runtime_error("bad event"); });
  auto events = stored({{"bad", "k1"},
                        {"ok", "k1"},
                        {"ok", "k2"},
                        {"ok", "k1"},
                        {"bad", ""},
                        {"ok", ""},
                        {"unknown", "k3"},
                        {"ok", "k3"}});
  auto results = sink.deliver(events);
  EXPECT_EQ(
      statuses(results),
      (std::vector<Status>{Status::failed, Status::skipped, Status::delivered, Status::skipped,
                           Status::failed, Status::delivered, Status::failed, Status::skipped}));
  EXPECT_EQ(results[0].error, "bad event");
  EXPECT_EQ(results[6].error, "no handler for event type 'unknown'");
}

TEST_P(HandlerSinkLanes, EveryEventIsHandledOnceInKeyOrder) {
  HandlerSink sink({.concurrency = GetParam()});
  std::mutex mu;
  std::map<std::string, std::vector<std::int64_t>> seen;
  std::atomic<int> overlaps{0};
  std::map<std::string, std::atomic<int>> in_flight;
  for (int k = 0; k < 7; ++k) in_flight["k" + std::to_string(k)];
  sink.on("t", [&](const StoredEvent& e) {
    if (in_flight.at(e.key).fetch_add(1) != 0) ++overlaps;
    {
      std::lock_guard lock(mu);
      seen[e.key].push_back(e.seq);
    }
    in_flight.at(e.key).fetch_sub(1);
  });
  std::vector<std::pair<std::string, std::string>> spec;
  for (int i = 0; i < 700; ++i) spec.emplace_back("t", "k" + std::to_string(i * 13 % 7));
  auto events = stored(spec);
  auto results = sink.deliver(events);
  ASSERT_EQ(results.size(), events.size());
  for (const auto& r : results) EXPECT_TRUE(r.ok());
  EXPECT_EQ(overlaps.load(), 0);
  std::size_t total = 0;
  for (auto& [key, seqs] : seen) {
    total += seqs.size();
    EXPECT_TRUE(std::is_sorted(seqs.begin(), seqs.end())) << key;
  }
  EXPECT_EQ(total, events.size());
}

// A handler whose downstream is down throws UnavailableError (or a subclass): the event is
// unavailable with the handler's retry_after, not an attempt (docs/sinks.md, "Failure classes
// (handlers)"); later events of its key are held back, and no further event of the batch is
// started (each would only find the downstream down again). Other lanes already running finish.
struct PaymentsDown : UnavailableError {
  PaymentsDown() : UnavailableError("payments API answered 503", 1500ms) {}
};

TEST_P(HandlerSinkLanes, UnavailableErrorIsUnavailableAndStartsNothingMore) {
  HandlerSink sink({.concurrency = GetParam()});
  std::atomic<int> ran{0};
  sink.on("pay", [&](const StoredEvent&) {
    ++ran;
    throw PaymentsDown();
  });
  sink.on("ok", [&](const StoredEvent&) { ++ran; });
  auto events = stored({{"pay", "k1"}, {"ok", "k1"}, {"ok", "k2"}, {"ok", ""}, {"ok", "k2"}});
  auto results = sink.deliver(events);
  ASSERT_EQ(results.size(), events.size());
  EXPECT_EQ(results[0].status, Status::unavailable);
  EXPECT_EQ(results[0].error, "unavailable: payments API answered 503");
  EXPECT_EQ(results[0].retry_after, 1500ms);
  EXPECT_EQ(results[1].status, Status::skipped) << results[1].error;
  for (std::size_t i = 2; i < results.size(); ++i)
    EXPECT_NE(results[i].status, Status::failed) << i << ": " << results[i].error;
  if (GetParam() == 1) {  // one thread: lanes run one after another, none after the first
    EXPECT_EQ(ran.load(), 1);
    EXPECT_EQ(results[2].status, Status::unavailable);
    EXPECT_EQ(results[2].error.rfind("unavailable: not sent", 0), 0u) << results[2].error;
    EXPECT_EQ(results[2].retry_after, 1500ms);
    EXPECT_EQ(results[3].status, Status::unavailable);
    EXPECT_EQ(results[4].status, Status::skipped);
  }
}

TEST_P(HandlerSinkLanes, AnOrdinaryExceptionIsRefused) {
  HandlerSink sink({.concurrency = GetParam()});
  sink.on("t", [](const StoredEvent& e) {
    if (e.key == "logic") throw std::logic_error("amount is negative");
    if (e.key == "int") throw 42;
    throw Error(ErrorCode::connection, "smtp", "not an UnavailableError: an attempt");
  });
  auto results = sink.deliver(stored({{"t", "logic"}, {"t", "int"}, {"t", "err"}}));
  for (const auto& r : results) EXPECT_EQ(r.status, Status::failed) << r.error;
  EXPECT_EQ(results[0].error, "amount is negative") << "the handler's words, as they are";
  EXPECT_EQ(results[1].error, "handler for 't' threw a non-standard exception");
}

INSTANTIATE_TEST_SUITE_P(Concurrency, HandlerSinkLanes, ::testing::Values(1, 4));

TEST(HandlerSinkTest, DifferentKeysRunInParallel) {
  // Each handler waits until all four are running: only possible with four threads at once.
  HandlerSink sink({.concurrency = 4});
  std::atomic<int> running{0};
  std::atomic<bool> all_met{true};
  sink.on("t", [&](const StoredEvent&) {
    ++running;
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (running.load() < 4) {
      if (std::chrono::steady_clock::now() > deadline) {
        all_met = false;
        break;
      }
      std::this_thread::yield();
    }
  });
  auto results = sink.deliver(stored({{"t", "a"}, {"t", "b"}, {"t", "c"}, {"t", ""}}));
  for (const auto& r : results) EXPECT_TRUE(r.ok());
  EXPECT_TRUE(all_met.load());
}

TEST(HandlerSinkTest, MiddlewareDropsOrFails) {
  HandlerSink sink;
  std::atomic<int> calls{0};
  sink.on("t", [&](const StoredEvent&) { ++calls; });
  sink.use([](const StoredEvent& e) {
    if (e.key == "boom") throw std::runtime_error("middleware failed");
    return e.key != "drop";
  });
  auto results = sink.deliver(stored({{"t", "drop"}, {"t", "boom"}, {"t", "keep"}}));
  EXPECT_EQ(statuses(results),
            (std::vector<Status>{Status::delivered, Status::failed, Status::delivered}));
  EXPECT_EQ(results[1].error, "middleware failed");
  EXPECT_EQ(calls.load(), 1);
}

TEST(HandlerSinkTest, IgnoreUnknownTypesDeliversThem) {
  HandlerSink sink({.ignore_unknown_types = true});
  auto results = sink.deliver(stored({{"nobody", ""}}));
  EXPECT_TRUE(results[0].ok());
}

TEST(HandlerSinkTest, TableRulesAndOnHandled) {
  std::vector<std::string> handled;
  HandlerSink sink({.on_handled = [&](const StoredEvent& e) { handled.push_back(e.type); }});
  EXPECT_THROW(sink.on("", [](const StoredEvent&) {}), ConfigError);
  EXPECT_THROW(sink.on("t", Handler{}), ConfigError);
  sink.on("t", [](const StoredEvent&) {});
  EXPECT_THROW(sink.on("t", [](const StoredEvent&) {}), Error);
  sink.off("t");
  sink.off("t");  // no-op
  sink.on("t", [](const StoredEvent& e) {
    if (e.key == "x") throw std::runtime_error("x");
  });
  auto results = sink.deliver(stored({{"t", ""}, {"t", "x"}, {"u", ""}}));
  EXPECT_EQ(handled, std::vector<std::string>{"t"});  // neither failures nor unknown types
  EXPECT_EQ(sink.name(), "handlers");
  EXPECT_THROW(HandlerSink({.concurrency = 0}), ConfigError);
}

}  // namespace
}  // namespace outpost
