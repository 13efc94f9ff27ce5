#pragma once
// The HTTP sink's failure classes, decided in one place (docs/sinks_file_http.md, "Failure
// classes"): whether a request that did not succeed found the webhook down or busy
// (`unavailable`: the relay pauses the sink, no attempt is counted) or was refused by it
// (`refused`: reported `failed`, an attempt of that event).

#include <curl/curl.h>

#include <chrono>
#include <string_view>

#include "outpost/event.h"

namespace outpost::http {

enum class Outcome { delivered, unavailable, refused };

// `code`: curl's result of the transfer (CURLE_OK when a response came back); `status`: the
// HTTP status of that response (ignored unless code is CURLE_OK).
//  - 2xx: delivered.
//  - unavailable: no answer from the webhook (DNS, connect refused or timed out, connection
//    reset or closed without a response, request timeout, TLS handshake or certificate), and
//    the statuses that say "not now": 408, 429, 502, 503, 504.
//  - refused: every other status (3xx: redirects are not followed; 4xx; 500 and the other 5xx:
//    a 500 is usually this request failing in the handler, which webhook systems retry as an
//    attempt), and curl errors that are ours or the URL's (malformed URL, unsupported protocol,
//    a reply that is not HTTP).
Outcome classify(CURLcode code, long status);

// The longest Retry-After honoured; a webhook asking for more is probed again after this.
inline constexpr Duration kMaxRetryAfter{3'600'000};

// The wait a Retry-After header value asks for, as seen at `now`: delta-seconds ("120") or an
// HTTP-date ("Wed, 21 Oct 2026 07:28:00 GMT"), capped at kMaxRetryAfter. 0 (no hint) when the
// value is empty, not understood, or a date that has passed.
Duration parse_retry_after(std::string_view value, std::chrono::system_clock::time_point now);

}  // namespace outpost::http
