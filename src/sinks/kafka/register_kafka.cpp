// Registers the kafka: sink scheme when outpost::kafka is linked in. Programs that link
// the target are linked with --undefined=outpost_register_kafka (cmake/OutpostLibrary.cmake,
// outpost-kafka.pc): that keeps this object file, and so the registration, in the program.

#include "outpost/factory.h"
#include "outpost/sinks/kafka.h"

extern "C" void outpost_register_kafka() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  outpost::register_sink_scheme("kafka", &outpost::open_kafka_sink, &outpost::check_kafka_sink_url);
  return true;
}();
}  // namespace
