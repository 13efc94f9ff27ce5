// Registers the redis-stream: sink scheme when outpost::redis_stream is linked in. Programs that
// link the target are linked with --undefined=outpost_register_redis_stream
// (cmake/OutpostLibrary.cmake, outpost-redis_stream.pc): that keeps this object file, and so the
// registration, in the program.

#include "outpost/factory.h"
#include "outpost/sinks/redis_stream.h"

extern "C" void outpost_register_redis_stream() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  outpost::register_sink_scheme("redis-stream", &outpost::open_redis_stream_sink,
                                &outpost::check_redis_stream_sink_url);
  return true;
}();
}  // namespace
