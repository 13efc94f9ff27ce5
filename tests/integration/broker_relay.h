#pragma once
// Shared by the broker integration tests: fill a store with keyed events, run the real relay
// into a sink until the store is empty (bounded by a deadline), and check what a consumer read
// back: every event present, duplicates counted, per-key order of first occurrences.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "outpost/relay.h"
#include "outpost/sink.h"
#include "outpost/sink_wrapper.h"
#include "outpost/store.h"
#include "sink_cases.h"

namespace outpost::testing::brokers {

// n events over `keys` keys (every 10th without a key), payload names key and position.
inline std::vector<Event> keyed_events(std::size_t n, std::size_t keys,
                                       const std::string& type = "order.updated") {
  std::vector<Event> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    Event e = Event::make(type, "", i % 10 == 9 ? "" : "order-" + std::to_string(i % keys));
    e.payload =
        R"({"n":)" + std::to_string(i) + R"(,"pad":"0123456789012345678901234567890123456789"})";
    out.push_back(std::move(e));
  }
  return out;
}

inline void append_all(Store& store, const std::vector<Event>& events, std::size_t batch = 1000) {
  for (std::size_t at = 0; at < events.size(); at += batch) {
    const std::size_t n = std::min(batch, events.size() - at);
    store.append(std::span<const Event>(events.data() + at, n));
  }
}

// Passes every call to `inner` and counts the outcomes, so an outage test can tell an outage
// (unavailable, no attempt) from refusals (failed attempts) whatever the relay does with them.
class CountingSink final : public SinkWrapper {
 public:
  explicit CountingSink(Sink& inner) : SinkWrapper(inner) {}
  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    return count(target().deliver(events));
  }
  std::vector<DeliveryResult> deliver_bounded(std::span<const StoredEvent> events,
                                              const DeliveryControl& control) override {
    return count(target().deliver_bounded(events, control));
  }

  std::uint64_t unavailable() const { return unavailable_.load(); }
  std::uint64_t failed() const { return failed_.load(); }
  std::string first_failure() const {
    std::lock_guard lock(mu_);
    return first_failure_;
  }

 private:
  std::vector<DeliveryResult> count(std::vector<DeliveryResult> results) {
    for (const auto& r : results) {
      if (r.status == DeliveryResult::Status::unavailable) ++unavailable_;
      if (r.status == DeliveryResult::Status::failed) {
        ++failed_;
        std::lock_guard lock(mu_);
        if (first_failure_.empty()) first_failure_ = r.error;
      }
    }
    return results;
  }
  std::atomic<std::uint64_t> unavailable_{0}, failed_{0};
  mutable std::mutex mu_;
  std::string first_failure_;  // guarded by mu_
};

struct RelayRun {
  RelayCounters counters;
  double seconds = 0;
  bool finished = false;  // emptied the store before the deadline
};

// Runs a relay with `options` on a thread; `during` runs on the calling thread meanwhile (e.g.
// a broker outage; it may stop() the relay), then waits for the relay up to `deadline`.
template <typename During>
RelayRun run_relay(Store& store, Sink& sink, RelayOptions options, std::chrono::seconds deadline,
                   During during) {
  Relay relay(store, sink, options);
  std::atomic<bool> done{false};
  const auto start = std::chrono::steady_clock::now();
  std::thread worker([&] {
    relay.run();
    done = true;
  });
  during(relay);
  while (!done && std::chrono::steady_clock::now() - start < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  RelayRun run;
  run.finished = done.load();
  if (!done) relay.stop();
  worker.join();
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.counters = relay.counters();
  return run;
}

// Until the store is empty.
inline RelayRun run_relay(Store& store, Sink& sink, RelayOptions options,
                          std::chrono::seconds deadline) {
  options.until_empty = true;
  return run_relay(store, sink, std::move(options), deadline, [](Relay&) {});
}

// The outage choreography shared by the broker tests: a producer appends `batches` x `per_batch`
// events every 100 ms while the relay runs; after 1 s `down()` is called, 10 s later `up()`;
// once the producer is done and the store is empty the relay is stopped.
template <typename Down, typename Up>
RelayRun run_relay_through_outage(Store& store, Sink& sink, RelayOptions options,
                                  const std::vector<Event>& events, std::size_t per_batch,
                                  Down down, Up up,
                                  std::chrono::seconds outage = std::chrono::seconds(10)) {
  options.until_empty = false;
  return run_relay(store, sink, std::move(options), std::chrono::seconds(90), [&](Relay& relay) {
    std::thread producer([&] {
      for (std::size_t at = 0; at < events.size(); at += per_batch) {
        const std::size_t n = std::min(per_batch, events.size() - at);
        store.append(std::span<const Event>(events.data() + at, n));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    std::this_thread::sleep_for(std::chrono::seconds(1));
    down();
    std::this_thread::sleep_for(outage);
    up();
    producer.join();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      const auto s = store.stats();
      if (s.pending + s.leased == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    relay.stop();
  });
}

struct DeliveryCheck {
  std::size_t missing = 0;
  std::size_t duplicates = 0;    // extra copies beyond the first
  std::size_t order_breaks = 0;  // keys whose first occurrences are out of emit order
  std::size_t unknown = 0;       // ids never emitted
  std::string first_problem;
};

// `events` in emit order (the store's sequence); `received` in the broker's per-partition /
// stream order.
template <typename ReceivedT>
DeliveryCheck check_delivery(const std::vector<Event>& events,
                             const std::vector<ReceivedT>& received) {
  DeliveryCheck c;
  std::unordered_map<std::string, std::size_t> position;  // id -> emit index
  for (std::size_t i = 0; i < events.size(); ++i) position[events[i].id.str()] = i;
  std::unordered_map<std::string, int> seen;
  std::map<std::string, std::size_t> last_of_key;  // key -> emit index of its last first-seen
  for (const auto& r : received) {
    auto it = position.find(r.id);
    if (it == position.end()) {
      if (c.unknown++ == 0 && c.first_problem.empty()) c.first_problem = "unknown id " + r.id;
      continue;
    }
    if (seen[r.id]++ > 0) {
      ++c.duplicates;
      continue;
    }
    const Event& e = events[it->second];
    if (e.key.empty()) continue;
    if (r.key != e.key) {
      ++c.order_breaks;
      if (c.first_problem.empty()) c.first_problem = "key mismatch for " + r.id;
      continue;
    }
    auto [k, inserted] = last_of_key.try_emplace(e.key, it->second);
    if (!inserted) {
      if (it->second < k->second) {
        ++c.order_breaks;
        if (c.first_problem.empty())
          c.first_problem = "key " + e.key + ": event #" + std::to_string(it->second) +
                            " read after #" + std::to_string(k->second);
      }
      k->second = std::max(k->second, it->second);
    }
  }
  for (const auto& e : events)
    if (!seen.contains(e.id.str())) {
      if (c.missing++ == 0 && c.first_problem.empty()) c.first_problem = "missing " + e.id.str();
    }
  return c;
}

inline RelayOptions fast_relay_options(std::size_t batch = 500) {
  RelayOptions o;
  o.batch_size = batch;
  o.lease = Duration{30'000};
  o.max_attempts = 1000;  // an outage must never dead-letter in these tests
  o.backoff_base = Duration{50};
  o.backoff_max = Duration{1'000};
  o.poll_interval = Duration{50};
  return o;
}

}  // namespace outpost::testing::brokers
