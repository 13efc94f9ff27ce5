// The scheme registry behind open_store/open_sink/open_source. Backends add themselves from static
// registration objects (each backend's register_*.cpp), which run before main() in any order, so
// the tables are function-local statics guarded by a mutex, and listing order comes from a
// fixed rank rather than from registration order.

#include "outpost/factory.h"

#include <algorithm>
#include <cctype>
#include <mutex>

#include "outpost/error.h"

namespace outpost {
namespace {

// How built-in schemes are listed in messages and by store_schemes()/sink_schemes().
constexpr std::string_view kSchemeOrder[] = {
    "sqlite", "postgresql", "postgres", "redis", "redis-sentinel", "memory",
    "file",   "http",       "https",    "kafka", "redis-stream",   "nats"};

std::size_t rank_of(std::string_view scheme) {
  auto it = std::find(std::begin(kSchemeOrder), std::end(kSchemeOrder), scheme);
  return static_cast<std::size_t>(it - std::begin(kSchemeOrder));
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

template <typename Opener>
class Registry {
 public:
  void add(std::string_view scheme, Opener open) {
    std::lock_guard lock(mu_);
    std::string name = lowercase(scheme);
    for (auto& e : entries_)
      if (e.scheme == name) {
        e.open = open;
        return;
      }
    entries_.push_back({std::move(name), open});
    // Stable: schemes outside kSchemeOrder keep their registration order, after the built-ins.
    std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
      return rank_of(a.scheme) < rank_of(b.scheme);
    });
  }
  Opener find(const std::string& scheme) const {
    std::lock_guard lock(mu_);
    for (const auto& e : entries_)
      if (e.scheme == scheme) return e.open;
    return nullptr;
  }
  std::vector<std::string> schemes() const {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (const auto& e : entries_) out.push_back(e.scheme);
    return out;
  }

 private:
  struct Entry {
    std::string scheme;
    Opener open;
  };
  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // guarded by mu_
};

Registry<StoreOpener>& stores() {
  static Registry<StoreOpener> registry;
  return registry;
}
Registry<SinkOpener>& sinks() {
  static Registry<SinkOpener> registry;
  return registry;
}
Registry<SourceOpener>& sources() {
  static Registry<SourceOpener> registry;
  return registry;
}

// The scheme of `url`, lowercased, or empty when there is no "scheme:" prefix.
std::string scheme_of(std::string_view url) {
  auto colon = url.find(':');
  if (colon == std::string_view::npos || colon == 0) return {};
  for (char c : url.substr(0, colon))
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.'))
      return {};
  return lowercase(url.substr(0, colon));
}

// The parse-only half of each store opener (check_store_url).
Registry<StoreChecker>& store_checkers() {
  static Registry<StoreChecker> registry;
  return registry;
}

// The parse-only half of the sink openers that have one (check_sink_url).
Registry<SinkChecker>& sink_checkers() {
  static Registry<SinkChecker> registry;
  return registry;
}

template <typename Opener>
[[noreturn]] void unsupported_scheme(const char* what, const Registry<Opener>& registry,
                                     const std::string& scheme) {
  std::string list;
  for (const auto& s : registry.schemes()) list += (list.empty() ? "" : ", ") + s + ":";
  if (list.empty()) list = "(none: link a backend, e.g. outpost::sqlite)";
  // Never echo the whole URL: it may carry a password.
  std::string shown = scheme.empty() ? "missing scheme" : "unsupported scheme '" + scheme + ":'";
  throw ConfigError(std::string(what) + " URL: " + shown + "; this build supports " + list);
}

template <typename Opener, typename Options>
auto open_by_scheme(const char* what, const Registry<Opener>& registry, std::string_view url,
                    const Options& options) {
  std::string scheme = scheme_of(url);
  if (Opener open = scheme.empty() ? nullptr : registry.find(scheme)) return open(url, options);
  unsupported_scheme(what, registry, scheme);
}

}  // namespace

void register_store_scheme(std::string_view scheme, StoreOpener open, StoreChecker check) {
  stores().add(scheme, open);
  store_checkers().add(scheme, check);  // a null one replaces an earlier checker too
}
void register_sink_scheme(std::string_view scheme, SinkOpener open, SinkChecker check) {
  sinks().add(scheme, open);
  sink_checkers().add(scheme, check);
}

void register_source_scheme(std::string_view scheme, SourceOpener open) {
  sources().add(scheme, open);
}
SourceOpener find_source_opener(std::string_view scheme) {
  return sources().find(lowercase(scheme));
}
std::vector<std::string> registered_source_schemes() {
  return sources().schemes();
}

void check_store_url(std::string_view url) {
  std::string scheme = scheme_of(url);
  if (scheme.empty() || !stores().find(scheme)) unsupported_scheme("store", stores(), scheme);
  if (StoreChecker check = store_checkers().find(scheme)) check(url);
}

void check_sink_url(std::string_view url) {
  std::string scheme = scheme_of(url);
  if (scheme.empty() || !sinks().find(scheme)) unsupported_scheme("sink", sinks(), scheme);
  if (SinkChecker check = sink_checkers().find(scheme)) check(url);
}

std::unique_ptr<Store> open_store(std::string_view url, const StoreOptions& options) {
  return open_by_scheme("store", stores(), url, options);
}

std::unique_ptr<Sink> open_sink(std::string_view url, const SinkOptions& options) {
  return open_by_scheme("sink", sinks(), url, options);
}

std::vector<std::string> store_schemes() {
  return stores().schemes();
}
std::vector<std::string> sink_schemes() {
  return sinks().schemes();
}

}  // namespace outpost
