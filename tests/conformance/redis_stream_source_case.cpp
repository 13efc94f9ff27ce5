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
          const std::string at = ep.host + ":" + std::to_string(ep.port);
          const std::string db = std::to_string(ep.db);
          const std::string url = "redis-stream://" + at + "/" + stream + "?db=" + db;
          // db=0 is the default: the URL without it names the same log.
          const std::string no_db =
              ep.db == 0 ? "redis-stream://" + at + "/" + stream : url + "&timeout_ms=5000";
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
              // Another address of the server, tuning and the sink's trimming parameters, a
              // password (stored redacted by earlier versions).
              .same_log =
                  {
                      "redis-stream://:secret@" + at + "/" + stream + "?db=" + db,
                      "redis-stream://localhost:" + std::to_string(ep.port) + "/" + stream +
                          "?db=" + db,
                      "redis-stream://redis.example:16999/" + stream + "?db=" + db,
                      url + "&timeout_ms=5000",
                      url + "&maxlen=100&trim_every=10",
                      no_db,
                  },
              .other_logs = {"redis-stream://" + at + "/" + stream + "x?db=" + db,
                             "redis-stream://" + at + "/" + stream +
                                 "?db=" + std::to_string(ep.db + 1)},
          };
        },
});

}  // namespace
}  // namespace outpost::testing
