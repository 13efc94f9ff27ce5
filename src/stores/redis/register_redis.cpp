// Registers the redis: and redis-sentinel: store scheme when outpost::redis is linked in. Programs
// that link the target are linked with --undefined=outpost_register_redis
// (cmake/OutpostLibrary.cmake, outpost-redis.pc): that keeps this object file, and so the
// registration, in the program.

#include "outpost/stores/redis.h"
#include "outpost/factory.h"
#include "stores/redis/redis_url.h"

extern "C" void outpost_register_redis() {}

namespace {
[[maybe_unused]] const bool registered = [] {
  constexpr outpost::StoreChecker check = [](std::string_view url) {
    outpost::redis_store::parse_store_url(url);
  };
  outpost::register_store_scheme("redis", &outpost::open_redis_store, check);
  outpost::register_store_scheme("redis-sentinel", &outpost::open_redis_store, check);
  return true;
}();
}  // namespace
