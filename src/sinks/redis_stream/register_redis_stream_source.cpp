// Registers the redis-stream: source scheme when outpost::redis_stream_source is linked in.
// Programs that link the target are linked with --undefined=outpost_register_redis_stream_source
// (cmake/OutpostLibrary.cmake): that keeps this object file, and so the registration, in the
// program.

#include "consume/sources.h"
#include "outpost/factory.h"

extern "C" void outpost_register_redis_stream_source() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  outpost::register_source_scheme("redis-stream", &outpost::consume::open_redis_stream_source);
  return true;
}();
}  // namespace
