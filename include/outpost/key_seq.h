#pragma once
// The key position of a delivered event (docs/sinks.md, "Key position"): StoredEvent::seq, on
// every store increasing along the order of the event's key, not contiguous (other keys' events
// and delivered ones take numbers between). A consumer that sees it go down for a key saw an
// inversion (a dead letter retried under on_dead=continue, or on PostgreSQL two transactions of
// one key that committed against their seq order: docs/postgres.md). Only events with a
// non-empty key carry it (the others have no order). Every sink delivers it: the header
// kKeySeqHeader on HTTP, Kafka and NATS; the field (Redis Streams) and JSON member (file sink,
// `outpost events list|show`) kKeySeqField. Handlers read StoredEvent::seq.

#include <string_view>

namespace outpost {

inline constexpr std::string_view kKeySeqHeader = "outpost-key-seq";
inline constexpr std::string_view kKeySeqField = "key_seq";

}  // namespace outpost
