// The HTTP sink's failure classes (http_classify.h; docs/sinks_file_http.md, "Failure classes").

#include "sinks/http/http_classify.h"

#include <algorithm>
#include <charconv>
#include <string>

namespace outpost {

namespace http {

Outcome classify(CURLcode code, long status) {
  if (code != CURLE_OK) {
    switch (code) {
      case CURLE_COULDNT_RESOLVE_PROXY:
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_CONNECT:
      case CURLE_OPERATION_TIMEDOUT:
      case CURLE_SEND_ERROR:
      case CURLE_RECV_ERROR:
      case CURLE_GOT_NOTHING:   // the connection closed before a response (server restarting)
      case CURLE_PARTIAL_FILE:  // ... or in the middle of one
      case CURLE_SSL_CONNECT_ERROR:
      case CURLE_PEER_FAILED_VERIFICATION:  // the webhook's certificate: no event can get through
      case CURLE_HTTP2:
      case CURLE_HTTP2_STREAM:
      case CURLE_HTTP3:
      case CURLE_QUIC_CONNECT_ERROR:
      case CURLE_PROXY:
      case CURLE_NO_CONNECTION_AVAILABLE:
        return Outcome::unavailable;
      default:
        return Outcome::refused;
    }
  }
  if (status >= 200 && status < 300) return Outcome::delivered;
  switch (status) {
    case 408:  // Request Timeout: the server gave up waiting for the request, not on the event
    case 429:  // Too Many Requests
    case 502:  // Bad Gateway: the proxy in front of the webhook cannot reach it
    case 503:  // Service Unavailable
    case 504:  // Gateway Timeout
      return Outcome::unavailable;
    default:
      return Outcome::refused;
  }
}

Duration parse_retry_after(std::string_view value, std::chrono::system_clock::time_point now) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  if (value.empty()) return Duration{0};
  const auto max_seconds = std::chrono::duration_cast<std::chrono::seconds>(kMaxRetryAfter).count();
  std::int64_t seconds = 0;
  if (std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
    if (ec == std::errc::result_out_of_range) return kMaxRetryAfter;
    if (ec != std::errc() || end != value.data() + value.size()) return Duration{0};
  } else {
    // An HTTP-date in any of the three forms RFC 9110 allows; curl_getdate parses them all.
    std::string text(value);
    const time_t at = curl_getdate(text.c_str(), nullptr);
    if (at == -1) return Duration{0};
    const auto wait = std::chrono::system_clock::from_time_t(at) - now;
    if (wait <= std::chrono::system_clock::duration::zero()) return Duration{0};
    if (wait >= kMaxRetryAfter) return kMaxRetryAfter;
    return std::chrono::duration_cast<Duration>(wait);
  }
  if (seconds >= max_seconds) return kMaxRetryAfter;
  return std::chrono::duration_cast<Duration>(std::chrono::seconds(seconds));
}

}  // namespace http

}  // namespace outpost
