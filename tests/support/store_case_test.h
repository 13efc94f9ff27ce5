#pragma once
// The gtest fixture shared by every suite parameterised over the store cases (the conformance
// suite, the relay and bus unit tests): skips a case whose endpoint is missing (fails instead
// when OUTPOST_TEST_REQUIRE_ALL=1), makes fresh stores and cleans them up after the test.

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "store_cases.h"

namespace outpost::testing {

class StoreCaseTest : public ::testing::TestWithParam<StoreCase> {
 protected:
  void SetUp() override {
    std::string reason = GetParam().unavailable_reason();
    if (!reason.empty()) {
      if (require_all_endpoints()) FAIL() << GetParam().name << " unavailable: " << reason;
      GTEST_SKIP() << GetParam().name << " unavailable: " << reason;
    }
  }

  void TearDown() override {
    for (auto& f : fixtures_) {
      f.store.reset();
      if (f.cleanup) f.cleanup();
    }
  }

  // A fresh, empty store with unique names; kept (and cleaned up) until TearDown.
  StoreFixture& make(const StoreOptions& options = {}) {
    fixtures_.push_back(GetParam().make(options));
    return fixtures_.back();
  }

  // The stores made so far, oldest first.
  std::vector<StoreFixture>& fixtures() { return fixtures_; }

 private:
  std::vector<StoreFixture> fixtures_;
};

// Names each instantiation after its case ("Stores/Suite.Test/sqlite").
inline std::string case_name(const ::testing::TestParamInfo<StoreCase>& info) {
  return info.param.name;
}

// Prints a case by its name (not its bytes) in test listings and failure messages.
inline void PrintTo(const StoreCase& store_case, std::ostream* os) {
  *os << store_case.name;
}

}  // namespace outpost::testing
