#pragma once
// The Redis Streams sink (`redis-stream://`, hiredis).
//
//   redis-stream://[:password@]host:port/STREAM[?db=N&maxlen=N&trim_every=N&timeout_ms=N]
//
// STREAM may contain `{type}` (`events.{type}`), replaced by the event type.
//
// Each event is one entry; a batch is one pipelined MULTI/EXEC transaction (one round trip):
//   XADD STREAM * id <event id> type <type> key <key> payload <payload>
//                 occurred_at <RFC 3339> headers <JSON object>
// The EXEC reply confirms the entries (guarantee 3). The transaction makes a batch all or
// nothing, so an error reply (-LOADING after a restart, -OOM) gives the whole batch one outcome
// and no later event of a key can land while an earlier one is missing; a broken connection
// makes the batch `unavailable` "in doubt" (it may have been added as a whole: consumers
// deduplicate by the `id` field). The class of each failure is redis_stream::classify's
// (docs/sinks.md, "Failure classes"): a server that is down, loading, busy or full (-OOM) is
// `unavailable`, the rest refused (`failed`). A command error at run time (-WRONGTYPE: the
// stream name is taken by another type) refuses only that event; later events of its key in the
// batch are reported `skipped` although they were added to their (other) streams. Redis Cluster is
// not supported by this sink (one node).
//
// Trimming (`maxlen=N`, 0/absent = never trim): every `trim_every` appended entries (default
// max(N/10, 100)) the sink trims the stream to about N entries, but never removes an entry a
// registered consumer has not read yet. Registered consumers are
//   - every consumer group of the stream: its last-delivered id and its oldest pending entry;
//   - every field of the hash `<STREAM>:checkpoints` (the checkpoint registry): field = consumer
//     name, value = the last stream id that consumer has processed (`HSET orders:checkpoints
//     billing 1700000000000-5`); a consumer that keeps its position elsewhere (in SQL)
//     mirrors it there. Delete its field when a consumer is retired, or trimming stops at it.
// The trim is `XTRIM STREAM MINID ~ <id>` with <id> the lower of the N-th newest entry and the
// oldest unread entry of any registered consumer, so entries are removed only below both.
//
// Thread safety: deliver() calls are serialised by the relay.

#include <memory>
#include <string_view>

#include "outpost/sink.h"

namespace outpost {

// Throws ConfigError for a malformed URL or parameter (the message names it). Connects lazily:
// an unreachable server fails deliveries, not the open.
std::unique_ptr<Sink> open_redis_stream_sink(std::string_view url, const SinkOptions& options = {});
// The parse-only half of open_redis_stream_sink (check_sink_url): throws the ConfigError it would
// for the URL and its parameters, and connects to nothing.
void check_redis_stream_sink_url(std::string_view url);

}  // namespace outpost
