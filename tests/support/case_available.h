#pragma once
// For SetUp() of the suites parameterised over registered cases (checkpoint stores, sources):
// a case whose endpoint is missing is skipped, or fails when OUTPOST_TEST_REQUIRE_ALL=1. gtest
// runs no test body after a skip or fatal failure in SetUp, also when it comes from here.

#include <gtest/gtest.h>

#include <string>

#include "store_cases.h"

namespace outpost::testing {

inline void skip_unless_available(const std::string& name, const std::string& reason) {
  if (reason.empty()) return;
  if (require_all_endpoints()) FAIL() << name << " unavailable: " << reason;
  GTEST_SKIP() << name << " unavailable: " << reason;
}

}  // namespace outpost::testing
