// open_source(): scheme dispatch to the sources this build has.

#include "consume/sources.h"

#include "outpost/error.h"

namespace outpost {

std::string Source::position_for(const SeekTarget& target) {
  if (target.kind == SeekTarget::Kind::beginning) return "";
  throw ConfigError("the " + std::string(name()) +
                    " source cannot move a group to an end, a position or a time");
}

std::vector<std::string> source_schemes() {
  std::vector<std::string> schemes{"file"};
#ifdef OUTPOST_CONSUME_HAVE_REDIS
  schemes.push_back("redis-stream");
#endif
#ifdef OUTPOST_CONSUME_HAVE_KAFKA
  schemes.push_back("kafka");
#endif
#ifdef OUTPOST_CONSUME_HAVE_NATS
  schemes.push_back("nats");
#endif
  return schemes;
}

std::unique_ptr<Source> open_source(std::string_view text) {
  auto url = core::Url::parse(text);
  if (url.scheme() == "file") return consume::open_file_source(url);
#ifdef OUTPOST_CONSUME_HAVE_REDIS
  if (url.scheme() == "redis-stream") return consume::open_redis_stream_source(url);
#endif
#ifdef OUTPOST_CONSUME_HAVE_KAFKA
  if (url.scheme() == "kafka") return consume::open_kafka_source(url);
#endif
#ifdef OUTPOST_CONSUME_HAVE_NATS
  if (url.scheme() == "nats") return consume::open_nats_source(url);
#endif
  std::string list;
  for (const auto& s : source_schemes()) list += (list.empty() ? "" : ", ") + s;
  throw ConfigError("bad source URL '" + url.redacted() + "': scheme '" + url.scheme() +
                    "' is not supported by this build (supported: " + list + ")");
}

}  // namespace outpost
