#pragma once
// What open_http_sink (http_url.cpp) reads from the URL and hands to the sink (http_sink.cpp).
// Private to src/sinks/http.

#include <algorithm>
#include <cctype>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/redact.h"
#include "outpost/sink.h"

namespace outpost::http {

struct HttpConfig {
  std::string target;  // the URL to POST to, without our parameters
  std::string shown;   // target as messages show it (core::redact_url)
  // The URL's secrets, scrubbed from every failure text: curl and the webhook's own error body
  // may quote them (a password holding '/' is read as the host: "Could not resolve host: ...").
  // Failure texts are stored as last_error, which other processes print.
  core::Redactor secrets;
  long timeout_ms = 10'000;
  std::size_t concurrency = 1;
  std::vector<std::pair<std::string, std::string>> headers;  // header.NAME=VALUE
  bool has_content_type = false;
};

// The sink for a checked configuration (http_sink.cpp).
std::unique_ptr<Sink> make_http_sink(HttpConfig config);

// ASCII case-insensitive equality (header names).
inline bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace outpost::http
