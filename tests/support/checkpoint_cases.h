#pragma once
// The registry behind the CheckpointStore conformance suite, as store_cases.h is the stores':
// each engine registers one CheckpointCase in its own file (tests/conformance/
// <engine>_checkpoint_case.cpp) and tests/conformance/checkpoint_conformance_test.cpp runs every
// test against every registered case. A case hands out fresh checkpoint store URLs (a new file,
// a new table prefix) and removes what they created; the suite opens them through
// open_checkpoint_store, as users do. Endpoints as for the store cases (store_cases.h).

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "store_cases.h"

namespace outpost::testing {

struct CheckpointFixture {
  std::string url;                // sqlite:PATH?prefix=... or postgresql://...?prefix=...
  std::function<void()> cleanup;  // drops the tables / removes the files make() set up
};

struct CheckpointCase {
  std::string name;  // gtest-safe: [A-Za-z0-9_]
  // Empty when available; otherwise why not (e.g. "OUTPOST_TEST_PG_URL not set").
  std::function<std::string()> unavailable_reason;
  std::function<CheckpointFixture()> make;
};

// gtest prints the case by its name.
inline void PrintTo(const CheckpointCase& c, std::ostream* os) {
  *os << c.name;
}

inline std::vector<CheckpointCase>& checkpoint_case_registry() {
  static std::vector<CheckpointCase> cases;
  return cases;
}
// From a static initialiser in each case file:
//   const bool registered = outpost::testing::register_checkpoint_case({...});
inline bool register_checkpoint_case(CheckpointCase c) {
  checkpoint_case_registry().push_back(std::move(c));
  return true;
}
inline const std::vector<CheckpointCase>& checkpoint_cases() {
  return checkpoint_case_registry();
}

}  // namespace outpost::testing
