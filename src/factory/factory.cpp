#include "outpost/factory.h"

#include <cctype>

#include "outpost/error.h"

#ifdef OUTPOST_HAVE_MEMORY
#include "outpost/stores/memory.h"
#endif
#ifdef OUTPOST_HAVE_SQLITE
#include "outpost/stores/sqlite.h"
#endif
#ifdef OUTPOST_HAVE_POSTGRES
#include "outpost/stores/postgres.h"
#endif
#ifdef OUTPOST_HAVE_REDIS
#include "outpost/stores/redis.h"
#endif
#ifdef OUTPOST_HAVE_FILE
#include "outpost/sinks/file.h"
#endif
#ifdef OUTPOST_HAVE_HTTP
#include "outpost/sinks/http.h"
#endif
#ifdef OUTPOST_HAVE_KAFKA
#include "outpost/sinks/kafka.h"
#endif
#ifdef OUTPOST_HAVE_REDIS_STREAM
#include "outpost/sinks/redis_stream.h"
#endif
#ifdef OUTPOST_HAVE_NATS
#include "outpost/sinks/nats.h"
#endif

namespace outpost {
namespace {

template <typename T, typename Options>
using Opener = std::unique_ptr<T> (*)(std::string_view, const Options&);

template <typename T, typename Options>
struct Backend {
  const char* scheme;
  Opener<T, Options> open;
};

// Order: how the schemes are listed in messages and by store_schemes()/sink_schemes().
const std::vector<Backend<Store, StoreOptions>>& store_backends() {
  static const std::vector<Backend<Store, StoreOptions>> backends = {
#ifdef OUTPOST_HAVE_SQLITE
      {"sqlite", &open_sqlite_store},
#endif
#ifdef OUTPOST_HAVE_POSTGRES
      {"postgresql", &open_postgres_store},
      {"postgres", &open_postgres_store},  // the alias libpq accepts too
#endif
#ifdef OUTPOST_HAVE_REDIS
      {"redis", &open_redis_store},
      {"redis-sentinel", &open_redis_store},
#endif
#ifdef OUTPOST_HAVE_MEMORY
      {"memory", &open_memory_store},
#endif
  };
  return backends;
}

const std::vector<Backend<Sink, SinkOptions>>& sink_backends() {
  static const std::vector<Backend<Sink, SinkOptions>> backends = {
#ifdef OUTPOST_HAVE_FILE
      {"file", &open_file_sink},
#endif
#ifdef OUTPOST_HAVE_HTTP
      {"http", &open_http_sink},
      {"https", &open_http_sink},
#endif
#ifdef OUTPOST_HAVE_KAFKA
      {"kafka", &open_kafka_sink},
#endif
#ifdef OUTPOST_HAVE_REDIS_STREAM
      {"redis-stream", &open_redis_stream_sink},
#endif
#ifdef OUTPOST_HAVE_NATS
      {"nats", &open_nats_sink},
#endif
  };
  return backends;
}

// The scheme of `url`, lowercased, or empty when there is no "scheme:" prefix.
std::string scheme_of(std::string_view url) {
  auto colon = url.find(':');
  if (colon == std::string_view::npos || colon == 0) return {};
  std::string scheme;
  for (char c : url.substr(0, colon)) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.'))
      return {};
    scheme += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return scheme;
}

template <typename T, typename Options>
std::vector<std::string> schemes(const std::vector<Backend<T, Options>>& backends) {
  std::vector<std::string> out;
  for (const auto& b : backends) out.emplace_back(b.scheme);
  return out;
}

template <typename T, typename Options>
std::unique_ptr<T> open_by_scheme(const char* what,
                                  const std::vector<Backend<T, Options>>& backends,
                                  std::string_view url, const Options& options) {
  std::string scheme = scheme_of(url);
  for (const auto& b : backends)
    if (scheme == b.scheme) return b.open(url, options);
  std::string list;
  for (const auto& b : backends) list += std::string(list.empty() ? "" : ", ") + b.scheme + ":";
  if (list.empty()) list = "(none)";
  // Never echo the whole URL: it may carry a password.
  std::string shown = scheme.empty() ? "missing scheme" : "unsupported scheme '" + scheme + ":'";
  throw ConfigError(std::string(what) + " URL: " + shown + "; this build supports " + list);
}

}  // namespace

std::unique_ptr<Store> open_store(std::string_view url, const StoreOptions& options) {
  return open_by_scheme("store", store_backends(), url, options);
}

std::unique_ptr<Sink> open_sink(std::string_view url, const SinkOptions& options) {
  return open_by_scheme("sink", sink_backends(), url, options);
}

std::vector<std::string> store_schemes() {
  return schemes(store_backends());
}
std::vector<std::string> sink_schemes() {
  return schemes(sink_backends());
}

}  // namespace outpost
