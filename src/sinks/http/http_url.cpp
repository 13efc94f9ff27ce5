// open_http_sink and check_http_sink_url: the webhook URL read and checked
// (docs/sinks_file_http.md): our parameters (timeout_ms, concurrency, header.NAME) taken out, every
// other one passed to the webhook byte for byte, a near miss of ours refused.

#include <curl/curl.h>

#include <memory>
#include <string>
#include <string_view>

#include "core/edit_distance.h"
#include "core/url.h"
#include "outpost/error.h"
#include "outpost/sinks/http.h"
#include "sinks/http/http_config.h"

namespace outpost {
namespace {

constexpr std::int64_t kMaxTimeoutMs = 3'600'000;  // one hour
constexpr std::int64_t kMaxConcurrency = 1024;

using http::HttpConfig;
using http::iequals;

bool is_ours(std::string_view key) {
  return key == "timeout_ms" || key == "concurrency" || key.starts_with("header.");
}

// The URL to call: the given one without our query parameters (others belong to the webhook
// and are passed through byte for byte) and without a fragment.
std::string target_url(std::string_view url) {
  if (auto hash = url.find('#'); hash != std::string_view::npos) url = url.substr(0, hash);
  auto q = url.find('?');
  if (q == std::string_view::npos) return std::string(url);
  std::string out(url.substr(0, q));
  std::string_view query = url.substr(q + 1);
  char sep = '?';
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (kv.empty()) continue;
    if (is_ours(core::percent_decode(kv.substr(0, kv.find('='))))) continue;
    out += sep;
    out += kv;
    sep = '&';
  }
  return out;
}

// Unknown parameters belong to the webhook, so a typo of one of ours would silently go there:
// reject names that are almost ours.
std::string near_miss(std::string_view key) {
  for (std::string_view ours : {"timeout_ms", "concurrency"})
    if (key.size() >= 6 && core::edit_distance(key, ours) <= 2) return std::string(ours);
  if (key.starts_with("header") && !key.starts_with("header.")) return "header.NAME";
  return {};
}

bool valid_header_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == ':' || c == '(' || c == ')' || c == ',' || c == ';' ||
        c == '"' || c == '/' || c == '[' || c == ']' || c == '?' || c == '=' || c == '{' ||
        c == '}' || c == '\\' || c == '<' || c == '>' || c == '@')
      return false;
  }
  return true;
}

// Headers the sink writes itself or that frame the request: a second copy beside the sink's
// (Idempotency-Key, ce-*, outpost-key-seq, traceparent) makes receivers that keep the last one
// deduplicate or trace by the URL's value, and a framing header (Content-Length, ...) breaks
// every request. Content-Type and Host may be set (curl then sends the URL's instead of its
// own). docs/sinks_file_http.md, "HTTP webhook".
bool owned_header(std::string_view name) {
  for (std::string_view owned :
       {"Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "TE", "Trailer",
        "Upgrade", "Expect", "Idempotency-Key", "outpost-key-seq", "traceparent", "tracestate"})
    if (iequals(name, owned)) return true;
  return name.size() > 3 && iequals(name.substr(0, 3), "ce-");
}

// The URL as curl will send it: what its own parser refuses (a space, a control character in
// the path) would fail every request, each one later dead-lettered, so it is refused here.
void check_curl_takes(const std::string& target, const std::string& shown) {
  std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> h(curl_url(), &curl_url_cleanup);
  if (!h) throw std::bad_alloc();
  if (CURLUcode rc = curl_url_set(h.get(), CURLUPART_URL, target.c_str(), 0); rc != CURLUE_OK)
    throw ConfigError("bad URL '" + shown + "': " + curl_url_strerror(rc) +
                      " (percent-encode spaces and other characters a URL cannot hold, e.g. "
                      "%20 for a space)");
}

// The URL read and checked, nothing opened: the same code opens and checks (check_sink_url).
HttpConfig parse_http_url(std::string_view url, const SinkOptions& options) {
  auto u = core::Url::parse(url);
  std::string shown = u.redacted();
  if (u.scheme() != "http" && u.scheme() != "https")
    throw ConfigError("bad URL '" + shown + "': scheme '" + u.scheme() + "' is not http or https");
  if (!u.hierarchical() || u.hosts().empty())
    throw ConfigError("bad URL '" + shown + "': missing host (expected " + u.scheme() +
                      "://host[:port]/path)");
  if (u.hosts().size() > 1)
    throw ConfigError("bad URL '" + shown + "': an HTTP sink takes exactly one host");

  HttpConfig config;
  config.timeout_ms = static_cast<long>(options.timeout.count());
  config.concurrency = options.concurrency;
  if (auto t = u.int_param("timeout_ms", 1, kMaxTimeoutMs))
    config.timeout_ms = static_cast<long>(*t);
  if (auto c = u.int_param("concurrency", 1, kMaxConcurrency))
    config.concurrency = static_cast<std::size_t>(*c);
  if (config.timeout_ms <= 0)
    throw ConfigError("HTTP sink: timeout must be positive, got " +
                      std::to_string(config.timeout_ms) + " ms");
  if (config.concurrency == 0 || config.concurrency > static_cast<std::size_t>(kMaxConcurrency))
    throw ConfigError("HTTP sink: concurrency must be in 1.." + std::to_string(kMaxConcurrency) +
                      ", got " + std::to_string(config.concurrency));
  for (const auto& [k, v] : u.query()) {
    if (!k.starts_with("header.")) continue;
    std::string name = k.substr(7);
    if (!valid_header_name(name))
      throw ConfigError("bad URL '" + shown + "': parameter '" + k +
                        "' does not name a valid HTTP header");
    if (owned_header(name))
      throw ConfigError("bad URL '" + shown + "': parameter '" + k + "' sets a header the sink " +
                        "writes itself or that frames the request (docs/sinks_file_http.md)");
    if (v.find_first_of("\r\n") != std::string::npos)
      throw ConfigError("bad URL '" + shown + "': parameter '" + k +
                        "' has a line break in its value");
    u.param(k);  // mark as known
    if (iequals(name, "content-type")) config.has_content_type = true;
    config.headers.emplace_back(std::move(name), v);
  }
  // Every other parameter is the webhook's own: mark them known so reject_unknown() passes.
  for (const auto& [k, v] : u.query()) {
    if (is_ours(k)) continue;
    if (std::string ours = near_miss(k); !ours.empty())
      throw ConfigError("bad URL '" + shown + "': unknown parameter '" + k + "' (did you mean '" +
                        ours + "'? parameters that are not the sink's go to the webhook)");
    u.param(k);
  }
  u.reject_unknown();
  config.target = target_url(url);
  config.shown = core::redact_url(config.target);
  check_curl_takes(config.target, config.shown);
  config.secrets.add_url(url);
  return config;
}

}  // namespace

std::unique_ptr<Sink> open_http_sink(std::string_view url, const SinkOptions& options) {
  return http::make_http_sink(parse_http_url(url, options));
}

void check_http_sink_url(std::string_view url) {
  parse_http_url(url, SinkOptions{});
}

}  // namespace outpost
