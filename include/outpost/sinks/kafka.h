#pragma once
// The Kafka sink (`kafka://`, librdkafka).
//
//   kafka://host:port[,host:port...]/TOPIC[?timeout_ms=N&partitioner=P&librdkafka.property=value...]
//
// TOPIC may contain `{type}`, replaced by the event type (`events.{type}` sends an
// `order.created` event to `events.order.created`); it must not be empty.
//
// Producer: idempotent (`enable.idempotence=true`, hence `acks=all`); unless set,
// `linger.ms=5` (deliver() flushes after producing its batch, ending the linger at once: it only
// gathers the batch into few requests), `socket.nagle.disable=true` and
// `reconnect.backoff.max.ms=1000` (back within a second after an outage).
// Every query parameter whose name contains a dot is passed to librdkafka as is
// (`?linger.ms=5&compression.type=zstd`, `security.protocol=SASL_SSL&sasl.mechanism=PLAIN&...`);
// a property librdkafka does not know is a ConfigError naming it.
//
// `partitioner` picks where a key lands (librdkafka's partitioners: murmur2_random is the Java
// client's and kafkajs' placement, so outpost and those producers put a key in the same
// partition; murmur2, consistent_random (librdkafka's default), consistent, fnv1a, fnv1a_random,
// random); any other value is a ConfigError listing them (docs/sinks.md, "Key placement").
//
// Each event is one message: the event key is the message key (every partitioner but `random`
// keeps a key in one partition, so its order is kept; an empty key is sent with no key and
// spread over partitions), the payload is the value, and the headers are the CloudEvents 1.0
// binary-mode headers (ce-specversion, ce-id = event id, ce-type, ce-source, ce-time,
// ce-partitionkey, ce-<name> per event header), plus `outpost-id` (the event id again, for
// consumers that do not speak CloudEvents).
//
// Outcome: an event is `delivered` only when its delivery report arrived without error, i.e. all
// in-sync replicas have it (acks=all). deliver() produces the whole batch asynchronously, then
// waits for the reports: librdkafka's `message.timeout.ms` defaults to `timeout_ms` (default
// SinkOptions::timeout), so every message gets a definite report within it; deliver() waits at
// most `timeout_ms` + 1 s (the second is slack for that report) and reports what is still out
// `unavailable` (a message timeout). A report with an error gives the class kafka::classify
// decides (docs/sinks.md, "Failure classes"): a cluster that is down or busy (message timed out,
// all brokers down, not leader, not enough replicas, queue full) is `unavailable`, a record the
// broker rejects (too large, invalid, topic not authorized) is refused (`failed`); the text is
// librdkafka's, after the class ("unavailable: kafka: Local: Message timed out (last error:
// ...)"). Once an event of a key failed or was unavailable,
// later events of that key in the same batch are reported `skipped`, although they were already
// handed to librdkafka and may reach the topic: Kafka keeps per-partition order, so a consumer
// can then see such a later event before the redelivery of the failed one (and the later one
// twice). Consumers deduplicate by ce-id; order of first occurrence is kept except in that
// failure window.
//
// Thread safety: deliver() calls are serialised by the relay; close() flushes.

#include <memory>
#include <string_view>

#include "outpost/sink.h"

namespace outpost {

// Throws ConfigError for a malformed URL, an unknown parameter or a librdkafka property it
// rejects (the message names it).
std::unique_ptr<Sink> open_kafka_sink(std::string_view url, const SinkOptions& options = {});
// The parse-only half of open_kafka_sink (check_sink_url): throws the ConfigError it would for
// the URL, its parameters and librdkafka properties, and makes no producer (connects nowhere).
void check_kafka_sink_url(std::string_view url);

}  // namespace outpost
