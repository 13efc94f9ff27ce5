#include "sink_cases.h"

namespace outpost::testing {

static std::vector<SinkCase>& sink_registry() {
  static std::vector<SinkCase> cases;
  return cases;
}

bool register_sink_case(SinkCase sink_case) {
  sink_registry().push_back(std::move(sink_case));
  return true;
}

const std::vector<SinkCase>& sink_cases() {
  return sink_registry();
}

}  // namespace outpost::testing
