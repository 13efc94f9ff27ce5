#pragma once
// The Kafka sink's failure classes, decided in one place (docs/sinks.md, "Failure classes"):
// whether an error of librdkafka (a delivery report, or producev itself) means the cluster is
// down or busy (`unavailable`: the relay pauses the sink, no attempt is counted) or that it
// refused this record (`refused`: `failed`, an attempt).

#include <librdkafka/rdkafka.h>

namespace outpost::kafka {

enum class Outcome { unavailable, refused };

// unavailable: the message timed out (message.timeout.ms: no broker took it in time), the
//   local queue is full, no broker can be reached (transport, DNS, TLS, SASL, all brokers
//   down), and the brokers' "not now" answers (leader or broker not available, not leader,
//   not enough replicas, request timed out, storage error, throttled), a fatal idempotence
//   error (the producer is recreated for the next batch).
// refused: the record itself is rejected: too large, invalid or corrupt, the topic is unknown
//   or its name invalid, not authorized for the topic, policy violation; and anything else.
Outcome classify(rd_kafka_resp_err_t err);

}  // namespace outpost::kafka
