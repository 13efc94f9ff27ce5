#pragma once
// A gtest fixture parameterised over the store cases compiled into this executable (memory, and
// SQLite when built), with small helpers shared by the relay and bus tests.

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "outpost/store.h"
#include "store_case_test.h"

namespace outpost::unit {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// The shared store-case fixture (tests/support/store_case_test.h) with the relay and bus tests'
// helpers.
class StoreParamTest : public testing::StoreCaseTest {
 protected:
  // A fresh empty store, kept until TearDown.
  std::shared_ptr<Store> make_store(const StoreOptions& options = {}) {
    return make(options).store;
  }
  // A second Store object on the data of the last make_store() (another process's view), or
  // that same object when the backend cannot share (memory:).
  std::shared_ptr<Store> second_view() {
    auto& f = fixtures().back();
    return f.open_again ? f.open_again() : f.store;
  }
};

using testing::case_name;

inline std::vector<Event> make_events(std::size_t n, const std::string& type,
                                      const std::string& key = {}) {
  std::vector<Event> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(Event::make(type, "{\"i\":" + std::to_string(i) + "}", key));
  return out;
}

// Polls `done` every few ms until it holds or `timeout` passes; returns its last value.
inline bool eventually(const std::function<bool()>& done, Duration timeout = 5000ms) {
  auto deadline = SteadyClock::now() + timeout;
  while (!done()) {
    if (SteadyClock::now() >= deadline) return done();
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

}  // namespace outpost::unit
