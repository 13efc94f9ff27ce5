// Registers the kafka: source scheme when outpost::kafka_source is linked in. Programs that
// link the target are linked with --undefined=outpost_register_kafka_source
// (cmake/OutpostLibrary.cmake): that keeps this object file, and so the registration, in the
// program.

#include "consume/sources.h"
#include "outpost/factory.h"

extern "C" void outpost_register_kafka_source() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  outpost::register_source_scheme("kafka", &outpost::consume::open_kafka_source);
  return true;
}();
}  // namespace
