// Registers Redis Streams with the Source conformance suite: a fresh stream per test on
// OUTPOST_TEST_REDIS_URL's server, written by the Redis Streams sink and read by the
// redis-stream source from the same URL; cleanup deletes the stream and its checkpoint registry.

#include "../integration/broker_consumers.h"
#include "outpost/sinks/redis_stream.h"
#include "source_cases.h"

namespace outpost::testing {
namespace {

using namespace brokers;

const bool registered = register_source_case({
    .name = "redis_stream",
    .scheme = "redis-stream",
    .unavailable_reason =
        [] { return source_unavailable("redis-stream", "OUTPOST_TEST_REDIS_URL"); },
    .make =
        [] {
          auto ep = parse_redis_url(env_text("OUTPOST_TEST_REDIS_URL"));
          const std::string stream = brokers::unique_name("srcconf");
          const std::string url = "redis-stream://" + ep.host + ":" + std::to_string(ep.port) +
                                  "/" + stream + "?db=" + std::to_string(ep.db);
          return SourceFixture{
              .sink = open_redis_stream_sink(url),
              .url = url,
              .cleanup =
                  [ep, stream] {
                    try {
                      auto c = redis_connect(ep);
                      redis_command(c.get(), {"DEL", stream, stream + ":checkpoints"});
                    } catch (...) {
                    }
                  },
          };
        },
});

}  // namespace
}  // namespace outpost::testing
