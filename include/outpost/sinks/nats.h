#pragma once
// The NATS JetStream sink (`nats://`, cnats).
//
//   nats://[user:password@]host:port[,host:port...]/SUBJECT?stream=NAME
//          [&create=1&duplicate_window_ms=N&max_pending=N&timeout_ms=N&lease_ms=N&backoff_max_ms=N]
//
// SUBJECT may contain `{type}` (`events.{type}`), replaced by the event type.
//
// Each event is published asynchronously with the payload as data, `Nats-Msg-Id: <event id>`
// (the server drops a second message with the same id inside the stream's duplicate window),
// and the CloudEvents 1.0 binary-mode headers (ce-id, ce-type, ce-partitionkey, ...). An event is
// `delivered` when its PubAck arrived; a PubAck flagged `duplicate` is delivered too (the stream
// already holds it). No PubAck within `timeout_ms` (default SinkOptions::timeout), a connection
// that is down (reported at once with the connection status), no responders and a JetStream that
// cannot store now (not enabled, no leader, out of storage, stream full) make the event
// `unavailable`; a negative PubAck that rejects the message (too large, failed expectation) is
// refused (`failed`) with the server's text. nats::classify decides (docs/sinks.md, "Failure
// classes"). At most `max_pending` (default 4096)
// publishes await their PubAck. Once an event of a key failed, later events of that key in the
// batch are reported `skipped` (they may already be stored; dedup by Nats-Msg-Id covers their
// redelivery inside the window).
//
// `stream` names the JetStream stream that must capture the subjects (checked at open);
// `create=1` creates it when missing (file storage, subjects = SUBJECT with `{type}` -> `>`).
// At open the sink warns (stderr) when the stream's duplicate window is shorter than
// lease + min(backoff_max, kMaxProbeWait) (SinkOptions::lease/backoff_max, or `lease_ms` /
// `backoff_max_ms`): a redelivery after that long is no longer deduplicated by the server
// (docs/sinks.md, "Duplicate window warning").
//
// Thread safety: deliver() calls are serialised by the relay; PubAcks arrive on cnats' thread.

#include <memory>
#include <string_view>

#include "outpost/sink.h"

namespace outpost {

// Throws ConfigError for a malformed URL or parameter, ConnectionError when the server cannot
// be reached at open, Error(not_found) when the stream does not exist and create is off.
std::unique_ptr<Sink> open_nats_sink(std::string_view url, const SinkOptions& options = {});
// The parse-only half of open_nats_sink (check_sink_url): throws the ConfigError it would for
// the URL and its parameters, and connects to nothing.
void check_nats_sink_url(std::string_view url);

}  // namespace outpost
