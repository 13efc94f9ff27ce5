#pragma once
// The HTTP webhook sink (`http://` and `https://`, libcurl).
//
//   http(s)://host[:port]/path[?timeout_ms=N&concurrency=N&header.NAME=VALUE...]
//
// One POST per event: the body is the payload; Content-Type is application/json unless the
// URL sets header.Content-Type or the event carries a `content_type` header. Each request
// carries the CloudEvents 1.0 binary-mode headers (ce-specversion, ce-id, ce-type, ce-source,
// ce-time, ce-partitionkey when the key is not empty, ce-<name> for each event header) and
// `Idempotency-Key: <event id>` so the receiver can deduplicate redeliveries.
//
// Outcome: a 2xx response is delivered. Otherwise the failure class (docs/sinks_file_http.md,
// "Failure classes"): no answer (DNS, connection refused or reset, timeout, TLS) and the statuses
// 408/429/502/503/504 are `unavailable` ("unavailable: HTTP 503 (Retry-After: 2): <body>", with
// the Retry-After as retry_after), and the rest of the batch is not sent; every other status is
// refused, `failed` ("refused: HTTP 404: <first ~200 bytes of the body>"). Redirects are not
// followed (a 3xx is refused).
//
// Parameters (removed from the URL that is called; every other query parameter stays, it
// belongs to the webhook):
//   timeout_ms   whole-request timeout in ms (default SinkOptions::timeout, 10 s)
//   concurrency  requests in flight at once (default SinkOptions::concurrency, 1); events of one
//                non-empty key are sent one at a time in order, and once one fails the later
//                events of that key in the batch are skipped
//   header.NAME  an extra request header sent with every event (e.g. header.Authorization=...)
// A parameter that is almost one of these (timout_ms, headers.X) is rejected as a typo.
// Connections are kept alive and reused across batches.
//
// Thread safety: deliver() may be called from several threads; batches are serialised.

#include <memory>
#include <string_view>

#include "outpost/sink.h"

namespace outpost {

// Throws ConfigError naming the bad URL part (scheme, host, parameter).
std::unique_ptr<Sink> open_http_sink(std::string_view url, const SinkOptions& options = {});
// The parse-only half of open_http_sink (check_sink_url): throws the ConfigError it would for
// the URL and its parameters, and connects to nothing.
void check_http_sink_url(std::string_view url);

}  // namespace outpost
