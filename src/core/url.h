#pragma once
// URL parsing for the store and sink URLs (docs/configuration.md, "Store URLs" and "Sink
// URLs"). Two shapes:
//   scheme://[user[:password]@]host[:port][,host[:port]...][/path][?k=v&...]
//   scheme:opaque[?k=v&...]            (sqlite:PATH, sqlite::memory:, file:PATH, memory:)
// Errors are ConfigErrors naming the URL part that is wrong.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outpost::core {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;  // 0: not given
};

class Url {
 public:
  static Url parse(std::string_view text);  // throws ConfigError

  const std::string& text() const { return text_; }
  const std::string& scheme() const { return scheme_; }
  bool hierarchical() const { return hierarchical_; }  // had "//"
  const std::string& user() const { return user_; }
  const std::string& password() const { return password_; }
  const std::vector<HostPort>& hosts() const { return hosts_; }
  // For hierarchical URLs the path without its leading '/'; for opaque ones everything between
  // "scheme:" and '?', percent-decoded.
  const std::string& path() const { return path_; }
  const std::vector<std::pair<std::string, std::string>>& query() const { return query_; }

  // Query parameter accessors. Each marks the parameter as known; reject_unknown() then throws
  // for any parameter nobody asked for (a typo must not be silently ignored).
  std::optional<std::string> param(std::string_view name) const;
  std::optional<std::int64_t> int_param(std::string_view name, std::int64_t min,
                                        std::int64_t max) const;
  std::optional<bool> bool_param(std::string_view name) const;
  void reject_unknown() const;

  // "host:port,host:port"
  std::string host_list(std::uint16_t default_port) const;
  // The local path a file: URL names: file:PATH, file:///PATH or file://localhost/PATH ("" or
  // "/" when it names none: the caller says what it needs). Throws ConfigError for another host.
  std::string local_path() const;
  // The URL with every secret replaced by "***" (core/redact.h), for messages and logs.
  std::string redacted() const;

 private:
  std::string text_, scheme_, user_, password_, path_;
  bool hierarchical_ = false;
  std::vector<HostPort> hosts_;
  std::vector<std::pair<std::string, std::string>> query_;
  mutable std::set<std::string, std::less<>> known_;
};

std::string percent_decode(std::string_view s);

}  // namespace outpost::core
