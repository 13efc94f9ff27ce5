#pragma once
// The NATS JetStream sink's failure classes, decided in one place (docs/sinks.md, "Failure
// classes"): whether a failed publish or a negative PubAck means the server or JetStream is down
// or full (`unavailable`: the relay pauses the sink, no attempt is counted) or that it refused
// this message (`refused`: `failed`, an attempt).

#include <nats/nats.h>

namespace outpost::nats {

enum class Outcome { unavailable, refused };

// `status`: cnats' status of the publish or of the PubAck (jsPubAckErr::Err); `js_code`: the
// JetStream API error code of a negative PubAck (jsPubAckErr::ErrCode), 0 when there is none.
//  - unavailable: the connection is down, closed or stale, no PubAck in time (NATS_TIMEOUT, also
//    a publish that stalled on a full pending window), NATS_NO_RESPONDERS (nobody answers on
//    the subject: JetStream is not enabled or restarting, or no stream captures the subject, e.g.
//    the stream was deleted under the relay: the backlog waits for it instead of being
//    dead-lettered), and the JetStream codes for a server that cannot store now: not enabled
//    (10076, 10039), cluster unavailable / no leader / no peers (10008, 10009, 10005),
//    insufficient resources or storage (10023, 10028, 10047), the stream is full
//    ("maximum messages exceeded" with discard new: 10077, 10053).
//  - refused: the message is rejected: larger than the stream's or the server's maximum
//    (10054, NATS_MAX_PAYLOAD), a failed expectation (10060, 10063, 10070, 10071), anything else.
Outcome classify(natsStatus status, int js_code);

}  // namespace outpost::nats
