#pragma once
// The registry behind the Source conformance suite (tests/conformance/
// source_conformance_test.cpp), as store_cases.h and sink_cases.h are for stores and sinks: each
// log a consumer can read registers one SourceCase in tests/conformance/<log>_source_case.cpp.
// A case writes the log with outpost's own sink for it (one URL means the same to relay and
// consumer, docs/consumers.md) and names the source URL that reads it back. Endpoints come from
// the environment as in store_cases.h.

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "outpost/consumer.h"
#include "outpost/sink.h"

namespace outpost::testing {

struct SourceFixture {
  std::shared_ptr<Sink> sink;  // writes a fresh, empty log (unique file, stream, topic)
  std::string url;             // open_source(url) reads that log from its beginning
  std::function<void()> cleanup;
  // Other URLs of the same log (another server address, tuning parameters, the sink's own
  // parameters): a group bound to `url` reads on with each (Source::same_log), and the other
  // way round.
  std::vector<std::string> same_log;
  // URLs of other logs on the same server: never the group's log.
  std::vector<std::string> other_logs;
};

struct SourceCase {
  std::string name;                                 // gtest-safe: [A-Za-z0-9_]
  std::string scheme;                               // as source_schemes() lists it
  std::function<std::string()> unavailable_reason;  // empty when available
  std::function<SourceFixture()> make;
};

inline void PrintTo(const SourceCase& c, std::ostream* os) {
  *os << c.name;
}

inline std::vector<SourceCase>& source_case_registry() {
  static std::vector<SourceCase> cases;
  return cases;
}
// From a static initialiser in each case file:
//   const bool registered = outpost::testing::register_source_case({...});
inline bool register_source_case(SourceCase c) {
  source_case_registry().push_back(std::move(c));
  return true;
}
inline const std::vector<SourceCase>& source_cases() {
  return source_case_registry();
}

// Why a case cannot run in this build or environment ("" when it can): its scheme is not built
// in, or the environment variable naming its server is not set.
inline std::string source_unavailable(const std::string& scheme, const char* env_var) {
  auto schemes = source_schemes();
  if (std::find(schemes.begin(), schemes.end(), scheme) == schemes.end())
    return "this build has no " + scheme + " source";
  if (env_var && !std::getenv(env_var)) return std::string(env_var) + " not set";
  return {};
}

}  // namespace outpost::testing
