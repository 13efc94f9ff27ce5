#pragma once
// The Redis Streams sink's failure classes, decided in one place (docs/sinks.md, "Failure
// classes"): whether a failure means the server is down or busy (`unavailable`: the relay pauses
// the sink, no attempt is counted) or that it refused these entries (`refused`: `failed`, an
// attempt).

#include <string_view>

namespace outpost::redis_stream {

enum class Outcome { unavailable, refused };

// `io_error`: hiredis' context error (REDIS_ERR_IO, _EOF, _PROTOCOL, _OOM; a timeout is _IO) when
// the connection failed, else 0; `reply_error`: the server's error reply ("OOM command not allowed
// ...") when io_error is 0.
//  - unavailable: every connection error (refused, reset, timed out, DNS), and the replies that
//    say the server cannot take writes now: LOADING, BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN,
//    OOM (maxmemory reached, like a full disk), MISCONF (it cannot persist), READONLY (a replica
//    after a failover), NOREPLICAS, NOAUTH/WRONGPASS (no event can get in until the password is
//    fixed: dead-lettering the backlog would not help).
//  - refused: every other error reply (WRONGTYPE: the stream's name holds another type, NOPERM,
//    ERR ...).
Outcome classify(int io_error, std::string_view reply_error);

}  // namespace outpost::redis_stream
