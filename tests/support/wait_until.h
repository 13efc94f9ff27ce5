#pragma once
// Waiting for a condition in tests with a generous bound instead of a fixed sleep, so a test does
// not depend on the speed of the machine.

#include <chrono>
#include <thread>

namespace outpost::testing {

// Polls `condition` until it holds; false when `bound` passed first.
template <typename F>
bool wait_until(F&& condition, std::chrono::milliseconds bound,
                std::chrono::milliseconds poll = std::chrono::milliseconds(5)) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace outpost::testing
